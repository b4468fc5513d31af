package wasmmeter

import (
	"math"
	"runtime"
	"sort"

	"github.com/wasmhost/wasmhost/internal/wasmbin"
)

// Immediate kinds of single-byte opcodes.
const (
	kUnknown  = iota // not an opcode wazero knows: refused
	kRefused         // known, but from a proposal the rewriter does not handle
	kNone            // no immediate
	kU32             // one u32 (local, label, table index)
	kGlobal          // global index
	kBlock           // block, if: block type
	kLoop            // loop: block type, then the fuel check
	kBrTable         // vec(label) label
	kCall            // call, return_call: function index
	kCallInd         // call_indirect, return_call_indirect: type index, table index
	kSelectT         // select with value types
	kMemarg          // memory load or store
	kMemIdx          // memory.size, memory.grow: reserved memory index
	kI32Const        // signed LEB128, at most 5 bytes
	kI64Const        // signed LEB128, at most 10 bytes
	kF32Const        // 4 bytes
	kF64Const        // 8 bytes
	kRefNull         // reference type byte
	kRefFunc         // function index
	kMisc            // 0xFC prefix
	kVec             // 0xFD prefix
	kAtomic          // 0xFE prefix
)

var opKinds = func() (k [256]uint8) {
	set := func(lo, hi byte, kind uint8) {
		for i := int(lo); i <= int(hi); i++ {
			k[i] = kind
		}
	}
	set(wasmbin.OpUnreachable, wasmbin.OpNop, kNone)
	set(wasmbin.OpBlock, wasmbin.OpBlock, kBlock)
	set(wasmbin.OpLoop, wasmbin.OpLoop, kLoop)
	set(wasmbin.OpIf, wasmbin.OpIf, kBlock)
	set(wasmbin.OpElse, wasmbin.OpElse, kNone)
	set(wasmbin.OpTry, wasmbin.OpThrowRef, kRefused) // try, catch, throw, rethrow, throw_ref
	set(wasmbin.OpEnd, wasmbin.OpEnd, kNone)
	set(wasmbin.OpBr, wasmbin.OpBrIf, kU32)
	set(wasmbin.OpBrTable, wasmbin.OpBrTable, kBrTable)
	set(wasmbin.OpReturn, wasmbin.OpReturn, kNone)
	set(wasmbin.OpCall, wasmbin.OpCall, kCall)
	set(wasmbin.OpCallIndirect, wasmbin.OpCallIndirect, kCallInd)
	set(wasmbin.OpReturnCall, wasmbin.OpReturnCall, kCall)
	set(wasmbin.OpReturnCallIndirect, wasmbin.OpReturnCallIndirect, kCallInd)
	set(wasmbin.OpCallRef, wasmbin.OpReturnCallRef, kRefused)
	set(wasmbin.OpDelegate, wasmbin.OpCatchAll, kRefused)
	set(wasmbin.OpDrop, wasmbin.OpSelect, kNone)
	set(wasmbin.OpSelectT, wasmbin.OpSelectT, kSelectT)
	set(wasmbin.OpTryTable, wasmbin.OpTryTable, kRefused)
	set(wasmbin.OpLocalGet, wasmbin.OpLocalTee, kU32)
	set(wasmbin.OpGlobalGet, wasmbin.OpGlobalSet, kGlobal)
	set(wasmbin.OpTableGet, wasmbin.OpTableSet, kU32)
	set(wasmbin.OpI32Load, wasmbin.OpI64Store32, kMemarg)
	set(wasmbin.OpMemorySize, wasmbin.OpMemoryGrow, kMemIdx)
	set(wasmbin.OpI32Const, wasmbin.OpI32Const, kI32Const)
	set(wasmbin.OpI64Const, wasmbin.OpI64Const, kI64Const)
	set(wasmbin.OpF32Const, wasmbin.OpF32Const, kF32Const)
	set(wasmbin.OpF64Const, wasmbin.OpF64Const, kF64Const)
	set(wasmbin.OpI32Eqz, wasmbin.OpI64Extend32S, kNone) // numeric, conversions, sign extension
	set(wasmbin.OpRefNull, wasmbin.OpRefNull, kRefNull)
	set(wasmbin.OpRefIsNull, wasmbin.OpRefIsNull, kNone)
	set(wasmbin.OpRefFunc, wasmbin.OpRefFunc, kRefFunc)
	set(wasmbin.OpRefAsNonNull, wasmbin.OpBrOnNonNull, kRefused) // ref.as_non_null, br_on_null, br_on_non_null
	set(wasmbin.OpPrefixMisc, wasmbin.OpPrefixMisc, kMisc)
	set(wasmbin.OpPrefixVec, wasmbin.OpPrefixVec, kVec)
	set(wasmbin.OpPrefixAtomic, wasmbin.OpPrefixAtomic, kAtomic)
	return k
}()

