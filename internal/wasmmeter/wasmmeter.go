// Package wasmmeter rewrites a WebAssembly module so that it counts down a
// budget of fuel and calls back into the host whenever the budget runs out.
//
// [Instrument] adds a mutable i32 global, the fuel, and an import
// ImportModule.ImportName ("wasmhost:meter" "tick"). Each function entry
// and each loop body decrements the fuel, and calls tick once it is spent;
// tick checks the call's context and returns the next budget. Bulk memory
// and table instructions are charged before they run, one unit per 16
// bytes or 2 elements. Every reference to a defined function is
// renumbered for the new import; other sections are copied byte for byte.
//
// The rewriter refuses (ErrUnsupported, ErrLimit, malformed) what it
// cannot meter or prove harmless: opcodes wazero v1 does not accept with
// its default features plus tail calls and atomics, out-of-range indexes,
// counts larger than the bytes that hold them, functions past MaxBodyBytes,
// MaxNesting, MaxBlocks, MaxCompileWork and MaxLocals, and growable tables
// without a maximum. A host that runs only instrumented modules can turn
// wazero's CloseOnContextDone off. It reads and writes bytes only
// (internal/wasmbin). Why it works this way: docs/design.md.
package wasmmeter

import (
	"errors"
	"fmt"
	"math"

	"github.com/wasmhost/wasmhost/internal/wasmbin"
)

const (
	// ImportModule is the module name of the function import that Instrument
	// adds.
	ImportModule = "wasmhost:meter"
	// ImportName is the name of that import. Its type is () -> (i32): the host
	// checks whether the call must stop (it panics or otherwise aborts the
	// call if so) and returns the next budget. A result below 1 makes the
	// next check call it again.
	ImportName = "tick"
)

// Version names what Instrument writes: the same input, budget and Version
// give the same bytes, so a host may keep instrumented modules under it.
// Bump it whenever Instrument's output changes; TestVersionNamesOutput
// fails until you do. It also names the limits below: a module kept under
// a Version passed that Version's checks.
const Version = 2

// Limits of what Instrument accepts, so that neither the rewrite nor
// wazero's compiler (whose time grows with the square of a function's
// block nesting) nor its decoder (which allocates what a module's counts
// ask for) can be made to take unbounded time or memory by a small module.
// A module past one of them is refused with ErrLimit.
const (
	// MaxBodyBytes bounds the size of one function body. The largest body
	// of the Go plugins in this repository is under 64 KiB.
	MaxBodyBytes = 1 << 20
	// MaxNesting bounds the depth of nested blocks, loops and ifs in one
	// function. Go's code generator nests a block per resume point of a
	// function: the deepest of the Go plugins here nests 550.
	MaxNesting = 2048
	// MaxBlocks bounds the blocks, loops and ifs of one function. wazero's
	// compile time grows with the square of their number (4,096 sibling
	// blocks that branch out take about 2 s on a loaded 2-core server);
	// the most of a function of the Go plugins here is 799.
	MaxBlocks = 4096
	// MaxCompileWork bounds the sum over a module's functions of the
	// square of their blocks (MaxBlocks), which wazero's compile time
	// follows: about 10 million for the Go plugins here, and 2^26 would
	// take some 7 s to compile on that server.
	MaxCompileWork = 1 << 26
	// MaxLocals bounds the locals one function declares (not counting its
	// parameters), as web browsers do; wazero allocates a byte for each
	// before reading the body.
	MaxLocals = 50000
)

// ErrLimit is returned, wrapped with the place in the message, when the
// module is past one of the limits above.
var ErrLimit = errors.New("wasmmeter: module past a limit")

// ErrUnsupported is returned, wrapped with the place (section, function
// index, byte offset in the input) in the message, when the module uses an
// instruction or construct that Instrument does not know, or when it already
// imports from ImportModule (it is instrumented already). Such a module
// cannot be metered: a host must refuse it, not run it unmetered.
var ErrUnsupported = errors.New("wasmmeter: unsupported module")

// ErrMalformed is returned, wrapped with the place in the message, when the
// input is not a well-formed WebAssembly binary (truncated, bad LEB128,
// out-of-range index, inconsistent sizes). wazero would reject such a module
// too.
var ErrMalformed = errors.New("wasmmeter: malformed module")

// maxInput bounds the input size so that the scanner's "bad position"
// sentinel, plus any immediate width, never overflows an int.
const maxInput = 1 << 30

// bad is a position past any valid input; scanners return it on failure so
// that their loops stop without a branch for every immediate.
const bad = maxInput + 1

// section is one section of the input: in[start:body] is its header, in[body:end]
// its content.
type section struct {
	id               byte
	start, body, end int
}

