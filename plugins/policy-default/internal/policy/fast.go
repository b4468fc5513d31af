package policy

import (
	"math/bits"
	"unsafe"
)

// fast reads, at the current position, a settings object in the form the
// host sends: compact JSON (encoding/json compacts every raw settings object
// it marshals) whose strings are plain, with the four settings well typed.
// It does so in one function over local variables, because each call and
// each turn of a byte loop is costly in a Go WebAssembly guest.
//
// It reports false, having consumed nothing, for any other form: white
// space, escapes or non-ASCII bytes in a string, fractions, exponents or
// nesting deeper than one array or object under other keys (see skipFlat),
// repeated keys, ill-typed values or malformed JSON. The general parser then
// reads the object; both must give the same canon.
func (p *parser) fast() (c canon, ok bool) {
	buf := p.buf
	i := p.pos
	if i >= len(buf) || buf[i] != '{' {
		return c, false
	}
	i++
	include, exclude, others := p.include[:0], p.exclude[:0], p.others[:0]
	safe := true
	var seen uint8
	if i < len(buf) && buf[i] == '}' {
		i++
	} else {
		for {
			// A key and its colon.
			if i >= len(buf) || buf[i] != '"' {
				return c, false
			}
			end, _ := plainString(buf, i)
			if end < 0 || end >= len(buf) || buf[end] != ':' {
				return c, false
			}
			key := buf[i+1 : end-1]
			bit, _ := settingKey(key)
			if seen&bit != 0 {
				return c, false
			}
			seen |= bit
			i = end + 1
			if i >= len(buf) {
				return c, false
			}
			// Its value.
			switch bit {
			case seenTrust, seenAlwaysLoad:
				var v int8
				switch {
				case hasWord(buf, i, wordTrue, mask4):
					v, i = trustTrue, i+4
				case hasWord(buf, i, wordFalse, mask5):
					v, i = trustFalse, i+5
				case hasWord(buf, i, wordNull, mask4):
					v, i = trustNull, i+4
				default:
					return c, false
				}
				if bit == seenTrust {
					c.trust = v
				} else {
					c.always = v == trustTrue
				}
			case seenInclude, seenExclude:
				list := exclude
				if bit == seenInclude {
					list = include
				}
				if hasWord(buf, i, wordNull, mask4) {
					i += 4
					if bit == seenInclude {
						c.hasInclude = false
					}
					break
				}
				if buf[i] != '[' {
					return c, false
				}
				i++
				if i < len(buf) && buf[i] == ']' {
					i++
				} else {
					for {
						if i >= len(buf) || buf[i] != '"' {
							return c, false
						}
						end, html := plainString(buf, i)
						if end < 0 || end >= len(buf) {
							return c, false
						}
						safe = safe && !html
						text := buf[i+1 : end-1]
						if bit == seenInclude {
							text = text[:parenIn(buf, i+1, end-1)-(i+1)]
						}
						list = append(list, p.text(text))
						i = end
						if buf[i] == ']' {
							i++
							break
						}
						if buf[i] != ',' {
							return c, false
						}
						i++
					}
				}
				if bit == seenInclude {
					include, c.hasInclude = list, true
				} else {
					exclude = list
				}
			default:
				k := unsafe.String(unsafe.SliceData(key), len(key)) // only compared, never kept
				for _, o := range others {
					if equal(o, k) {
						return c, false
					}
				}
				others = append(others, p.text(key))
				if i = skipFlat(buf, i); i < 0 {
					return c, false
				}
			}
			if i >= len(buf) {
				return c, false
			}
			if buf[i] == '}' {
				i++
				break
			}
			if buf[i] != ',' {
				return c, false
			}
			i++
		}
	}
	p.pos = i
	p.include, p.exclude, p.others = include, exclude, others
	p.finish(&c, include, exclude, false, safe)
	return c, true
}

// The JSON literals as words (see le64), and masks for words of four and
// five bytes.
var (
	wordTrue  = short("true")
	wordFalse = short("false")
	wordNull  = short("null")
)

const (
	mask4 = 1<<32 - 1
	mask5 = 1<<40 - 1
)

// hasWord reports whether buf holds, at i, the bytes whose word is w
// (mask covers their length). It reads eight bytes, and reports false when
// fewer are left: a literal that close to the end is not in the form the
// fast path takes.
func hasWord(buf []byte, i int, w, mask uint64) bool {
	return i+8 <= len(buf) && le64(buf, i)&mask == w
}