// Immediate kinds of SIMD opcodes. wazero reads the opcode after 0xFD as one
// byte (not as the LEB128 u32 of the specification; for an opcode of 0x80
// or more the second LEB128 byte, 0x01, then reads as a nop), and the
// rewriter must split instructions exactly as wazero does.
const (
	vUnknown    = iota
	vNone       // no immediate
	vMemarg     // v128.load*, v128.store, load32_zero, load64_zero
	vMemargLane // load_lane, store_lane: memarg and a lane byte
	vLane       // extract_lane, replace_lane: a lane byte
	v16         // v128.const, i8x16.shuffle: 16 bytes
)

var vecKinds = func() (k [256]uint8) {
	for i := range k {
		k[i] = vNone
	}
	for i := wasmbin.VecV128Load; i <= wasmbin.VecV128Store; i++ {
		k[i] = vMemarg
	}
	k[wasmbin.VecV128Const], k[wasmbin.VecI8x16Shuffle] = v16, v16
	for i := wasmbin.VecI8x16ExtractLaneS; i <= wasmbin.VecF64x2ReplaceLane; i++ {
		k[i] = vLane
	}
	for i := wasmbin.VecV128Load8Lane; i <= wasmbin.VecV128Store64Lane; i++ {
		k[i] = vMemargLane
	}
	k[wasmbin.VecV128Load32Zero], k[wasmbin.VecV128Load64Zero] = vMemarg, vMemarg
	// Opcodes the SIMD proposal removed before it was finished.
	for _, i := range []int{0x9a, 0xa2, 0xa5, 0xa6, 0xaf, 0xb0, 0xb2, 0xb3, 0xb4, 0xbb,
		0xc2, 0xc5, 0xc6, 0xcf, 0xd0, 0xd2, 0xd3, 0xd4, 0xe2, 0xee} {
		k[i] = vUnknown
	}
	return k
}()

// refusedName names the refused opcodes, for error messages.
func refusedName(op byte) string {
	switch op {
	case wasmbin.OpTry, wasmbin.OpTry + 1, wasmbin.OpTry + 2, wasmbin.OpTry + 3, wasmbin.OpThrowRef, wasmbin.OpDelegate, wasmbin.OpCatchAll, wasmbin.OpTryTable:
		return "an exception-handling instruction"
	case wasmbin.OpCallRef, wasmbin.OpReturnCallRef, wasmbin.OpRefAsNonNull, wasmbin.OpRefAsNonNull + 1, wasmbin.OpBrOnNonNull:
		return "a typed-function-references instruction"
	}
	return "an unknown instruction"
}