// rewriter holds the state of one Instrument call.
type rewriter struct {
	in  []byte
	out []byte
	err error

	sections []section
	secBuf   [16]section

	nTypes      uint32 // types in the input
	tickType    uint32 // type index of () -> (i32), maybe == nTypes (appended)
	nImpFuncs   uint32 // imported functions; also the index of tick
	nImpGlobals uint32
	nGlobals    uint32 // imported + defined; also the index of the fuel global
	nFuncs      uint32 // defined functions (function section)
	nAllFuncs   uint32 // imported + defined functions, before the rewrite
	codeSize    int    // content size of the code section
	blocks      uint64 // the sum of the squares of each body's blocks
	unbounded   bool   // some table of the table section has no maximum

	// Where the scanner is, for error messages.
	fidx uint32 // function index in the input
	base int    // offset in the input of the current body

	seqBuf [48]byte
	seq    []byte // the fuel check

	typeParams []uint32 // parameters of each type (scanTypes)
	funcParams []uint32 // parameters of each defined function (scanFunctions)
}

// Instrument returns a new module that behaves as wasm does, except that it
// imports the function ImportModule.ImportName, of type () -> (i32), and
// has a mutable i32 fuel global, initialised to budget, that every function
// entry and every loop iteration decrements. When a check finds the fuel
// below 1, it calls the import and stores its result as the new fuel, so
// the first call of the import comes at check budget+1 and, while it
// returns budget, one comes every budget checks after that. A bulk memory
// or table instruction is charged in proportion to its length (see the
// package doc) and calls the import first when its charge is at least the
// fuel left.
//
// The input is not modified. The output is deterministic: the same input
// and budget always give the same bytes. Errors wrap ErrUnsupported or
// ErrMalformed. Instrument is safe for concurrent use.
func Instrument(wasm []byte, budget int32) ([]byte, error) {
	if len(wasm) >= maxInput {
		return nil, fmt.Errorf("%w: module of %d bytes is too large", ErrUnsupported, len(wasm))
	}
	r := &rewriter{in: wasm}
	if err := r.scanSections(); err != nil {
		return nil, err
	}
	r.seq = r.seqFor()
	if err := r.emit(budget); err != nil {
		return nil, err
	}
	return r.out, nil
}

// malformed records (once) and returns an ErrMalformed error at offset off
// of the input.
func (r *rewriter) malformed(off int, format string, args ...any) error {
	return r.fail(ErrMalformed, off, format, args...)
}

// unsupported records (once) and returns an ErrUnsupported error at offset
// off of the input.
func (r *rewriter) unsupported(off int, format string, args ...any) error {
	return r.fail(ErrUnsupported, off, format, args...)
}

func (r *rewriter) fail(kind error, off int, format string, args ...any) error {
	if r.err == nil {
		r.err = fmt.Errorf("%w: at offset %#x: %s", kind, off, fmt.Sprintf(format, args...))
	}
	return r.err
}

// codeFail records an error inside the body of function r.fidx, at offset
// off of the body, and returns bad.
func (r *rewriter) codeFail(kind error, off int, format string, args ...any) int {
	if r.err == nil {
		r.err = fmt.Errorf("%w: function %d at offset %#x: %s", kind, r.fidx, r.base+off, fmt.Sprintf(format, args...))
	}
	return bad
}

