package policy

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unsafe"
)

// maxDepth is the deepest nesting of arrays and objects the scanner accepts
// inside one settings object, the same limit encoding/json applies.
const maxDepth = 10000

// A SyntaxError reports input that is not well-formed JSON, or JSON that
// does not have the shape of an ABI request. Offset is the byte position in
// the scanned input where the problem was found.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("malformed JSON at byte %d: %s", e.Offset, e.Msg)
}

// A scanner reads one JSON document from buf, front to back, without
// building a tree. It decodes strings exactly as encoding/json.Unmarshal
// does: plain ASCII strings are sliced directly and any string holding an
// escape or a non-ASCII byte is handed to encoding/json.
type scanner struct {
	buf []byte
	pos int
	// alias lets decoded plain strings share memory with buf. It is set
	// only while buf is known to outlive them unchanged.
	alias bool
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// peek skips whitespace and returns the next byte without consuming it, or
// 0 at the end of the input.
func (s *scanner) peek() byte {
	for s.pos < len(s.buf) {
		c := s.buf[s.pos]
		if !isSpace(c) {
			return c
		}
		s.pos++
	}
	return 0
}

func (s *scanner) errorf(format string, args ...any) error {
	return &SyntaxError{Offset: s.pos, Msg: fmt.Sprintf(format, args...)}
}

// unexpected reports the byte at the current position (or the end of the
// input) where what was expected.
func (s *scanner) unexpected(what string) error {
	if s.pos >= len(s.buf) {
		return s.errorf("unexpected end of input, expected %s", what)
	}
	return s.errorf("unexpected %s, expected %s", quoteByte(s.buf[s.pos]), what)
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

// consume skips whitespace and then the byte c, or fails naming what.
func (s *scanner) consume(c byte, what string) error {
	if s.peek() != c {
		return s.unexpected(what)
	}
	s.pos++
	return nil
}

// end checks that only whitespace is left.
func (s *scanner) end() error {
	if s.peek() != 0 || s.pos < len(s.buf) {
		return s.errorf("unexpected %s after the top-level value", quoteByte(s.buf[s.pos]))
	}
	return nil
}

// kindOf names the JSON type of the value starting with c, as used in
// refusal messages ("got a number"), or "" when c starts no value.
func kindOf(c byte) string {
	switch {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	case c == '-' || (c >= '0' && c <= '9'):
		return "a number"
	}
	return ""
}

// plainByte[c] is true for the bytes that stand for themselves in a JSON
// string: printable ASCII other than '"' and backslash.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// Masks for testing eight bytes of a uint64 at once.
const (
	lsb = 0x0101010101010101 // the low bit of each byte
	msb = 0x8080808080808080 // the high bit of each byte
)

// zeroByte is non-zero when some byte of x is zero.
func zeroByte(x uint64) uint64 { return (x - lsb) & ^x & msb }

// notPlain8 is non-zero when some byte of x is not plain (see plainByte):
// a control character, DEL, a non-ASCII byte, '"' or backslash.
func notPlain8(x uint64) uint64 {
	return x&msb | (x-0x20*lsb)&^x&msb | zeroByte(x^0x7f*lsb) | zeroByte(x^'"'*lsb) | zeroByte(x^'\\'*lsb)
}

// htmlByte8 is non-zero when some byte of x is '<', '>' or '&', which
// encoding/json.Marshal escapes.
func htmlByte8(x uint64) uint64 {
	return zeroByte(x^'<'*lsb) | zeroByte(x^'>'*lsb) | zeroByte(x^'&'*lsb)
}

// stringEnd validates the string starting at buf[start] (a '"') and returns
// the index just past its closing quote, whether the string is plain (only
// bytes 0x20..0x7e and no escapes, so that its value is its raw bytes), and
// whether it is also safe (see safeByte: encoding/json writes it unchanged).
func (s *scanner) stringEnd(start int) (end int, plain, safe bool, err error) {
	buf := s.buf
	if end, html := plainString(buf, start); end >= 0 {
		return end, true, !html, nil
	}
	i := start + 1
	for i < len(buf) {
		c := buf[i]
		switch {
		case c == '"':
			return i + 1, false, false, nil
		case c == '\\':
			if i+1 >= len(buf) {
				i++
				continue
			}
			switch buf[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for k := i + 2; k < i+6; k++ {
					if k >= len(buf) {
						s.pos = len(buf)
						return 0, false, false, s.errorf("unexpected end of input in string escape")
					}
					if !isHex(buf[k]) {
						s.pos = k
						return 0, false, false, s.errorf("invalid character %s in \\u escape", quoteByte(buf[k]))
					}
				}
				i += 6
			default:
				s.pos = i + 1
				return 0, false, false, s.errorf("invalid escape %s in string", quoteByte(buf[i+1]))
			}
		case c < 0x20:
			s.pos = i
			return 0, false, false, s.errorf("control character 0x%02x in string", c)
		default:
			i++
		}
	}
	s.pos = len(buf)
	return 0, false, false, s.errorf("unexpected end of input in string")
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// rawString reads the string at the current position (after whitespace)
// and returns where it starts (its opening quote) and ends (just past its
// closing quote), and whether it is plain (see stringEnd): then the bytes
// between the quotes are its value.
func (s *scanner) rawString() (start, end int, plain, safe bool, err error) {
	if s.peek() != '"' {
		return 0, 0, false, false, s.unexpected("a string")
	}
	start = s.pos
	end, plain, safe, err = s.stringEnd(start)
	if err != nil {
		return 0, 0, false, false, err
	}
	s.pos = end
	return start, end, plain, safe, nil
}

// str reads the string at the current position (after whitespace) and
// returns its decoded value, and whether that value is safe (see safeByte).
func (s *scanner) str() (v string, safe bool, err error) {
	start, end, plain, safe, err := s.rawString()
	if err != nil {
		return "", false, err
	}
	v, err = s.value(start, end, plain)
	return v, safe, err
}

// value returns the decoded value of the string found by rawString at
// buf[start:end]. When s.alias is set a plain string shares the memory of
// buf instead of being copied.
func (s *scanner) value(start, end int, plain bool) (string, error) {
	if plain {
		return s.text(s.buf[start+1 : end-1]), nil
	}
	var v string
	if err := json.Unmarshal(s.buf[start:end], &v); err != nil {
		return "", &SyntaxError{Offset: start, Msg: fmt.Sprintf("invalid string: %v", err)}
	}
	return v, nil
}

// text returns b, a part of buf, as a string, sharing its memory when
// s.alias is set.
func (s *scanner) text(b []byte) string {
	if s.alias && len(b) > 0 {
		return unsafe.String(&b[0], len(b))
	}
	return string(b)
}

// skipString skips the string at the current position (after whitespace),
// validating it.
func (s *scanner) skipString() error {
	if s.peek() != '"' {
		return s.unexpected("a string")
	}
	end, _, _, err := s.stringEnd(s.pos)
	if err != nil {
		return err
	}
	s.pos = end
	return nil
}

// literal consumes the literal word (true, false or null) at the current
// position.
func (s *scanner) literal(word string) error {
	if n := len(word); s.pos+n <= len(s.buf) && string(s.buf[s.pos:s.pos+n]) == word {
		s.pos += n
		return nil
	}
	for k := 0; k < len(word); k++ {
		if s.pos+k >= len(s.buf) || s.buf[s.pos+k] != word[k] {
			s.pos += k
			return s.unexpected("literal " + word)
		}
	}
	return s.errorf("literal %s not matched", word) // unreachable
}

// number consumes the number at the current position, checking the JSON
// number grammar.
func (s *scanner) number() error {
	buf := s.buf
	i := s.pos
	if i < len(buf) && buf[i] == '-' {
		i++
	}
	switch {
	case i < len(buf) && buf[i] == '0':
		i++
	case i < len(buf) && buf[i] >= '1' && buf[i] <= '9':
		for i < len(buf) && buf[i] >= '0' && buf[i] <= '9' {
			i++
		}
	default:
		s.pos = i
		return s.unexpected("a digit")
	}
	if i < len(buf) && buf[i] == '.' {
		i++
		if i >= len(buf) || buf[i] < '0' || buf[i] > '9' {
			s.pos = i
			return s.unexpected("a digit after the decimal point")
		}
		for i < len(buf) && buf[i] >= '0' && buf[i] <= '9' {
			i++
		}
	}
	if i < len(buf) && (buf[i] == 'e' || buf[i] == 'E') {
		i++
		if i < len(buf) && (buf[i] == '+' || buf[i] == '-') {
			i++
		}
		if i >= len(buf) || buf[i] < '0' || buf[i] > '9' {
			s.pos = i
			return s.unexpected("a digit in the exponent")
		}
		for i < len(buf) && buf[i] >= '0' && buf[i] <= '9' {
			i++
		}
	}
	s.pos = i
	return nil
}

// skipValue skips one complete value of any type at the current position,
// validating its syntax. depth is the number of arrays and objects already
// open around the value; nesting deeper than maxDepth is refused. It does
// not recurse, so hostile nesting cannot exhaust the stack.
func (s *scanner) skipValue(depth int) error {
	var closers []byte // the closing byte of each container opened here
	for {
		// A value is expected here.
		c := s.peek()
		switch {
		case c == '{' || c == '[':
			if depth+len(closers)+1 > maxDepth {
				return s.errorf("nesting deeper than %d", maxDepth)
			}
			s.pos++
			closer := byte(']')
			if c == '{' {
				closer = '}'
			}
			if s.peek() == closer {
				s.pos++
				break
			}
			closers = append(closers, closer)
			if c == '{' {
				if err := s.objectKey(); err != nil {
					return err
				}
			}
			continue
		case c == '"':
			if err := s.skipString(); err != nil {
				return err
			}
		case c == 't':
			if err := s.literal("true"); err != nil {
				return err
			}
		case c == 'f':
			if err := s.literal("false"); err != nil {
				return err
			}
		case c == 'n':
			if err := s.literal("null"); err != nil {
				return err
			}
		case c == '-' || (c >= '0' && c <= '9'):
			if err := s.number(); err != nil {
				return err
			}
		default:
			return s.unexpected("a value")
		}
		// A value has ended: close containers until one continues.
		for {
			if len(closers) == 0 {
				return nil
			}
			closer := closers[len(closers)-1]
			c := s.peek()
			if c == ',' {
				s.pos++
				if closer == '}' {
					if err := s.objectKey(); err != nil {
						return err
					}
				}
				break
			}
			if c != closer {
				return s.unexpected(fmt.Sprintf("',' or %s", quoteByte(closer)))
			}
			s.pos++
			closers = closers[:len(closers)-1]
		}
	}
}

// objectKey skips an object member's key and the colon after it.
func (s *scanner) objectKey() error {
	if err := s.skipString(); err != nil {
		return err
	}
	return s.consume(':', "':'")
}

// next is called after a member or element: it consumes a ',' and reports
// true, or consumes closer and reports false.
func (s *scanner) next(closer byte) (more bool, err error) {
	switch s.peek() {
	case ',':
		s.pos++
		return true, nil
	case closer:
		s.pos++
		return false, nil
	}
	return false, s.unexpected(fmt.Sprintf("',' or %s", quoteByte(closer)))
}

// object iterates over the members of the object at the current position:
// member is called with each decoded key, positioned at the value, and must
// consume the value. A null is rejected.
func (s *scanner) object(member func(key string) error) error {
	if err := s.consume('{', "'{'"); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		key, _, err := s.str()
		if err != nil {
			return err
		}
		if err := s.consume(':', "':'"); err != nil {
			return err
		}
		if err := member(key); err != nil {
			return err
		}
		more, err := s.next('}')
		if err != nil || !more {
			return err
		}
	}
}

// array iterates over the elements of the array at the current position:
// elem is called with each index, positioned at the element, and must
// consume it. It reports whether the value was null instead of an array.
func (s *scanner) array(elem func(i int) error) (null bool, err error) {
	switch s.peek() {
	case 'n':
		return true, s.literal("null")
	case '[':
		s.pos++
	default:
		return false, s.unexpected("an array or null")
	}
	if s.peek() == ']' {
		s.pos++
		return false, nil
	}
	for i := 0; ; i++ {
		if err := elem(i); err != nil {
			return false, err
		}
		more, err := s.next(']')
		if err != nil || !more {
			return false, err
		}
	}
}