// emitCode rewrites the code section: each body gets the fuel check at its
// entry and at the top of each loop, a charge before each bulk instruction
// (and an i32 local if one of them has a length known only at run time),
// and its calls renumbered.
func (r *rewriter) emitCode(s section) error {
	in := r.in[:s.end]
	cnt, n := wasmbin.U32(in, s.body)
	if n == 0 {
		return r.malformed(s.body, "bad code count")
	}
	if cnt != r.nFuncs {
		return r.malformed(s.body, "%d bodies for %d functions", cnt, r.nFuncs)
	}
	mark := r.openSection(wasmbin.SecCode, s.end-s.body)
	r.out = append(r.out, in[s.body:s.body+n]...)
	// Where each body's size starts, and where the section's last ends.
	starts := make([]int, cnt+1)
	p := s.body + n
	for i := range cnt {
		starts[i] = p
		size, n := wasmbin.U32(in, p)
		if n == 0 {
			return r.malformed(p, "bad size of body %d", i)
		}
		p += n
		if uint64(size) > uint64(len(in)-p) {
			return r.malformed(p, "body %d runs past the code section", i)
		}
		p += int(size)
	}
	if p != s.end {
		return r.malformed(p, "code section has %d trailing bytes", s.end-p)
	}
	starts[cnt] = p
	// A body's rewrite depends on nothing but the body and what the scan
	// found, so a large section is cut in two halves of about equal size,
	// the second rewritten meanwhile by a copy of r into its own buffer
	// and appended: the same bytes, in about half the time when a second
	// core is free, on the load path of every plugin.
	mid := cnt
	if splitCode(s.end - s.body) {
		half := starts[0] + (p-starts[0])/2
		mid = uint32(sort.Search(int(cnt), func(i int) bool { return starts[i] >= half }))
	}
	var second *rewriter
	var done chan struct{}
	if mid < cnt {
		second = &rewriter{}
		*second = *r
		second.out = make([]byte, 0, p-starts[mid]+int(cnt-mid)*len(r.seq)+(p-starts[mid])/16)
		done = make(chan struct{})
		go func() {
			defer close(done)
			second.bodies(in, starts, mid, cnt)
		}()
	}
	r.bodies(in, starts, 0, mid)
	if second != nil {
		<-done
		if r.err == nil && second.err != nil {
			r.err = second.err
		}
		r.out = append(r.out, second.out...)
		r.blocks += second.blocks
	}
	if r.err != nil {
		return r.err
	}
	if r.blocks > MaxCompileWork {
		return r.fail(ErrLimit, s.body, "compile work %d (the sum over functions of their blocks squared) is over the limit of %d", r.blocks, MaxCompileWork)
	}
	r.closeSection(mark)
	return nil
}

// splitCode reports whether emitCode rewrites the second half of a code
// section of the given size on another goroutine: with a second core, from
// 256 KiB on. Go-compiled plugins (megabytes) are split; small ones are
// rewritten faster than a goroutine starts. Tests replace it.
var splitCode = func(size int) bool {
	return size >= 256<<10 && runtime.GOMAXPROCS(0) > 1
}

// bodies appends the instrumented bodies from up to to (exclusive) to r.out,
// each preceded by its new size; starts holds where each body's size
// starts in in. It stops at the first failure, which it leaves in r.err.
func (r *rewriter) bodies(in []byte, starts []int, from, to uint32) {
	for i := from; i < to; i++ {
		size, n := wasmbin.U32(in, starts[i])
		p := starts[i] + n
		r.fidx = r.nImpFuncs + i
		r.base = p
		if size > MaxBodyBytes {
			r.codeFail(ErrLimit, 0, "body of %d bytes, over the limit of %d", size, MaxBodyBytes)
			return
		}
		bmark := r.reserveSize(int(size))
		r.body(in[p : p+int(size)])
		if r.err != nil {
			return
		}
		r.closeSection(bmark)
	}
}