// scanSections splits the input into sections, checks their order and reads
// the counts the rewrite needs: types, imported functions and globals,
// defined functions and globals.
func (r *rewriter) scanSections() error {
	in := r.in
	if len(in) < 8 || in[0] != 0 || in[1] != 'a' || in[2] != 's' || in[3] != 'm' {
		return r.malformed(0, "not a WebAssembly binary (bad magic)")
	}
	if in[4] != 1 || in[5] != 0 || in[6] != 0 || in[7] != 0 {
		return r.unsupported(4, "binary version %#x %#x %#x %#x is not 1", in[4], in[5], in[6], in[7])
	}
	r.sections = r.secBuf[:0]
	var lastRank uint8
	var data *section
	for p := 8; p < len(in); {
		start := p
		id := in[p]
		size, n := wasmbin.U32(in, p+1)
		if n == 0 {
			return r.malformed(start, "bad section size")
		}
		body := p + 1 + n
		if uint64(size) > uint64(len(in)-body) {
			return r.malformed(start, "%s section of %d bytes runs past the end of the module", wasmbin.SectionName(id), size)
		}
		end := body + int(size)
		if id != wasmbin.SecCustom {
			if wasmbin.SectionRank(id) == 0 {
				return r.unsupported(start, "unknown section id %d", id)
			}
			rank := wasmbin.SectionRank(id)
			if rank <= lastRank {
				return r.malformed(start, "%s section out of order or repeated", wasmbin.SectionName(id))
			}
			lastRank = rank
		}
		s := section{id: id, start: start, body: body, end: end}
		var err error
		switch id {
		case wasmbin.SecCustom:
			_, _, ok := wasmbin.Name(in[:end], body)
			if !ok {
				return r.malformed(start, "bad custom section name")
			}
		case wasmbin.SecType:
			err = r.scanTypes(s)
		case wasmbin.SecImport:
			err = r.scanImports(s)
		case wasmbin.SecFunction:
			err = r.scanFunctions(s)
		case wasmbin.SecTable:
			err = r.scanTables(s)
		case wasmbin.SecMemory:
			err = r.scanMemories(s)
		case wasmbin.SecTag:
			err = r.unsupported(start, "tag section (exception handling)")
		case wasmbin.SecGlobal:
			var cnt uint32
			cnt, n = wasmbin.U32(in[:end], body)
			switch {
			case n == 0:
				err = r.malformed(body, "bad global count")
			case uint64(cnt) > uint64(end-body-n)/3:
				// A global takes three bytes at least (type, mutability, end).
				err = r.malformed(body, "global count %d is more than the %d bytes left hold", cnt, end-body-n)
			}
			r.nGlobals = cnt
		case wasmbin.SecData:
			data = &s // checked once the counts are known
		case wasmbin.SecDataCount:
			if _, n := wasmbin.U32(in[:end], body); n == 0 || body+n != end {
				err = r.malformed(body, "bad data count section")
			}
		case wasmbin.SecCode:
			r.codeSize = end - body
		}
		if err != nil {
			return err
		}
		r.sections = append(r.sections, s)
		p = end
	}
	if uint64(r.nGlobals)+uint64(r.nImpGlobals) >= 1<<32-1 {
		return r.malformed(8, "too many globals")
	}
	r.nGlobals += r.nImpGlobals
	r.nAllFuncs = r.nImpFuncs + r.nFuncs
	if r.nImpFuncs == 1<<32-1 {
		return r.malformed(8, "too many imported functions")
	}
	if r.tickType == r.nTypes && r.nTypes == 1<<32-1 {
		return r.malformed(8, "too many types")
	}
	if data != nil {
		return r.scanData(*data)
	}
	return nil
}

// scanTypes counts the function types and looks for an existing () -> (i32).
func (r *rewriter) scanTypes(s section) error {
	found := false
	cnt, err := r.scanVec(s, func(in []byte, i uint32, p int) (int, error) {
		if p >= len(in) {
			return 0, r.malformed(p, "type section truncated")
		}
		if in[p] != wasmbin.FuncForm {
			return 0, r.unsupported(p, "type %d has form %#x, not a plain function type (0x60)", i, in[p])
		}
		p++
		var counts [2]uint32
		for j := range counts {
			c, n := wasmbin.U32(in, p)
			if n == 0 {
				return 0, r.malformed(p, "bad value type count in type %d", i)
			}
			p += n
			if uint64(c) > uint64(len(in)-p) {
				return 0, r.malformed(p, "type %d truncated", i)
			}
			for k := uint32(0); k < c; k++ {
				if !wasmbin.IsNumOrRefType(in[p]) {
					return 0, r.unsupported(p, "value type %#x in type %d", in[p], i)
				}
				p++
			}
			counts[j] = c
		}
		r.typeParams = append(r.typeParams, counts[0])
		if !found && counts[0] == 0 && counts[1] == 1 && in[p-1] == wasmbin.I32 {
			r.tickType, found = i, true // reuse the first () -> (i32)
		}
		return p, nil
	})
	if err != nil {
		return err
	}
	if !found {
		r.tickType = cnt
	}
	r.nTypes = cnt
	return nil
}

// scanVec checks section s, a vector: it reads the count and calls item for
// each entry, with the entry's index and position, and item returns the
// position after the entry. It returns the count.
func (r *rewriter) scanVec(s section, item func(in []byte, i uint32, p int) (int, error)) (uint32, error) {
	in := r.in[:s.end]
	name := wasmbin.SectionName(s.id)
	cnt, n := wasmbin.U32(in, s.body)
	if n == 0 {
		return 0, r.malformed(s.body, "bad %s count", name)
	}
	p := s.body + n
	if uint64(cnt) > uint64(s.end-p) {
		// Every item takes a byte at least.
		return 0, r.malformed(s.body, "%s count %d is more than the %d bytes left", name, cnt, s.end-p)
	}
	for i := uint32(0); i < cnt; i++ {
		var err error
		if p, err = item(in, i, p); err != nil {
			return 0, err
		}
	}
	if p != s.end {
		return 0, r.malformed(p, "%s section has %d trailing bytes", name, s.end-p)
	}
	return cnt, nil
}

