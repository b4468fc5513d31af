package wasmmeter

// Subsections of the "name" custom section that are keyed by function index.
const (
	nameFunctions = 1 // vec(funcidx name)
	nameLocals    = 2 // vec(funcidx vec(localidx name))
	nameLabels    = 3 // vec(funcidx vec(labelidx name))
)

// emitNames writes the "name" custom section s, whose subsections start at
// p, with function indices renumbered. Other subsections are copied. A name
// section that does not parse is dropped: it only serves debugging.
func (r *rewriter) emitNames(s section, p int) {
	in := r.in[:s.end]
	keep := len(r.out)
	mark := r.openSection(secCustom, s.end-s.body)
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
		size, n := readU32(in, p+1)
		if n == 0 {
			return false
		}
		body := p + 1 + n
		if uint64(size) > uint64(len(in)-body) {
			return false
		}
		end := body + int(size)
		switch id {
		case nameFunctions, nameLocals, nameLabels:
			r.out = append(r.out, id)
			mark := r.reserveSize(int(size))
			if !r.funcNameMap(in[:end], body, id != nameFunctions) {
				return false
			}
			r.closeSection(mark)
		case 0: // the module name, which wazero reads
			if _, q, ok := readName(in[:end], body); !ok || q != end {
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
	cnt, n := readU32(in, p)
	if n == 0 || uint64(cnt) > uint64(len(in)-p-n) {
		return false
	}
	r.out = append(r.out, in[p:p+n]...)
	p += n
	var ok bool
	for i := uint32(0); i < cnt; i++ {
		f, n := readU32(in, p)
		if n == 0 || f >= r.nAllFuncs {
			return false
		}
		if f >= r.nImpFuncs {
			f++
		}
		r.out = appendU32Width(r.out, f, n)
		p += n
		start := p
		if indirect {
			c, n := readU32(in, p)
			if n == 0 || uint64(c) > uint64(len(in)-p-n) {
				return false
			}
			p += n
			for j := uint32(0); j < c; j++ {
				if _, n = readU32(in, p); n == 0 {
					return false
				}
				if _, p, ok = readName(in, p+n); !ok {
					return false
				}
			}
		} else if _, p, ok = readName(in, p); !ok {
			return false
		}
		r.out = append(r.out, in[start:p]...)
	}
	return p == len(in)
}