// body appends the instrumented function body b to r.out. On failure it
// sets r.err.
func (r *rewriter) body(b []byte) {
	n := len(b)
	cnt, w := wasmbin.U32(b, 0)
	if w == 0 {
		r.codeFail(ErrMalformed, 0, "bad local declaration count")
		return
	}
	p := w
	if uint64(cnt) > uint64(n-p)/2 {
		// A declaration takes two bytes at least.
		r.codeFail(ErrMalformed, 0, "%d local declarations in a body of %d bytes", cnt, n)
		return
	}
	var nLocals uint64 // declared, not counting the parameters
	for i := uint32(0); i < cnt; i++ {
		c, w := wasmbin.U32(b, p)
		if w == 0 || p+w >= n {
			r.codeFail(ErrMalformed, p, "local declarations truncated")
			return
		}
		nLocals += uint64(c)
		if nLocals > MaxLocals {
			r.codeFail(ErrLimit, p, "more than %d locals", MaxLocals)
			return
		}
		p += w
		if !wasmbin.IsNumOrRefType(b[p]) {
			r.codeFail(ErrUnsupported, p, "local of type %#x", b[p])
			return
		}
		p++
	}
	declEnd := p // out[bodyStart:][:declEnd] is b[:declEnd] until the end

	out := r.out
	bodyStart := len(out)
	copyFrom := 0
	// The index of the i32 local that a bulk instruction of runtime length
	// keeps its length in, once the first one needs it: appended after the
	// declared locals, it moves no other.
	scratch := int64(-1)
	// The entry check can wait until the first instruction that may branch,
	// call or loop; placed there, it merges with the check of a loop that
	// opens the function (as in every Go-compiled function).
	p, opened := r.prologue(b, p)
	if p >= n {
		r.codeFail(ErrMalformed, n, "body does not end with end") // unless prologue failed first
		return
	}
	if b[p] != wasmbin.OpLoop {
		out = append(out, b[:p]...)
		out = append(out, r.seq...)
		copyFrom = p
	}

	start, prev := p, p // the current and the previous instruction
	depth := 1 + opened // of nested blocks, the body's own included
	blocks := opened    // blocks, loops and ifs opened
	for p < n {
		prev, start = start, p
		op := b[p]
		p++
		k := opKinds[op]
		// The two commonest kinds first (local.get alone is a sixth of a
		// Go module's instructions), outside the switch's jump table.
		if k == kU32 {
			if p < n && b[p] < 0x80 {
				p++
			} else {
				p = skipU32(b, p)
			}
			continue
		}
		if k == kNone {
			if op == wasmbin.OpEnd {
				depth--
			}
			continue
		}
		switch k {
		case kGlobal:
			g, w := wasmbin.U32(b, p)
			if w == 0 || g >= r.nGlobals {
				p = r.badIndex(w, start, "global", g)
				break
			}
			p += w
		case kMemarg:
			if n-p > 2 && b[p] < 0x40 && b[p+1] < 0x80 {
				p += 2
			} else {
				p = r.memarg(b, p)
			}
		case kBlock:
			p = r.blockType(b, p)
			p = r.openBlock(p, start, &depth, &blocks)
		case kLoop:
			p = r.blockType(b, p)
			p = r.openBlock(p, start, &depth, &blocks)
			if p <= n {
				out = append(out, b[copyFrom:p]...)
				out = append(out, r.seq...)
				copyFrom = p
			}
		case kCall, kRefFunc:
			f, w := wasmbin.U32(b, p)
			if w == 0 || f >= r.nAllFuncs {
				p = r.badIndex(w, start, "function", f)
				break
			}
			if f >= r.nImpFuncs {
				out = append(out, b[copyFrom:p]...)
				out = wasmbin.AppendU32Width(out, f+1, w)
				copyFrom = p + w
			}
			p += w
		case kI32Const:
			if p < n && b[p] < 0x80 {
				p++
			} else {
				p = skipLEB(b, p, 5)
			}
		case kI64Const:
			p = skipLEB(b, p, 10)
		case kF32Const:
			p += 4
		case kF64Const:
			p += 8
		case kBrTable:
			p = r.brTable(b, p)
		case kCallInd:
			t, w := wasmbin.U32(b, p)
			if w == 0 || t >= r.nTypes {
				p = r.badIndex(w, start, "type", t)
				break
			}
			p = skipU32(b, p+w)
		case kMemIdx:
			p = skipU32(b, p)
		case kSelectT:
			p = r.selectT(b, p)
		case kRefNull:
			if p < n && (b[p] == wasmbin.FuncRef || b[p] == wasmbin.ExternRef) {
				p++
			} else {
				p = r.codeFail(ErrUnsupported, start, "ref.null of a type other than funcref or externref")
			}
		case kMisc:
			sub, _ := wasmbin.U32(b, p)
			if sub == wasmbin.MiscTableGrow && r.unbounded {
				p = r.codeFail(ErrLimit, start, "table.grow in a module with a table that has no maximum size")
				break
			}
			if p = r.misc(b, p); p > n || bulkShift[min(sub, wasmbin.MiscTableFill+1)] == 0 {
				break
			}
			// A bulk instruction: charge for its length before it runs.
			shift := bulkShift[sub]
			if prev < start && b[prev] == wasmbin.OpI32Const {
				// The length is the constant just pushed: charge it now.
				if c, w := wasmbin.S32(b, prev+1); w != 0 && prev+1+w == start {
					if charge := uint32(c) >> shift; charge != 0 {
						out = append(out, b[copyFrom:start]...)
						out = r.appendConstCharge(out, charge)
						copyFrom = start
					}
					break
				}
			}
			if scratch < 0 {
				if scratch = r.scratchLocal(nLocals, cnt); scratch < 0 {
					p = bad
					break
				}
			}
			out = append(out, b[copyFrom:start]...)
			out = r.appendCharge(out, uint32(scratch), shift)
			copyFrom = start
		case kVec:
			p = r.vec(b, p)
		case kAtomic:
			p = r.atomic(b, p)
		case kRefused:
			p = r.codeFail(ErrUnsupported, start, "opcode %#x is %s", op, refusedName(op))
		default:
			p = r.codeFail(ErrUnsupported, start, "unknown opcode %#x", op)
		}
	}
	if r.err != nil {
		return
	}
	r.blocks += uint64(blocks) * uint64(blocks)
	if p != n || b[start] != wasmbin.OpEnd || depth != 0 {
		r.codeFail(ErrMalformed, start, "truncated instruction or body not ending with end")
		return
	}
	out = append(out, b[copyFrom:]...)
	if scratch >= 0 {
		out = addLocal(out, bodyStart, b[:declEnd], cnt, w)
	}
	r.out = out
}