// scanLimits checks the limits of a table or memory at in[p:] and returns
// the position after them.
func (r *rewriter) scanLimits(in []byte, p int, what string) (int, error) {
	if p >= len(in) {
		return 0, r.malformed(p, "%s limits truncated", what)
	}
	flags := in[p]
	if flags > 3 {
		return 0, r.unsupported(p, "%s limits flags %#x (64-bit or unknown)", what, flags)
	}
	if flags&2 != 0 && what != "memory" {
		return 0, r.malformed(p, "shared %s", what)
	}
	p++
	_, n := wasmbin.U32(in, p)
	if n == 0 {
		return 0, r.malformed(p, "bad %s minimum", what)
	}
	p += n
	if flags&1 != 0 {
		_, n = wasmbin.U32(in, p)
		if n == 0 {
			return 0, r.malformed(p, "bad %s maximum", what)
		}
		p += n
	}
	return p, nil
}

// scanTableType checks a table type (reftype + limits) at in[p:].
func (r *rewriter) scanTableType(in []byte, p int) (int, error) {
	if p >= len(in) {
		return 0, r.malformed(p, "table type truncated")
	}
	switch in[p] {
	case wasmbin.FuncRef, wasmbin.ExternRef:
	case wasmbin.TableInit:
		return 0, r.unsupported(p, "table with an initialiser expression")
	default:
		return 0, r.unsupported(p, "table element type %#x", in[p])
	}
	return r.scanLimits(in, p+1, "table")
}

// scanGlobalType checks a global type (valtype + mutability) at in[p:].
func (r *rewriter) scanGlobalType(in []byte, p int) (int, error) {
	if len(in)-p < 2 {
		return 0, r.malformed(p, "global type truncated")
	}
	if !wasmbin.IsNumOrRefType(in[p]) {
		return 0, r.unsupported(p, "global value type %#x", in[p])
	}
	if in[p+1] > 1 {
		return 0, r.malformed(p+1, "global mutability %#x", in[p+1])
	}
	return p + 2, nil
}

// scanImports counts imported functions and globals and refuses a module
// that already imports from ImportModule.
func (r *rewriter) scanImports(s section) error {
	_, err := r.scanVec(s, func(in []byte, i uint32, p int) (int, error) {
		at := p
		mod, next, ok := wasmbin.Name(in, p)
		if !ok {
			return 0, r.malformed(p, "bad module name of import %d", i)
		}
		if string(mod) == ImportModule {
			return 0, r.unsupported(p, "module already imports from %q (instrumented twice?)", ImportModule)
		}
		_, next, ok = wasmbin.Name(in, next)
		if !ok {
			return 0, r.malformed(next, "bad name of import %d", i)
		}
		p = next
		if p >= len(in) {
			return 0, r.malformed(at, "import %d truncated", i)
		}
		kind := in[p]
		p++
		switch kind {
		case wasmbin.ExternFunc:
			t, n := wasmbin.U32(in, p)
			if n == 0 {
				return 0, r.malformed(p, "bad type index of import %d", i)
			}
			if t >= r.nTypes {
				return 0, r.malformed(p, "import %d has type %d of %d", i, t, r.nTypes)
			}
			r.nImpFuncs++
			return p + n, nil
		case wasmbin.ExternTable:
			return r.scanTableType(in, p)
		case wasmbin.ExternMemory:
			return r.scanLimits(in, p, "memory")
		case wasmbin.ExternGlobal:
			r.nImpGlobals++
			return r.scanGlobalType(in, p)
		case wasmbin.ExternTag:
			return 0, r.unsupported(at, "tag import (exception handling)")
		}
		return 0, r.malformed(p-1, "import %d has kind %#x", i, kind)
	})
	return err
}

// scanFunctions reads the number of defined functions and checks their type
// indices.
func (r *rewriter) scanFunctions(s section) error {
	cnt, err := r.scanVec(s, func(in []byte, i uint32, p int) (int, error) {
		t, n := wasmbin.U32(in, p)
		if n == 0 {
			return 0, r.malformed(p, "bad type index of function %d", i)
		}
		if t >= r.nTypes {
			return 0, r.malformed(p, "function %d has type %d of %d", i, t, r.nTypes)
		}
		r.funcParams = append(r.funcParams, r.typeParams[t])
		return p + n, nil
	})
	if err != nil {
		return err
	}
	if uint64(cnt)+uint64(r.nImpFuncs) >= 1<<32-1 {
		return r.malformed(s.body, "too many functions")
	}
	r.nFuncs = cnt
	return nil
}

