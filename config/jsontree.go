package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"unicode/utf8"
)

// A kind is the JSON type of a node.
type kind uint8

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

// String names the kind with its article, as used in "expected X, got Y".
func (k kind) String() string {
	switch k {
	case kindNull:
		return "null"
	case kindBool:
		return "a boolean"
	case kindNumber:
		return "a number"
	case kindString:
		return "a string"
	case kindArray:
		return "an array"
	case kindObject:
		return "an object"
	}
	return "an unknown value"
}

// A node is one JSON value of the config file with its byte span, so that
// errors can name a position and raw values can be passed on untouched.
type node struct {
	kind    kind
	off     int // offset of the first byte of the value
	end     int // offset just past the value
	boolean bool
	text    string // decoded string, or the literal of a number
	elems   []*node
	members []member
}

// A member is one key/value pair of an object, in document order.
type member struct {
	key    string
	keyOff int
	val    *node
}

// A dupKey records a key that appears twice in the same object.
type dupKey struct {
	path string // path of the object holding the key
	key  string
	off  int // offset of the second occurrence
}

// A seg is one step of a JSON path, linked to its parent; the path string is
// only rendered when an error needs it.
type seg struct {
	parent  *seg
	key     string
	index   int
	isIndex bool
}

func (s *seg) String() string {
	if s == nil {
		return ""
	}
	if s.isIndex {
		return joinIndex(s.parent.String(), s.index)
	}
	return joinKey(s.parent.String(), s.key)
}

// errTreeSyntax is returned by parseTree when the input, although accepted
// by encoding/json, did not match the parser's expectations. It cannot
// happen for input encoding/json validated; it exists so that a bug here
// reports an error instead of panicking.
var errTreeSyntax = errors.New("unexpected input")

// A parser builds a node tree from JSON text that encoding/json has already
// validated, recording every duplicate key on the way.
type parser struct {
	data []byte
	pos  int
	dups []dupKey
	err  error
}

// parseTree parses valid JSON text into a tree. It must only be called on
// data for which json.Valid reports true.
func parseTree(data []byte) (*node, []dupKey, error) {
	p := &parser{data: data}
	n := p.value(nil)
	p.ws()
	if p.err == nil && p.pos != len(p.data) {
		p.fail()
	}
	if p.err != nil {
		return nil, nil, p.err
	}
	return n, p.dups, nil
}

func (p *parser) fail() {
	if p.err == nil {
		p.err = errTreeSyntax
	}
}

func (p *parser) peek() byte {
	if p.pos < len(p.data) {
		return p.data[p.pos]
	}
	return 0
}

func (p *parser) ws() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(at *seg) *node {
	p.ws()
	if p.err != nil {
		return nil
	}
	switch c := p.peek(); {
	case c == '{':
		return p.object(at)
	case c == '[':
		return p.array(at)
	case c == '"':
		off := p.pos
		s, ok := p.str()
		if !ok {
			return nil
		}
		return &node{kind: kindString, off: off, end: p.pos, text: s}
	case c == 't':
		return p.literal("true", kindBool, true)
	case c == 'f':
		return p.literal("false", kindBool, false)
	case c == 'n':
		return p.literal("null", kindNull, false)
	case c == '-' || (c >= '0' && c <= '9'):
		off := p.pos
		for p.pos < len(p.data) {
			c := p.data[p.pos]
			if (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
				p.pos++
				continue
			}
			break
		}
		return &node{kind: kindNumber, off: off, end: p.pos, text: string(p.data[off:p.pos])}
	}
	p.fail()
	return nil
}

func (p *parser) literal(lit string, k kind, b bool) *node {
	off := p.pos
	if !bytes.HasPrefix(p.data[p.pos:], []byte(lit)) {
		p.fail()
		return nil
	}
	p.pos += len(lit)
	return &node{kind: k, off: off, end: p.pos, boolean: b}
}