// openBlock counts a block, loop or if that opens at offset start of the
// body, p being the position after its block type, and returns p, or bad
// past a limit.
func (r *rewriter) openBlock(p, start int, depth, blocks *int) int {
	*depth++
	*blocks++
	switch {
	case *depth > MaxNesting:
		return r.codeFail(ErrLimit, start, "blocks nested deeper than %d", MaxNesting)
	case *blocks > MaxBlocks:
		return r.codeFail(ErrLimit, start, "more than %d blocks, loops and ifs in one function", MaxBlocks)
	}
	return p
}

// addLocal appends one i32 to the local declarations at the start of body
// out[bodyStart:], which are decl (cnt entries after a count of width w),
// moving the code after them.
func addLocal(out []byte, bodyStart int, decl []byte, cnt uint32, w int) []byte {
	var buf [5]byte
	head := wasmbin.AppendU32Width(buf[:0], cnt+1, w)
	grow := len(head) - w + 2
	code := bodyStart + len(decl) // where the code starts now
	out = append(out, zeros[:grow]...)
	copy(out[code+grow:], out[code:len(out)-grow])
	copy(out[bodyStart:], head)
	copy(out[bodyStart+len(head):], decl[w:])
	out[code+grow-2], out[code+grow-1] = 1, wasmbin.I32 // one i32
	return out
}

// Bulk instructions are charged in proportion to their length, one unit of
// fuel per 2^shift bytes or elements; see the package doc for the choice.
const (
	// bulkMemShift is for memory.init, memory.copy and memory.fill, whose
	// length is in bytes: one unit per 16 bytes.
	bulkMemShift = 4
	// bulkTableShift is for table.init, table.copy and table.fill, whose
	// length is in elements of 8 bytes (a pointer each, in wazero): one unit
	// per 2 elements, the same 16 bytes per unit. A shift of 1 or more also
	// keeps every charge below 2^31, a positive i32.
	bulkTableShift = 1
)