// scanData checks the data section: counts and sizes within the section,
// memory 0 only, and offset expressions the rewriter knows. It writes
// nothing: emit copies the section as it is.
func (r *rewriter) scanData(s section) error {
	out := r.out
	defer func() { r.out = out }() // constExpr copies what it reads
	_, err := r.scanVec(s, func(in []byte, i uint32, p int) (int, error) {
		flags, n := wasmbin.U32(in, p)
		if n == 0 {
			return 0, r.malformed(p, "bad flags of data segment %d", i)
		}
		p += n
		switch flags {
		case 0, 2:
			if flags == 2 {
				mem, n := wasmbin.U32(in, p)
				if n == 0 || mem != 0 {
					return 0, r.unsupported(p, "data segment %d of memory %d (multiple memories)", i, mem)
				}
				p += n
			}
			var err error
			r.out = r.out[:0]
			if p, err = r.constExpr(in, p); err != nil {
				return 0, err
			}
		case 1:
		default:
			return 0, r.malformed(p-n, "data segment %d has flags %d", i, flags)
		}
		size, n := wasmbin.U32(in, p)
		if n == 0 {
			return 0, r.malformed(p, "bad size of data segment %d", i)
		}
		p += n
		if uint64(size) > uint64(len(in)-p) {
			return 0, r.malformed(p, "data segment %d of %d bytes runs past its section", i, size)
		}
		return p + int(size), nil
	})
	return err
}

// scanTables refuses table types the rewriter does not know, and notes
// whether a table has no maximum.
func (r *rewriter) scanTables(s section) error {
	_, err := r.scanVec(s, func(in []byte, _ uint32, p int) (int, error) {
		if p+1 < len(in) && in[p+1]&1 == 0 {
			r.unbounded = true
		}
		return r.scanTableType(in, p)
	})
	return err
}

// emitTables writes the table section with each table that has no maximum
// given its minimum as maximum: a module with such a table has no
// table.grow (body refuses it), so none of its tables can grow anyway,
// and wazero then knows each table's size at most.
func (r *rewriter) emitTables(s section) error {
	if !r.unbounded {
		r.out = append(r.out, r.in[s.start:s.end]...)
		return nil
	}
	mark := r.openSection(wasmbin.SecTable, s.end-s.body+8)
	err := r.copyVec(s, func(in []byte, _ uint32, p int) (int, error) {
		q, err := r.scanTableType(in, p)
		if err != nil {
			return 0, err
		}
		if in[p+1]&1 != 0 {
			r.out = append(r.out, in[p:q]...)
			return q, nil
		}
		min, _ := wasmbin.U32(in, p+2)
		r.out = append(r.out, in[p], in[p+1]|1)
		r.out = append(r.out, in[p+2:q]...)
		r.out = wasmbin.AppendU32(r.out, min)
		return q, nil
	})
	if err != nil {
		return err
	}
	r.closeSection(mark)
	return nil
}

// scanMemories refuses 64-bit memories.
func (r *rewriter) scanMemories(s section) error {
	_, err := r.scanVec(s, func(in []byte, _ uint32, p int) (int, error) {
		return r.scanLimits(in, p, "memory")
	})
	return err
}

// seqFor returns the fuel check for r's fuel global and tick function:
//
//	global.get $fuel
//	i32.const 1
//	i32.lt_s
//	if
//	  call $tick
//	  global.set $fuel
//	end
//	global.get $fuel
//	i32.const 1
//	i32.sub
//	global.set $fuel
//
// It is stack-neutral and, while fuel remains, costs a load, a compare and a
// not-taken branch, a decrement and a store.
func (r *rewriter) seqFor() []byte {
	s := r.seqBuf[:0]
	s = append(s, wasmbin.OpGlobalGet)
	s = wasmbin.AppendU32(s, r.nGlobals)
	s = append(s, wasmbin.OpI32Const, 1, wasmbin.OpI32LtS, wasmbin.OpIf, wasmbin.BlockEmpty, wasmbin.OpCall)
	s = wasmbin.AppendU32(s, r.nImpFuncs)
	s = append(s, wasmbin.OpGlobalSet)
	s = wasmbin.AppendU32(s, r.nGlobals)
	s = append(s, wasmbin.OpEnd, wasmbin.OpGlobalGet)
	s = wasmbin.AppendU32(s, r.nGlobals)
	s = append(s, wasmbin.OpI32Const, 1, wasmbin.OpI32Sub, wasmbin.OpGlobalSet)
	return wasmbin.AppendU32(s, r.nGlobals)
}

