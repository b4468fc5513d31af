package wasmbin

import (
	"bytes"
	"fmt"
)

// Header is the magic number and version 1 of the binary format, the first
// eight bytes of every core module.
var Header = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

// HasHeader reports whether b starts with Header.
func HasHeader(b []byte) bool { return bytes.HasPrefix(b, Header) }

// Section ids.
const (
	SecCustom    byte = 0
	SecType      byte = 1
	SecImport    byte = 2
	SecFunction  byte = 3
	SecTable     byte = 4
	SecMemory    byte = 5
	SecGlobal    byte = 6
	SecExport    byte = 7
	SecStart     byte = 8
	SecElement   byte = 9
	SecCode      byte = 10
	SecData      byte = 11
	SecDataCount byte = 12
	SecTag       byte = 13
)

var sectionNames = [...]string{
	"custom", "type", "import", "function", "table", "memory", "global",
	"export", "start", "element", "code", "data", "data count", "tag",
}

// SectionName names section id for messages.
func SectionName(id byte) string {
	if int(id) < len(sectionNames) {
		return sectionNames[id]
	}
	return fmt.Sprintf("unknown (id %d)", id)
}

// sectionRank gives the position of a known non-custom section in the
// order the format requires, or 0 for an unknown id.
var sectionRank = [...]uint8{
	SecType: 1, SecImport: 2, SecFunction: 3, SecTable: 4, SecMemory: 5,
	SecTag: 6, SecGlobal: 7, SecExport: 8, SecStart: 9, SecElement: 10,
	SecDataCount: 11, SecCode: 12, SecData: 13,
}

// SectionRank returns the position of non-custom section id in the order
// the format requires (1 for the type section), or 0 for a custom or
// unknown id. Sections of a module have strictly increasing ranks.
func SectionRank(id byte) uint8 {
	if int(id) < len(sectionRank) {
		return sectionRank[id]
	}
	return 0
}

// A Section is one section of a module b: b[Start:Body] is its header (the
// id and the size), b[Body:End] its content.
type Section struct {
	ID               byte
	Start, Body, End int
}

// SectionAt reads the header of the section starting at b[p], and reports
// whether the header is well formed and the content fits in b.
func SectionAt(b []byte, p int) (Section, bool) {
	if p < 0 || p >= len(b) {
		return Section{}, false
	}
	size, n := U32(b, p+1)
	if n == 0 {
		return Section{}, false
	}
	body := p + 1 + n
	if uint64(size) > uint64(len(b)-body) {
		return Section{}, false
	}
	return Section{ID: b[p], Start: p, Body: body, End: body + int(size)}, true
}

// AppendSection appends a section with id and content.
func AppendSection(b []byte, id byte, content []byte) []byte {
	b = append(b, id)
	b = AppendU32(b, uint32(len(content)))
	return append(b, content...)
}

// Value types (and the reference types, which are value types too).
const (
	I32       byte = 0x7f
	I64       byte = 0x7e
	F32       byte = 0x7d
	F64       byte = 0x7c
	V128      byte = 0x7b
	FuncRef   byte = 0x70
	ExternRef byte = 0x6f
)

// ValTypeName names value type t, or gives its byte in hex.
func ValTypeName(t byte) string {
	switch t {
	case I32:
		return "i32"
	case I64:
		return "i64"
	case F32:
		return "f32"
	case F64:
		return "f64"
	case V128:
		return "v128"
	case FuncRef:
		return "funcref"
	case ExternRef:
		return "externref"
	}
	return fmt.Sprintf("0x%02x", t)
}

// IsNumOrRefType reports whether t is a number, vector or reference type
// of the core format: i32, i64, f32, f64, v128, funcref or externref.
func IsNumOrRefType(t byte) bool {
	switch t {
	case I32, I64, F32, F64, V128, FuncRef, ExternRef:
		return true
	}
	return false
}

// Other bytes of the format.
const (
	// FuncForm starts a function type in the type section.
	FuncForm byte = 0x60
	// BlockEmpty is the block type of a block with no results.
	BlockEmpty byte = 0x40
	// TableInit starts a table type with an initialiser expression (the
	// function-references proposal).
	TableInit byte = 0x40
	// LimitsHasMax is the flag of limits that carry a maximum.
	LimitsHasMax byte = 0x01
	// LimitsShared is the flag of a shared memory's limits.
	LimitsShared byte = 0x02
)

// External kinds, of imports and exports.
const (
	ExternFunc   byte = 0x00
	ExternTable  byte = 0x01
	ExternMemory byte = 0x02
	ExternGlobal byte = 0x03
	ExternTag    byte = 0x04
)

// ExternKindName names external kind k: "func", "table", "memory",
// "global" or "tag", or "" for an unknown kind.
func ExternKindName(k byte) string {
	switch k {
	case ExternFunc:
		return "func"
	case ExternTable:
		return "table"
	case ExternMemory:
		return "memory"
	case ExternGlobal:
		return "global"
	case ExternTag:
		return "tag"
	}
	return ""
}

// Subsections of the "name" custom section that are keyed by function
// index.
const (
	NameModule    byte = 0 // the module's name
	NameFunctions byte = 1 // vec(funcidx name)
	NameLocals    byte = 2 // vec(funcidx vec(localidx name))
	NameLabels    byte = 3 // vec(funcidx vec(labelidx name))
)