// bulkShift gives, by 0xFC sub-opcode, the shift of the bulk instructions'
// charge, and 0 for the other instructions. table.grow is charged as
// table.fill: its delta, on top of the stack, is the number of entries it
// allocates and fills.
var bulkShift = [wasmbin.MiscTableFill + 2]uint8{
	wasmbin.MiscMemoryInit: bulkMemShift,
	wasmbin.MiscMemoryCopy: bulkMemShift,
	wasmbin.MiscMemoryFill: bulkMemShift,
	wasmbin.MiscTableInit:  bulkTableShift,
	wasmbin.MiscTableCopy:  bulkTableShift,
	wasmbin.MiscTableGrow:  bulkTableShift,
	wasmbin.MiscTableFill:  bulkTableShift,
}

// appendCharge appends the charge of a bulk instruction whose length, an
// i32 on top of the stack, it leaves in place:
//
//	local.tee $len
//	local.get $len
//	i32.const shift
//	i32.shr_u
//	local.tee $len    ;; now the charge, in [0, 2^31)
//	global.get $fuel
//	i32.ge_s
//	if                ;; the charge would spend the fuel: check first
//	  call $tick
//	  global.set $fuel
//	else
//	  global.get $fuel
//	  local.get $len
//	  i32.sub
//	  global.set $fuel
//	end
//
// Unlike a subtraction and a test of its result, the comparison cannot
// overflow, whatever the fuel (tick's result) is, and the else branch leaves
// the fuel at 1 or more. When the check ticks, the fuel it grants is not
// charged: the check has come, before the work, which is what the charge is
// for.
func (r *rewriter) appendCharge(out []byte, local uint32, shift uint8) []byte {
	out = append(out, wasmbin.OpLocalTee)
	out = wasmbin.AppendU32(out, local)
	out = append(out, wasmbin.OpLocalGet)
	out = wasmbin.AppendU32(out, local)
	out = append(out, wasmbin.OpI32Const, shift, wasmbin.OpI32ShrU, wasmbin.OpLocalTee)
	out = wasmbin.AppendU32(out, local)
	out = append(out, wasmbin.OpGlobalGet)
	out = wasmbin.AppendU32(out, r.nGlobals)
	out = append(out, wasmbin.OpI32GeS)
	out = r.appendChargeTail(out)
	out = append(out, wasmbin.OpLocalGet)
	out = wasmbin.AppendU32(out, local)
	return r.appendChargeEnd(out)
}

// appendConstCharge appends the charge of a bulk instruction whose length
// is a constant: as appendCharge, with the charge c as a constant and no
// local.
func (r *rewriter) appendConstCharge(out []byte, c uint32) []byte {
	out = append(out, wasmbin.OpI32Const)
	out = wasmbin.AppendS64(out, int64(c))
	out = append(out, wasmbin.OpGlobalGet)
	out = wasmbin.AppendU32(out, r.nGlobals)
	out = append(out, wasmbin.OpI32GeS)
	out = r.appendChargeTail(out)
	out = append(out, wasmbin.OpI32Const)
	out = wasmbin.AppendS64(out, int64(c))
	return r.appendChargeEnd(out)
}

// appendChargeTail appends, after the comparison, the charge's code up to
// the charge that the else branch subtracts.
func (r *rewriter) appendChargeTail(out []byte) []byte {
	out = append(out, wasmbin.OpIf, wasmbin.BlockEmpty, wasmbin.OpCall)
	out = wasmbin.AppendU32(out, r.nImpFuncs)
	out = append(out, wasmbin.OpGlobalSet)
	out = wasmbin.AppendU32(out, r.nGlobals)
	out = append(out, wasmbin.OpElse, wasmbin.OpGlobalGet)
	return wasmbin.AppendU32(out, r.nGlobals)
}

// appendChargeEnd appends the end of the charge's code, after the charge
// in its else branch.
func (r *rewriter) appendChargeEnd(out []byte) []byte {
	out = append(out, wasmbin.OpI32Sub, wasmbin.OpGlobalSet)
	out = wasmbin.AppendU32(out, r.nGlobals)
	return append(out, wasmbin.OpEnd)
}