// emit writes the rewritten module to r.out.
func (r *rewriter) emit(budget int32) error {
	in := r.in
	// Room for the new sections and entries, a check per function and
	// 1/16 more code (Go-compiled code grows by about 1/50).
	est := len(in) + 256 + int(r.nFuncs)*len(r.seq) + r.codeSize/16
	r.out = make([]byte, 0, est)
	r.out = append(r.out, in[:8]...)
	// The type, import and global sections get new entries; a module that
	// lacks one gets it in its place, before the first section that
	// follows it.
	haveType, haveImport, haveGlobal, haveCode := false, false, false, false
	addMissing := func(rank uint8) {
		if !haveType && rank > wasmbin.SectionRank(wasmbin.SecType) {
			r.emitTypes(nil)
			haveType = true
		}
		if !haveImport && rank > wasmbin.SectionRank(wasmbin.SecImport) {
			r.emitImports(nil)
			haveImport = true
		}
		if !haveGlobal && rank > wasmbin.SectionRank(wasmbin.SecGlobal) {
			// Without a section to copy, emitGlobals cannot fail.
			_ = r.emitGlobals(nil, budget)
			haveGlobal = true
		}
	}
	for _, s := range r.sections {
		if s.id != wasmbin.SecCustom {
			addMissing(wasmbin.SectionRank(s.id))
		}
		var err error
		switch s.id {
		case wasmbin.SecType:
			r.emitTypes(&s)
			haveType = true
		case wasmbin.SecImport:
			r.emitImports(&s)
			haveImport = true
		case wasmbin.SecGlobal:
			err = r.emitGlobals(&s, budget)
			haveGlobal = true
		case wasmbin.SecTable:
			err = r.emitTables(s)
		case wasmbin.SecExport:
			err = r.emitExports(s)
		case wasmbin.SecStart:
			err = r.emitStart(s)
		case wasmbin.SecElement:
			err = r.emitElements(s)
		case wasmbin.SecCode:
			err = r.emitCode(s)
			haveCode = true
		case wasmbin.SecCustom:
			name, p, _ := wasmbin.Name(in[:s.end], s.body)
			if string(name) == "name" {
				r.emitNames(s, p)
			} else {
				r.out = append(r.out, in[s.start:s.end]...)
			}
		default:
			r.out = append(r.out, in[s.start:s.end]...)
		}
		if err != nil {
			return err
		}
	}
	addMissing(math.MaxUint8)
	if r.nFuncs != 0 && !haveCode {
		return r.malformed(len(in), "%d functions declared but no code section", r.nFuncs)
	}
	return r.err // set by closeSection, or nil
}

// openSection writes a section id and reserves room for its size, assuming
// the content will need as many size bytes as oldSize does. It returns the
// mark to pass to closeSection.
func (r *rewriter) openSection(id byte, oldSize int) int {
	r.out = append(r.out, id)
	return r.reserveSize(oldSize)
}

// reserveSize reserves room for a u32 size that is probably close to
// oldSize, and returns the mark to pass to closeSection.
func (r *rewriter) reserveSize(oldSize int) int {
	mark := len(r.out)
	w := wasmbin.SizeU32(uint32(oldSize))
	r.out = append(r.out, zeros[:w]...)
	return mark<<3 | w
}

var zeros [8]byte

// closeSection writes the size of the content written since mark, moving the
// content if its size needs more or fewer bytes than were reserved.
func (r *rewriter) closeSection(mark int) {
	at, w := mark>>3, mark&7
	size := len(r.out) - at - w
	if uint64(size) > math.MaxUint32 {
		r.fail(ErrUnsupported, len(r.in), "a rewritten section or body exceeds 4 GiB")
		return
	}
	need := wasmbin.SizeU32(uint32(size))
	if need != w {
		end := len(r.out)
		if need > w {
			r.out = append(r.out, zeros[:need-w]...)
		}
		copy(r.out[at+need:], r.out[at+w:end])
		r.out = r.out[:at+need+size]
	}
	wasmbin.PutU32(r.out[at:at+need], uint32(size))
}

// emitTypes writes the type section, with the tick type appended unless an
// identical type exists. s is nil when the input has no type section.
func (r *rewriter) emitTypes(s *section) {
	if s != nil && r.tickType != r.nTypes {
		r.out = append(r.out, r.in[s.start:s.end]...)
		return
	}
	oldSize := 1
	if s != nil {
		oldSize = s.end - s.body + 4
	}
	mark := r.openSection(wasmbin.SecType, oldSize)
	r.out = wasmbin.AppendU32(r.out, r.nTypes+1)
	if s != nil {
		_, n := wasmbin.U32(r.in, s.body)
		r.out = append(r.out, r.in[s.body+n:s.end]...)
	}
	r.out = append(r.out, wasmbin.FuncForm, 0, 1, wasmbin.I32) // () -> (i32)
	r.closeSection(mark)
}

// emitImports writes the import section with the tick import appended.
func (r *rewriter) emitImports(s *section) {
	oldSize := 1
	var cnt uint32
	rest := 0 // the entries follow the count at r.in[rest:]
	if s != nil {
		oldSize = s.end - s.body + len(ImportModule) + len(ImportName) + 8
		var n int
		cnt, n = wasmbin.U32(r.in, s.body)
		rest = s.body + n
	}
	mark := r.openSection(wasmbin.SecImport, oldSize)
	r.out = wasmbin.AppendU32(r.out, cnt+1)
	if s != nil {
		r.out = append(r.out, r.in[rest:s.end]...)
	}
	r.out = wasmbin.AppendU32(r.out, uint32(len(ImportModule)))
	r.out = append(r.out, ImportModule...)
	r.out = wasmbin.AppendU32(r.out, uint32(len(ImportName)))
	r.out = append(r.out, ImportName...)
	r.out = append(r.out, wasmbin.ExternFunc)
	r.out = wasmbin.AppendU32(r.out, r.tickType)
	r.closeSection(mark)
}