// str scans the string starting at p.pos and decodes it exactly as
// encoding/json does.
func (p *parser) str() (string, bool) {
	start := p.pos
	p.pos++ // opening quote
	escaped := false
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case '\\':
			escaped = true
			p.pos += 2
			continue
		case '"':
			p.pos++
			body := p.data[start+1 : p.pos-1]
			if !escaped && utf8.Valid(body) {
				return string(body), true
			}
			var s string
			if err := json.Unmarshal(p.data[start:p.pos], &s); err != nil {
				p.fail()
				return "", false
			}
			return s, true
		}
		p.pos++
	}
	p.fail()
	return "", false
}

func (p *parser) object(at *seg) *node {
	n := &node{kind: kindObject, off: p.pos}
	p.pos++ // {
	p.ws()
	if p.peek() == '}' {
		p.pos++
		n.end = p.pos
		return n
	}
	var seen map[string]int // key -> index in n.members
	for p.err == nil {
		p.ws()
		if p.peek() != '"' {
			p.fail()
			return nil
		}
		keyOff := p.pos
		key, ok := p.str()
		if !ok {
			return nil
		}
		if seen == nil {
			seen = make(map[string]int)
		}
		prev, dup := seen[key]
		if dup {
			p.dups = append(p.dups, dupKey{path: at.String(), key: key, off: keyOff})
		}
		p.ws()
		if p.peek() != ':' {
			p.fail()
			return nil
		}
		p.pos++
		val := p.value(&seg{parent: at, key: key})
		if p.err != nil {
			return nil
		}
		m := member{key: key, keyOff: keyOff, val: val}
		if dup {
			// The last value wins, as with encoding/json; the duplicate
			// itself is reported, so the tree holds each key once.
			n.members[prev] = m
		} else {
			seen[key] = len(n.members)
			n.members = append(n.members, m)
		}
		p.ws()
		switch p.peek() {
		case ',':
			p.pos++
		case '}':
			p.pos++
			n.end = p.pos
			return n
		default:
			p.fail()
		}
	}
	return nil
}

func (p *parser) array(at *seg) *node {
	n := &node{kind: kindArray, off: p.pos}
	p.pos++ // [
	p.ws()
	if p.peek() == ']' {
		p.pos++
		n.end = p.pos
		n.elems = []*node{}
		return n
	}
	for p.err == nil {
		val := p.value(&seg{parent: at, index: len(n.elems), isIndex: true})
		if p.err != nil {
			return nil
		}
		n.elems = append(n.elems, val)
		p.ws()
		switch p.peek() {
		case ',':
			p.pos++
		case ']':
			p.pos++
			n.end = p.pos
			return n
		default:
			p.fail()
		}
	}
	return nil
}

// A source maps byte offsets of a file to 1-based line and column numbers.
// Columns count characters (runes), not bytes.
type source struct {
	data  []byte
	lines []int // offset of the first byte of each line
}

func newSource(data []byte) source {
	lines := []int{0}
	for i, c := range data {
		if c == '\n' {
			lines = append(lines, i+1)
		}
	}
	return source{data: data, lines: lines}
}

// position returns the line and column of offset off.
func (s source) position(off int) (line, col int) {
	off = max(0, min(off, len(s.data)))
	i := sort.Search(len(s.lines), func(i int) bool { return s.lines[i] > off }) - 1
	return i + 1, utf8.RuneCount(s.data[s.lines[i]:off]) + 1
}

// JoinPath returns the JSON path of the object keys, written as the
// loader's messages write paths: mcpServers.demo, mcpServers["my server"].
func JoinPath(keys ...string) string {
	path := ""
	for _, k := range keys {
		path = joinKey(path, k)
	}
	return path
}

// joinKey appends an object key to a JSON path. Keys made only of letters,
// digits, '_' and '-' are written after a dot; others are quoted in brackets
// (`mcpServers["my server"]`).
func joinKey(path, key string) string {
	if plainKey(key) {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	return path + "[" + strconv.Quote(key) + "]"
}

// joinIndex appends an array index to a JSON path.
func joinIndex(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

func plainKey(key string) bool {
	if key == "" {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
