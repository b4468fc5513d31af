package wasmmeter

import "github.com/wasmhost/wasmhost/internal/wasmbin"

// emitNames writes the "name" custom section s, whose subsections start at
// p, with function indices renumbered. Other subsections are copied. A name
// section that does not parse is dropped: it only serves debugging.
func (r *rewriter) emitNames(s section, p int) {
	in := r.in[:s.end]
	keep := len(r.out)
	mark := r.openSection(wasmbin.SecCustom, s.end-s.body)
	r.out = append(r.out, in[s.body:p]...)
	if !r.nameSubsections(in, p) {
		r.out = r.out[:keep]
		return
	}
	r.closeSection(mark)
}

func (r *rewriter) nameSubsections(in []byte, p int) bool {
	for p < len(in) {
		id := in[p]
		size, n := wasmbin.U32(in, p+1)
		if n == 0 {
			return false
		}
		body := p + 1 + n
		if uint64(size) > uint64(len(in)-body) {
			return false
		}
		end := body + int(size)
		switch id {
		case wasmbin.NameFunctions, wasmbin.NameLocals, wasmbin.NameLabels:
			r.out = append(r.out, id)
			mark := r.reserveSize(int(size))
			if !r.funcNameMap(in[:end], body, id != wasmbin.NameFunctions) {
				return false
			}
			r.closeSection(mark)
		case wasmbin.NameModule: // which wazero reads
			if _, q, ok := wasmbin.Name(in[:end], body); !ok || q != end {
				return false
			}
			r.out = append(r.out, in[p:end]...)
		default:
			r.out = append(r.out, in[p:end]...)
		}
		p = end
	}
	return true
}

// funcNameMap copies the name map at in[p:] (vec(funcidx name), or when
// indirect vec(funcidx vec(idx name))), renumbering the function indices,
// and reports whether it parsed and filled in exactly.
func (r *rewriter) funcNameMap(in []byte, p int, indirect bool) bool {
	cnt, n := wasmbin.U32(in, p)
	if n == 0 || uint64(cnt) > uint64(len(in)-p-n) {
		return false
	}
	r.out = append(r.out, in[p:p+n]...)
	p += n
	var ok bool
	for i := uint32(0); i < cnt; i++ {
		f, n := wasmbin.U32(in, p)
		if n == 0 || f >= r.nAllFuncs {
			return false
		}
		if f >= r.nImpFuncs {
			f++
		}
		r.out = wasmbin.AppendU32Width(r.out, f, n)
		p += n
		start := p
		if indirect {
			c, n := wasmbin.U32(in, p)
			if n == 0 || uint64(c) > uint64(len(in)-p-n) {
				return false
			}
			p += n
			for j := uint32(0); j < c; j++ {
				if _, n = wasmbin.U32(in, p); n == 0 {
					return false
				}
				if _, p, ok = wasmbin.Name(in, p+n); !ok {
					return false
				}
			}
		} else if _, p, ok = wasmbin.Name(in, p); !ok {
			return false
		}
		r.out = append(r.out, in[start:p]...)
	}
	return p == len(in)
}