// emitGlobals writes the global section with ref.func in initialisers
// renumbered and the fuel global appended.
func (r *rewriter) emitGlobals(s *section, budget int32) error {
	oldSize := 1
	var cnt uint32
	if s != nil {
		oldSize = s.end - s.body + 8
		cnt, _ = wasmbin.U32(r.in, s.body)
	}
	mark := r.openSection(wasmbin.SecGlobal, oldSize)
	r.out = wasmbin.AppendU32(r.out, cnt+1)
	if s != nil {
		_, err := r.scanVec(*s, func(in []byte, _ uint32, p int) (int, error) {
			q, err := r.scanGlobalType(in, p)
			if err != nil {
				return 0, err
			}
			r.out = append(r.out, in[p:q]...)
			return r.constExpr(in, q)
		})
		if err != nil {
			return err
		}
	}
	r.out = append(r.out, wasmbin.I32, 1, wasmbin.OpI32Const) // mutable i32
	r.out = wasmbin.AppendS64(r.out, int64(budget))
	r.out = append(r.out, wasmbin.OpEnd)
	r.closeSection(mark)
	return nil
}

// constExpr copies the constant expression at in[p:] to r.out, renumbering
// ref.func, and returns the position after its end.
func (r *rewriter) constExpr(in []byte, p int) (int, error) {
	for {
		if p >= len(in) {
			return 0, r.malformed(p, "constant expression truncated")
		}
		at := p
		op := in[p]
		p++
		switch op {
		case wasmbin.OpEnd:
			r.out = append(r.out, op)
			return p, nil
		case wasmbin.OpI32Const:
			p = skipLEB(in, p, 5)
		case wasmbin.OpI64Const:
			p = skipLEB(in, p, 10)
		case wasmbin.OpF32Const:
			p += 4
		case wasmbin.OpF64Const:
			p += 8
		case wasmbin.OpI32Add, wasmbin.OpI32Sub, wasmbin.OpI32Mul, wasmbin.OpI64Add, wasmbin.OpI64Sub, wasmbin.OpI64Mul: // extended-const
		case wasmbin.OpGlobalGet:
			g, n := wasmbin.U32(in, p)
			if n == 0 {
				return 0, r.malformed(p, "bad global index in constant expression")
			}
			if g >= r.nGlobals {
				return 0, r.malformed(p, "global index %d out of range in constant expression", g)
			}
			p += n
		case wasmbin.OpRefNull:
			if p >= len(in) || (in[p] != wasmbin.FuncRef && in[p] != wasmbin.ExternRef) {
				return 0, r.unsupported(at, "ref.null of a type other than funcref or externref")
			}
			p++
		case wasmbin.OpRefFunc:
			f, n := wasmbin.U32(in, p)
			if n == 0 {
				return 0, r.malformed(p, "bad function index in ref.func")
			}
			r.out = append(r.out, op)
			if err := r.appendFunc(f, n, p); err != nil {
				return 0, err
			}
			p += n
			continue
		case wasmbin.OpPrefixVec: // v128.const
			if p >= len(in) || in[p] != wasmbin.VecV128Const {
				return 0, r.unsupported(at, "vector instruction in constant expression")
			}
			p += 17
		default:
			return 0, r.unsupported(at, "opcode %#x in constant expression", op)
		}
		if p > len(in) {
			return 0, r.malformed(at, "constant expression truncated")
		}
		r.out = append(r.out, in[at:p]...)
	}
}

// appendFunc appends function index f, read from an encoding of width w at
// offset off, renumbered for the inserted import, keeping width w when it
// can. It fails if f is out of range.
func (r *rewriter) appendFunc(f uint32, w, off int) error {
	if f >= r.nAllFuncs {
		return r.malformed(off, "function index %d out of range", f)
	}
	if f >= r.nImpFuncs {
		f++ // cannot wrap: scanSections bounds the function count.
	}
	r.out = wasmbin.AppendU32Width(r.out, f, w)
	return nil
}

