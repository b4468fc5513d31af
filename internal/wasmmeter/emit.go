package wasmmeter

import (
	"math"

	"github.com/wasmhost/wasmhost/internal/wasmbin"
)

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
