package wasmmeter

import "github.com/wasmhost/wasmhost/internal/wasmbin"

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

// scanMemories refuses 64-bit memories.
func (r *rewriter) scanMemories(s section) error {
	_, err := r.scanVec(s, func(in []byte, _ uint32, p int) (int, error) {
		return r.scanLimits(in, p, "memory")
	})
	return err
}