// scratchLocal returns the index of the i32 local to add to function r.fidx,
// which declares nLocals locals in cnt entries, or fails and returns -1.
func (r *rewriter) scratchLocal(nLocals uint64, cnt uint32) int64 {
	idx := uint64(r.funcParams[r.fidx-r.nImpFuncs]) + nLocals
	if nLocals >= math.MaxUint32 || idx >= math.MaxUint32 || cnt == math.MaxUint32 {
		r.codeFail(ErrUnsupported, 0, "too many locals to add one for a bulk instruction")
		return -1
	}
	return int64(idx)
}

// prologue returns the position of the first instruction at or after b[p:]
// that may branch, call, trap into a loop or open one: everything before it
// (nop, block, local and global access, constants) runs straight through.
// It also returns the number of blocks it passed.
func (r *rewriter) prologue(b []byte, p int) (int, int) {
	blocks := 0
	for p < len(b) {
		at := p
		switch b[p] {
		case wasmbin.OpNop:
			p++
		case wasmbin.OpBlock:
			p = r.blockType(b, p+1)
			if blocks++; blocks >= min(MaxNesting, MaxBlocks) {
				return r.codeFail(ErrLimit, at, "blocks nested deeper than %d", MaxNesting), blocks
			}
		case wasmbin.OpLocalGet, wasmbin.OpLocalSet, wasmbin.OpLocalTee:
			p = skipU32(b, p+1)
		case wasmbin.OpGlobalGet, wasmbin.OpGlobalSet:
			g, w := wasmbin.U32(b, p+1)
			if w == 0 || g >= r.nGlobals {
				return r.badIndex(w, at, "global", g), blocks
			}
			p += 1 + w
		case wasmbin.OpI32Const:
			p = skipLEB(b, p+1, 5)
		case wasmbin.OpI64Const:
			p = skipLEB(b, p+1, 10)
		case wasmbin.OpF32Const:
			p += 5
		case wasmbin.OpF64Const:
			p += 9
		default:
			return p, blocks
		}
		if p > len(b) {
			return r.codeFail(ErrMalformed, at, "truncated instruction"), blocks // unless it failed already
		}
	}
	return p, blocks
}

// badIndex fails for the instruction at offset at, whose index of the given
// kind is malformed (w == 0) or out of range.
func (r *rewriter) badIndex(w, at int, kind string, idx uint32) int {
	if w == 0 {
		return r.codeFail(ErrMalformed, at, "bad %s index", kind)
	}
	return r.codeFail(ErrMalformed, at, "%s index %d out of range", kind, idx)
}

// skipU32 returns the position after the u32 at b[p:], or bad.
func skipU32(b []byte, p int) int {
	if p < len(b) && b[p] < 0x80 {
		return p + 1
	}
	if _, w := wasmbin.U32(b, p); w != 0 {
		return p + w
	}
	return bad
}

// memarg returns the position after the memory argument at b[p:].
func (r *rewriter) memarg(b []byte, p int) int {
	a, w := wasmbin.U32(b, p)
	if w == 0 {
		return bad
	}
	if a >= 64 {
		return r.codeFail(ErrUnsupported, p, "memory argument with a memory index (multiple memories)")
	}
	return skipU32(b, p+w)
}

// blockType returns the position after the block type at b[p:].
func (r *rewriter) blockType(b []byte, p int) int {
	if p >= len(b) {
		return bad
	}
	c := b[p]
	if c == wasmbin.BlockEmpty || wasmbin.IsNumOrRefType(c) {
		return p + 1
	}
	if c < 0x40 { // a type index below 64
		if uint32(c) >= r.nTypes {
			return r.codeFail(ErrMalformed, p, "block type index %d out of range", c)
		}
		return p + 1
	}
	if c < 0x80 { // another negative one-byte value: exnref, (ref ...)
		return r.codeFail(ErrUnsupported, p, "block type %#x", c)
	}
	v, w := wasmbin.S33(b, p)
	if w == 0 {
		return bad
	}
	if v < 0 {
		switch v {
		case -64, -1, -2, -3, -4, -5, -16, -17:
			return p + w
		}
		return r.codeFail(ErrUnsupported, p, "block type %d", v)
	}
	if v >= int64(r.nTypes) {
		return r.codeFail(ErrMalformed, p, "block type index %d out of range", v)
	}
	return p + w
}

