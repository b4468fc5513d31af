// Package jsonvalid checks JSON documents the way encoding/json's Valid
// does, several times faster and without allocating. wasmhost checks every
// settings object it sends a policy plugin and every canonical form a
// plugin answers with. On a reload of thousands of settings that check was
// a noticeable share of a canonicalize call.
package jsonvalid

import "unsafe"

// maxDepth is encoding/json's nesting limit: a document nesting arrays and
// objects deeper than this is not valid JSON to it, so not to us either.
const maxDepth = 10000

// Bytes is String for a byte slice, which it does not copy or keep.
func Bytes(b []byte) bool {
	return String(unsafe.String(unsafe.SliceData(b), len(b)))
}

// String reports whether s is exactly one JSON value with optional white
// space around it, accepting precisely what json.Valid accepts (including
// its nesting limit, and bytes that are not UTF-8 inside strings). It is a
// single pass without allocation for documents nested up to 64 deep.
func String(s string) bool {
	i := valueEnd(s, skipSpaceAt(s, 0))
	return i >= 0 && skipSpaceAt(s, i) == len(s)
}

// ValueEnd returns the index just past the JSON value whose first byte is
// b[i], or -1 when no value valid to json.Valid starts there. What follows
// the value is the caller's to check: with ValueEnd a decoder finds the end
// of a value and checks it in the same pass.
func ValueEnd(b []byte, i int) int {
	return valueEnd(unsafe.String(unsafe.SliceData(b), len(b)), i)
}

func valueEnd(s string, i int) int {
	var few [64]byte
	stack := few[:0] // the open containers, '{' or '['
	for {
		// A value starts at i.
		if i >= len(s) {
			return -1
		}
		done := true // whether the value at i is complete once scanned
		switch c := s[i]; {
		case c == '{' || c == '[':
			if stack = append(stack, c); len(stack) > maxDepth {
				return -1
			}
			i = skipSpaceAt(s, i+1)
			if i < len(s) && s[i] == c+2 { // '}' is '{'+2, ']' is '['+2
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				if i = memberKey(s, i); i < 0 {
					return -1
				}
			}
			done = false
		case c == '"':
			if i = stringEnd(s, i); i < 0 {
				return -1
			}
		case c == '-' || ('0' <= c && c <= '9'):
			if i = numberEnd(s, i); i < 0 {
				return -1
			}
		case c == 't':
			if i = literalEnd(s, i, "true"); i < 0 {
				return -1
			}
		case c == 'f':
			if i = literalEnd(s, i, "false"); i < 0 {
				return -1
			}
		case c == 'n':
			if i = literalEnd(s, i, "null"); i < 0 {
				return -1
			}
		default:
			return -1
		}
		if !done {
			continue
		}
		// A value just ended: close containers until one wants another value.
		for {
			if len(stack) == 0 {
				return i
			}
			i = skipSpaceAt(s, i)
			if i >= len(s) {
				return -1
			}
			open := stack[len(stack)-1]
			if s[i] == open+2 {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if s[i] != ',' {
				return -1
			}
			i = skipSpaceAt(s, i+1)
			if open == '{' {
				if i = memberKey(s, i); i < 0 {
					return -1
				}
			}
			break
		}
	}
}

func skipSpaceAt(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// memberKey checks `"key" :` at i and returns where the member's value may
// start, or -1.
func memberKey(s string, i int) int {
	if i >= len(s) || s[i] != '"' {
		return -1
	}
	if i = stringEnd(s, i); i < 0 {
		return -1
	}
	i = skipSpaceAt(s, i)
	if i >= len(s) || s[i] != ':' {
		return -1
	}
	return skipSpaceAt(s, i+1)
}

// stringEnd checks the string literal whose quote is at i and returns the
// index after its closing quote, or -1.
func stringEnd(s string, i int) int {
	for i++; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			i++
			if i >= len(s) {
				return -1
			}
			switch s[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(s) {
					return -1
				}
				for j := i + 1; j <= i+4; j++ {
					if !isHex(s[j]) {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// numberEnd checks the number starting at i and returns the index after it,
// or -1. What follows the number is the caller's business.
func numberEnd(s string, i int) int {
	if s[i] == '-' {
		i++
	}
	switch {
	case i >= len(s):
		return -1
	case s[i] == '0':
		i++
	case '1' <= s[i] && s[i] <= '9':
		i = digitsEnd(s, i+1)
	default:
		return -1
	}
	if i < len(s) && s[i] == '.' {
		j := digitsEnd(s, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := digitsEnd(s, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digitsEnd(s string, i int) int {
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	return i
}

// literalEnd checks that word is at i and returns the index after it, or -1.
func literalEnd(s string, i int, word string) int {
	if len(s)-i < len(word) || s[i:i+len(word)] != word {
		return -1
	}
	return i + len(word)
}
