package wasmbin

import (
	"errors"
	"fmt"
	"strings"
)

// A FuncType is a function type: its parameter and result value types.
type FuncType struct {
	Params, Results []byte
}

// String gives the type as "(i64, i32) -> i32", "() -> ()" or
// "(i32) -> (i32, i64)".
func (t FuncType) String() string {
	names := func(ts []byte) []string {
		out := make([]string, len(ts))
		for i, v := range ts {
			out[i] = ValTypeName(v)
		}
		return out
	}
	res := "()"
	switch len(t.Results) {
	case 0:
	case 1:
		res = ValTypeName(t.Results[0])
	default:
		res = "(" + strings.Join(names(t.Results), ", ") + ")"
	}
	return "(" + strings.Join(names(t.Params), ", ") + ") -> " + res
}

// An Import is one import of a module. Type is the type index of a
// function import.
type Import struct {
	Module, Name string
	Kind         byte // ExternFunc, ...
	Type         uint32
}

// An Export is one export of a module: the item of Kind at Index.
type Export struct {
	Name  string
	Kind  byte
	Index uint32
}

// Limits are the size limits of a table (in entries) or a memory (in
// pages).
type Limits struct {
	Min, Max uint64
	HasMax   bool
}

// A Module is what Decode reads of a module.
type Module struct {
	Types   []FuncType
	Imports []Import
	// Funcs has the type index of every function, imported ones first.
	Funcs []uint32
	// Tables and Memories are those the module defines, not imports.
	Tables, Memories []Limits
	Exports          []Export
}

// FuncType returns the type of function idx (imported ones first), and
// false if the index or its type index is out of range.
func (m *Module) FuncType(idx uint32) (FuncType, bool) {
	if int64(idx) >= int64(len(m.Funcs)) {
		return FuncType{}, false
	}
	t := m.Funcs[idx]
	if int64(t) >= int64(len(m.Types)) {
		return FuncType{}, false
	}
	return m.Types[t], true
}

// ErrMalformed is returned (wrapped, with the place) by Decode for a module
// it cannot read.
var ErrMalformed = errors.New("malformed module")

// Decode reads the type, import, function, table, memory and export
// sections of a core module and skips the others. Every count is checked
// against the bytes left before anything is allocated for it, so a small
// input cannot make it allocate much. It checks the structure of the
// sections it reads and the order of all sections, not every rule of
// validation: wazero's decoder and validator still run on whatever is
// compiled.
func Decode(b []byte) (*Module, error) {
	if !HasHeader(b) {
		return nil, fmt.Errorf("%w: no WebAssembly version 1 header", ErrMalformed)
	}
	var m Module
	var lastRank uint8
	for p := len(Header); p < len(b); {
		s, ok := SectionAt(b, p)
		if !ok {
			return nil, fmt.Errorf("%w: section %d at offset %#x: truncated", ErrMalformed, b[p], p)
		}
		if rank := SectionRank(s.ID); s.ID != SecCustom {
			if rank == 0 {
				return nil, fmt.Errorf("%w: unknown section id %d at offset %#x", ErrMalformed, s.ID, p)
			}
			if rank <= lastRank {
				return nil, fmt.Errorf("%w: %s section at offset %#x out of order or repeated", ErrMalformed, SectionName(s.ID), p)
			}
			lastRank = rank
		}
		d := &decoder{b: b[:s.End], p: s.Body}
		switch s.ID {
		case SecType:
			d.vec(func() {
				if d.byte() != FuncForm {
					d.failf("a type that is not a function type")
					return
				}
				m.Types = append(m.Types, FuncType{Params: d.valTypes(), Results: d.valTypes()})
			})
		case SecImport:
			d.vec(func() {
				imp := Import{Module: d.name(), Name: d.name(), Kind: d.byte()}
				switch imp.Kind {
				case ExternFunc:
					imp.Type = d.u32()
					m.Funcs = append(m.Funcs, imp.Type)
				case ExternTable:
					d.byte()
					d.limits()
				case ExternMemory:
					d.limits()
				case ExternGlobal:
					d.byte()
					d.byte()
				case ExternTag:
					d.byte()
					d.u32()
				default:
					d.failf("import %q %q of unknown kind 0x%02x", imp.Module, imp.Name, imp.Kind)
				}
				m.Imports = append(m.Imports, imp)
			})
		case SecFunction:
			d.vec(func() { m.Funcs = append(m.Funcs, d.u32()) })
		case SecTable:
			d.vec(func() {
				d.byte() // the reference type
				m.Tables = append(m.Tables, d.limits())
			})
		case SecMemory:
			d.vec(func() { m.Memories = append(m.Memories, d.limits()) })
		case SecExport:
			d.vec(func() {
				e := Export{Name: d.name(), Kind: d.byte(), Index: d.u32()}
				if d.err == nil && ExternKindName(e.Kind) == "" {
					d.failf("export %q of unknown kind 0x%02x", e.Name, e.Kind)
				}
				m.Exports = append(m.Exports, e)
			})
		default:
			d.p = s.End
		}
		if d.err == nil && d.p != s.End {
			d.failf("%d bytes left unread", s.End-d.p)
		}
		if d.err != nil {
			return nil, fmt.Errorf("%w: %s section at offset %#x: %w", ErrMalformed, SectionName(s.ID), p, d.err)
		}
		p = s.End
	}
	return &m, nil
}

// A decoder reads the content of one section, remembering its first
// error.
type decoder struct {
	b   []byte // the module up to the section's end
	p   int
	err error
}

var errTruncated = errors.New("truncated")

func (d *decoder) failf(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if d.p >= len(d.b) {
		d.err = errTruncated
		return 0
	}
	c := d.b[d.p]
	d.p++
	return c
}

func (d *decoder) u32() uint32 { return number(d, U32, "u32") }

func (d *decoder) u64() uint64 { return number(d, U64, "u64") }

// number reads one LEB128 number with read, failing (as what) when it is
// malformed.
func number[T uint32 | uint64](d *decoder, read func([]byte, int) (T, int), what string) T {
	if d.err != nil {
		return 0
	}
	v, w := read(d.b, d.p)
	if w == 0 {
		d.failf("bad %s at offset %#x", what, d.p)
		return 0
	}
	d.p += w
	return v
}

// count reads the length of a vector whose items take a byte at least, and
// fails when fewer bytes than that are left.
func (d *decoder) count() uint32 {
	n := d.u32()
	if d.err == nil && uint64(n) > uint64(len(d.b)-d.p) {
		d.failf("a count of %d items with %d bytes left", n, len(d.b)-d.p)
		return 0
	}
	return n
}

// vec reads a vector, calling item for each entry until an error.
func (d *decoder) vec(item func()) {
	for n := d.count(); n > 0 && d.err == nil; n-- {
		item()
	}
}

func (d *decoder) name() string {
	if d.err != nil {
		return ""
	}
	s, next, ok := Name(d.b, d.p)
	if !ok {
		d.failf("bad name at offset %#x", d.p)
		return ""
	}
	d.p = next
	return string(s)
}

func (d *decoder) limits() Limits {
	var l Limits
	flags := d.byte()
	l.Min = d.u64()
	if flags&LimitsHasMax != 0 {
		l.Max, l.HasMax = d.u64(), true
	}
	return l
}

func (d *decoder) valTypes() []byte {
	n := d.count()
	if d.err != nil {
		return nil
	}
	out := make([]byte, n)
	copy(out, d.b[d.p:d.p+int(n)])
	d.p += int(n)
	return out
}