// emitExports renumbers function exports.
func (r *rewriter) emitExports(s section) error {
	mark := r.openSection(wasmbin.SecExport, s.end-s.body)
	err := r.copyVec(s, func(in []byte, i uint32, p int) (int, error) {
		_, q, ok := wasmbin.Name(in, p)
		if !ok || q >= len(in) {
			return 0, r.malformed(p, "bad name of export %d", i)
		}
		kind := in[q]
		idx, n := wasmbin.U32(in, q+1)
		if n == 0 {
			return 0, r.malformed(q+1, "bad index of export %d", i)
		}
		r.out = append(r.out, in[p:q+1]...)
		switch kind {
		case wasmbin.ExternFunc:
			if err := r.appendFunc(idx, n, q+1); err != nil {
				return 0, err
			}
		case wasmbin.ExternGlobal:
			if idx >= r.nGlobals {
				return 0, r.malformed(q+1, "export %d of global %d out of range", i, idx)
			}
			r.out = append(r.out, in[q+1:q+1+n]...)
		case wasmbin.ExternTable, wasmbin.ExternMemory:
			r.out = append(r.out, in[q+1:q+1+n]...)
		case wasmbin.ExternTag:
			return 0, r.unsupported(q, "tag export (exception handling)")
		default:
			return 0, r.malformed(q, "export %d has kind %#x", i, kind)
		}
		return q + 1 + n, nil
	})
	if err != nil {
		return err
	}
	r.closeSection(mark)
	return nil
}

// copyVec copies the element count of section s, a vector, to the output
// and then reads its elements as scanVec does; item writes each element.
func (r *rewriter) copyVec(s section, item func(in []byte, i uint32, p int) (int, error)) error {
	if _, n := wasmbin.U32(r.in[:s.end], s.body); n > 0 {
		r.out = append(r.out, r.in[s.body:s.body+n]...)
	}
	_, err := r.scanVec(s, item)
	return err
}

// emitStart renumbers the start function.
func (r *rewriter) emitStart(s section) error {
	in := r.in[:s.end]
	f, n := wasmbin.U32(in, s.body)
	if n == 0 || s.body+n != s.end {
		return r.malformed(s.body, "bad start section")
	}
	mark := r.openSection(wasmbin.SecStart, s.end-s.body)
	if err := r.appendFunc(f, n, s.body); err != nil {
		return err
	}
	r.closeSection(mark)
	return nil
}

// emitElements renumbers the function indices and ref.func expressions of
// element segments, in each of their eight encodings.
func (r *rewriter) emitElements(s section) error {
	mark := r.openSection(wasmbin.SecElement, s.end-s.body)
	err := r.copyVec(s, func(in []byte, i uint32, p int) (int, error) {
		var err error
		at := p
		flags, n := wasmbin.U32(in, p)
		if n == 0 {
			return 0, r.malformed(p, "bad flags of element segment %d", i)
		}
		if flags > 7 {
			return 0, r.unsupported(p, "element segment %d has flags %d", i, flags)
		}
		r.out = append(r.out, in[p:p+n]...)
		p += n
		// Bit 1 without bit 0: explicit table index (active).
		if flags&3 == 2 {
			_, n := wasmbin.U32(in, p)
			if n == 0 {
				return 0, r.malformed(p, "bad table index of element segment %d", i)
			}
			r.out = append(r.out, in[p:p+n]...)
			p += n
		}
		// Bit 0 clear: active, with an offset expression.
		if flags&1 == 0 {
			if p, err = r.constExpr(in, p); err != nil {
				return 0, err
			}
		}
		// Flags 1, 2, 3 and 5, 6, 7: an element kind or reference type.
		if flags&3 != 0 {
			if p >= len(in) {
				return 0, r.malformed(at, "element segment %d truncated", i)
			}
			b := in[p]
			if flags&4 == 0 && b != wasmbin.ExternFunc { // elemkind funcref
				return 0, r.malformed(p, "element segment %d has element kind %#x", i, b)
			}
			if flags&4 != 0 && b != wasmbin.FuncRef && b != wasmbin.ExternRef {
				return 0, r.unsupported(p, "element segment %d has reference type %#x", i, b)
			}
			r.out = append(r.out, b)
			p++
		}
		items, n := wasmbin.U32(in, p)
		if n == 0 {
			return 0, r.malformed(p, "bad item count of element segment %d", i)
		}
		if uint64(items) > uint64(len(in)-p-n) {
			return 0, r.malformed(p, "element segment %d claims %d items, more than the %d bytes left", i, items, len(in)-p-n)
		}
		r.out = append(r.out, in[p:p+n]...)
		p += n
		for j := uint32(0); j < items; j++ {
			if flags&4 == 0 {
				f, n := wasmbin.U32(in, p)
				if n == 0 {
					return 0, r.malformed(p, "bad function index in element segment %d", i)
				}
				if err := r.appendFunc(f, n, p); err != nil {
					return 0, err
				}
				p += n
			} else if p, err = r.constExpr(in, p); err != nil {
				return 0, err
			}
		}
		return p, nil
	})
	if err != nil {
		return err
	}
	r.closeSection(mark)
	return nil
}

// skipLEB returns the position after the LEB128 number at b[p:], which may
// take at most max bytes, or bad.
func skipLEB(b []byte, p, max int) int {
	if w := wasmbin.Width(b, p, max); w != 0 {
		return p + w
	}
	return bad
}
