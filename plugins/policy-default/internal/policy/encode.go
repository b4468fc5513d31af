package policy

import (
	"encoding/json"
	"slices"
)

// safeByte[c] is true for the bytes encoding/json.Marshal copies into a
// JSON string unchanged: printable ASCII other than '"', backslash and the
// HTML characters '<', '>' and '&'.
var safeByte = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// notSafe8 is non-zero when some byte of x is not safe (see safeByte).
func notSafe8(x uint64) uint64 {
	return notPlain8(x) | zeroByte(x^'<'*lsb) | zeroByte(x^'>'*lsb) | zeroByte(x^'&'*lsb)
}

// safe reports whether every byte of s is safe (see safeByte), testing
// eight bytes at a time.
func safe(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if notSafe8(le64(s, i)) != 0 {
			return false
		}
	}
	if i == len(s) {
		return true
	}
	// Pad the tail with a safe byte rather than zeros, which are not safe.
	n := len(s) - i
	return notSafe8(tail(s, i)|'a'*lsb<<(8*n)) == 0
}

// appendString appends s as a JSON string, byte for byte as
// encoding/json.Marshal writes it (HTML escaping on). A string of safe
// bytes is copied; a string that needs nothing but '"' and backslash
// escaped is escaped here; any other string (a control character, '<',
// '>', '&' or a non-ASCII byte) is handed to encoding/json, which also
// decides how to write invalid UTF-8 and U+2028/U+2029.
func appendString(dst []byte, s string) []byte {
	if safe(s) {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '"' && c != '\\' && !safeByte[c] {
			b, err := json.Marshal(s)
			if err != nil {
				// Marshal cannot fail for a string; keep the output valid JSON anyway.
				b = []byte(`"\ufffd"`)
			}
			return append(dst, b...)
		}
	}
	return appendEscaped(dst, s)
}

// appendEscaped appends s as a JSON string, escaping only '"' and
// backslash. For a string that holds valid UTF-8 and no control character,
// '<', '>', '&', U+2028 or U+2029, this is exactly what encoding/json.Marshal
// writes.
func appendEscaped[T ~string | ~[]byte](dst []byte, s T) []byte {
	dst = slices.Grow(dst, 2+2*len(s))
	n := len(dst)
	buf := dst[:cap(dst)]
	buf[n] = '"'
	n++
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' {
			buf[n] = '\\'
			n++
		}
		buf[n] = c
		n++
	}
	buf[n] = '"'
	return buf[:n+1]
}

// The fixed parts of canonical JSON, indexed by the trust value and by
// alwaysLoadTools.
var (
	jsonHead = [3]string{
		trustNull:  `{"trust":null,"alwaysLoadTools":`,
		trustFalse: `{"trust":false,"alwaysLoadTools":`,
		trustTrue:  `{"trust":true,"alwaysLoadTools":`,
	}
	jsonAlways  = [2]string{`false,"includeTools":`, `true,"includeTools":`}
	jsonExclude = `,"excludeTools":`
)

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// appendJSON appends the compact canonical JSON of c to dst.
func (c *canon) appendJSON(dst []byte) []byte {
	dst = append(dst, jsonHead[c.trust]...)
	dst = append(dst, jsonAlways[b2i(c.always)]...)
	if c.hasInclude {
		dst = appendStrings(dst, c.include, c.safe)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, jsonExclude...)
	dst = appendStrings(dst, c.exclude, c.safe)
	return append(dst, '}')
}

// appendStrings appends list as a JSON array of strings. known says that
// every string is safe (see safeByte), unchecked.
func appendStrings(dst []byte, list []string, known bool) []byte {
	dst = append(dst, '[')
	for i, v := range list {
		if i > 0 {
			dst = append(dst, ',')
		}
		if known || safe(v) {
			dst = append(dst, '"')
			dst = append(dst, v...)
			dst = append(dst, '"')
		} else {
			dst = appendString(dst, v)
		}
	}
	return append(dst, ']')
}