// brTable returns the position after the immediates of br_table at b[p:].
func (r *rewriter) brTable(b []byte, p int) int {
	cnt, w := wasmbin.U32(b, p)
	if w == 0 {
		return bad
	}
	p += w
	if uint64(cnt) >= uint64(len(b)-p) {
		// A label takes a byte at least, and the default one more.
		return r.codeFail(ErrMalformed, p-w-1, "br_table of %d labels in the %d bytes left", cnt, len(b)-p)
	}
	for i := uint64(0); i <= uint64(cnt); i++ { // the labels, then the default
		if p < len(b) && b[p] < 0x80 {
			p++
			continue
		}
		if p = skipU32(b, p); p == bad {
			return bad
		}
	}
	return p
}

// selectT returns the position after the value types of select at b[p:].
func (r *rewriter) selectT(b []byte, p int) int {
	if len(b)-p < 2 {
		return bad
	}
	if b[p] != 1 {
		return r.codeFail(ErrMalformed, p, "select with %d value types", b[p])
	}
	if !wasmbin.IsNumOrRefType(b[p+1]) {
		return r.codeFail(ErrUnsupported, p+1, "select of value type %#x", b[p+1])
	}
	return p + 2
}

// misc returns the position after the 0xFC-prefixed instruction whose
// LEB128 sub-opcode is at b[p:].
func (r *rewriter) misc(b []byte, p int) int {
	op, w := wasmbin.U32(b, p)
	if w == 0 {
		return bad
	}
	q := p + w
	switch {
	case op <= wasmbin.MiscI64TruncSatF64U: // saturating truncation
		return q
	case op == wasmbin.MiscMemoryInit, op == wasmbin.MiscMemoryCopy, op == wasmbin.MiscTableInit, op == wasmbin.MiscTableCopy:
		// memory.init data mem, memory.copy mem mem, table.init elem table,
		// table.copy table table
		return skipU32(b, skipU32(b, q))
	case op <= wasmbin.MiscTableFill:
		// data.drop data, memory.fill mem, elem.drop elem, table.grow,
		// table.size, table.fill table
		return skipU32(b, q)
	}
	return r.codeFail(ErrUnsupported, p-1, "unknown 0xfc opcode %d", op)
}

// vec returns the position after the 0xFD-prefixed instruction whose opcode
// byte is b[p].
func (r *rewriter) vec(b []byte, p int) int {
	if p >= len(b) {
		return bad
	}
	op := b[p]
	p++
	switch vecKinds[op] {
	case vNone:
		return p
	case vMemarg:
		return r.memarg(b, p)
	case vMemargLane:
		return r.memarg(b, p) + 1
	case vLane:
		return p + 1
	case v16:
		return p + 16
	}
	return r.codeFail(ErrUnsupported, p-2, "unknown SIMD opcode %#x", op)
}

// atomic returns the position after the 0xFE-prefixed instruction whose
// opcode byte is b[p].
func (r *rewriter) atomic(b []byte, p int) int {
	if p >= len(b) {
		return bad
	}
	op := b[p]
	p++
	switch {
	case op <= wasmbin.AtomicWait64 || (op >= wasmbin.AtomicFirstRW && op <= wasmbin.AtomicLastRW): // notify, wait, loads, stores, rmw
		return r.memarg(b, p)
	case op == wasmbin.AtomicFence: // and its reserved byte
		return p + 1
	}
	return r.codeFail(ErrUnsupported, p-2, "unknown atomic opcode %#x", op)
}