// plainString returns the index just past the closing quote of the plain
// string (see plainByte) that starts at buf[i] (a '"'), and whether it holds
// '<', '>' or '&'. It returns -1 when the string is not plain or not
// closed; the general scanner deals with such strings.
//
// It tests eight bytes at a time, which matters in a WebAssembly guest
// where each turn of a loop is slow: the flags the word tests set are exact
// for the lowest flagged byte (a false flag can only sit above a true one),
// so the first non-plain byte of a word is found without a byte loop.
func plainString(buf []byte, i int) (end int, html bool) {
	j := i + 1
	for j+8 <= len(buf) {
		x := le64(buf, j)
		h := htmlByte8(x)
		if m := notPlain8(x); m != 0 {
			k := bits.TrailingZeros64(m) >> 3
			if buf[j+k] != '"' {
				return -1, false
			}
			return j + k + 1, html || h&(1<<(8*k)-1) != 0
		}
		html = html || h != 0
		j += 8
	}
	for ; j < len(buf); j++ {
		switch c := buf[j]; {
		case c == '"':
			return j + 1, html
		case !plainByte[c]:
			return -1, false
		default:
			html = html || !safeByte[c]
		}
	}
	return -1, false
}

// fastNames reads, at the current position, a request list in the form the
// host sends: a compact JSON array of plain strings. It appends the strings
// to dst (when keep is set) and returns the number of elements. It reports
// false, having consumed nothing and appended nothing, for any other form,
// which the general parser then reads.
func (p *parser) fastNames(dst []string, keep bool) (_ []string, n int, ok bool) {
	buf, i := p.buf, p.pos
	if i >= len(buf) || buf[i] != '[' {
		return dst, 0, false
	}
	i++
	if i < len(buf) && buf[i] == ']' {
		p.pos = i + 1
		return dst, 0, true
	}
	n0 := len(dst)
	for {
		if i >= len(buf) || buf[i] != '"' {
			return dst[:n0], 0, false
		}
		end, _ := plainString(buf, i)
		if end < 0 || end >= len(buf) {
			return dst[:n0], 0, false
		}
		if keep {
			dst = append(dst, p.text(buf[i+1:end-1]))
		}
		n++
		i = end
		switch buf[i] {
		case ']':
			p.pos = i + 1
			return dst, n, true
		case ',':
			i++
		default:
			return dst[:n0], 0, false
		}
	}
}

// skipFlat returns the index just past the value at buf[i] when it is a
// plain string, a literal, a simple number, or an array or object holding
// only those (objects with plain keys), written compactly; otherwise -1.
// Such values are what a server entry's other keys (command, args, env,
// ...) usually hold.
func skipFlat(buf []byte, i int) int {
	if i >= len(buf) {
		return -1
	}
	closer := byte(0)
	switch buf[i] {
	case '[':
		closer = ']'
	case '{':
		closer = '}'
	default:
		return skipScalar(buf, i)
	}
	i++
	if i < len(buf) && buf[i] == closer {
		return i + 1
	}
	for {
		if closer == '}' {
			if i >= len(buf) || buf[i] != '"' {
				return -1
			}
			if i, _ = plainString(buf, i); i < 0 || i >= len(buf) || buf[i] != ':' {
				return -1
			}
			i++
		}
		if i = skipScalar(buf, i); i < 0 || i >= len(buf) {
			return -1
		}
		switch buf[i] {
		case closer:
			return i + 1
		case ',':
			i++
		default:
			return -1
		}
	}
}

// skipScalar returns the index just past the plain string, literal or
// simple number (an optional '-' and digits without leading zeros) at
// buf[i], or -1.
func skipScalar(buf []byte, i int) int {
	if i >= len(buf) {
		return -1
	}
	switch c := buf[i]; {
	case c == '"':
		end, _ := plainString(buf, i)
		return end
	case c == 't' && hasWord(buf, i, wordTrue, mask4), c == 'n' && hasWord(buf, i, wordNull, mask4):
		return i + 4
	case c == 'f' && hasWord(buf, i, wordFalse, mask5):
		return i + 5
	case c == '-' || (c >= '0' && c <= '9'):
		j := i
		if buf[j] == '-' {
			j++
		}
		start := j
		for j < len(buf) && buf[j] >= '0' && buf[j] <= '9' {
			j++
		}
		if j == start || (buf[start] == '0' && j-start > 1) {
			return -1
		}
		if j < len(buf) && (buf[j] == '.' || buf[j] == 'e' || buf[j] == 'E') {
			return -1 // fractions and exponents: left to the general parser
		}
		return j
	}
	return -1
}

// parenIn returns the index of the first '(' in buf[start:end], or end. It
// reads whole words of buf, which may reach past end.
func parenIn(buf []byte, start, end int) int {
	j := start
	for ; j < end && j+8 <= len(buf); j += 8 {
		if m := zeroByte(le64(buf, j) ^ '('*lsb); m != 0 {
			// A false flag can only sit above a true one.
			return min(j+bits.TrailingZeros64(m)>>3, end)
		}
	}
	if j < end {
		if k := indexParen(string(buf[j:end])); k >= 0 {
			return j + k
		}
	}
	return end
}
