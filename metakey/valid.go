package metakey

// maxDepth is encoding/json's nesting limit: a document nesting arrays and
// objects deeper than this is not valid JSON to it, so not to us either.
const maxDepth = 10000

// validJSON reports whether s is exactly one JSON value with optional white
// space around it, accepting precisely what json.Valid accepts (including
// its nesting limit, and bytes that are not UTF-8 inside strings). It is a
// single pass without allocation for documents nested up to 64 deep.
func validJSON(s string) bool {
	var few [64]byte
	stack := few[:0] // the open containers, '{' or '['
	i := skipSpaceAt(s, 0)
	for {
		// A value starts at i.
		if i >= len(s) {
			return false
		}
		done := true // whether the value at i is complete once scanned
		switch c := s[i]; {
		case c == '{' || c == '[':
			if stack = append(stack, c); len(stack) > maxDepth {
				return false
			}
			i = skipSpaceAt(s, i+1)
			if i < len(s) && s[i] == c+2 { // '}' is '{'+2, ']' is '['+2
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				if i = memberKey(s, i); i < 0 {
					return false
				}
			}
			done = false
		case c == '"':
			if i = stringEnd(s, i); i < 0 {
				return false
			}
		case c == '-' || ('0' <= c && c <= '9'):
			if i = numberEnd(s, i); i < 0 {
				return false
			}
		case c == 't':
			if i = literalEnd(s, i, "true"); i < 0 {
				return false
			}
		case c == 'f':
			if i = literalEnd(s, i, "false"); i < 0 {
				return false
			}
		case c == 'n':
			if i = literalEnd(s, i, "null"); i < 0 {
				return false
			}
		default:
			return false
		}
		if !done {
			continue
		}
		// A value just ended: close containers until one wants another value.
		for {
			i = skipSpaceAt(s, i)
			if len(stack) == 0 {
				return i == len(s)
			}
			if i >= len(s) {
				return false
			}
			open := stack[len(stack)-1]
			if s[i] == open+2 {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if s[i] != ',' {
				return false
			}
			i = skipSpaceAt(s, i+1)
			if open == '{' {
				if i = memberKey(s, i); i < 0 {
					return false
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
