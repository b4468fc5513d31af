package policy

import (
	"math/bits"
	"strconv"
)

// The string primitives in this file work on eight bytes at a time and are
// written to be inlined: straight-line code, few calls, no loop over single
// bytes. In the WebAssembly guest every call and every turn of a loop is
// expensive, and far more so when the host compiles the plugin with
// wazero's CloseOnContextDone (to enforce call timeouts), which adds a
// check at every loop header, and so at every Go function entry; the Go
// runtime's string equality, comparison and IndexByte for wasm loop once
// per byte.

// le64 returns the eight bytes of s at i as a little-endian word.
func le64[T ~string | ~[]byte](s T, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// short returns the bytes of s, shorter than eight, as a little-endian word
// padded with zero bytes.
func short[T ~string | ~[]byte](s T) uint64 {
	var x uint64
	switch len(s) {
	case 7:
		x = uint64(s[6]) << 48
		fallthrough
	case 6:
		x |= uint64(s[5]) << 40
		fallthrough
	case 5:
		x |= uint64(s[4]) << 32
		fallthrough
	case 4:
		x |= uint64(s[3]) << 24
		fallthrough
	case 3:
		x |= uint64(s[2]) << 16
		fallthrough
	case 2:
		x |= uint64(s[1]) << 8
		fallthrough
	case 1:
		x |= uint64(s[0])
	}
	return x
}

// tail returns the last len(s)-i bytes of s (fewer than eight, i a
// multiple of eight) as a little-endian word padded with zero bytes.
func tail[T ~string | ~[]byte](s T, i int) uint64 {
	if len(s) < 8 {
		return short(s)
	}
	// The last eight bytes, less those before i.
	return le64(s, len(s)-8) >> (8 * (8 - (len(s) - i)))
}

// equal reports whether a and b hold the same bytes.
func equal(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	i := 0
	for ; i+8 <= len(a); i += 8 {
		if le64(a, i) != le64(b, i) {
			return false
		}
	}
	return i == len(a) || tail(a, i) == tail(b, i)
}

// compare orders a and b by bytes, like strings.Compare.
func compare(a, b string) int {
	m := min(len(a), len(b))
	i := 0
	for ; i+8 <= m; i += 8 {
		if u, v := le64(a, i), le64(b, i); u != v {
			return cmpWords(u, v)
		}
	}
	if i < m {
		// The next m-i bytes of each, zero padded.
		n := 8 * (8 - (m - i))
		var u, v uint64
		if len(a)-i >= 8 {
			u = le64(a, i) << n >> n
		} else {
			u = tail(a, i) << n >> n
		}
		if len(b)-i >= 8 {
			v = le64(b, i) << n >> n
		} else {
			v = tail(b, i) << n >> n
		}
		if u != v {
			return cmpWords(u, v)
		}
	}
	switch {
	case len(a) < len(b):
		return -1
	case len(a) > len(b):
		return 1
	}
	return 0
}

// cmpWords orders two different little-endian words by their bytes.
func cmpWords(u, v uint64) int {
	if bits.ReverseBytes64(u) < bits.ReverseBytes64(v) {
		return -1
	}
	return 1
}

// prefixWord is the first eight bytes of s, zero padded, as a big-endian
// word: prefix words compare as the strings do, up to ties.
func prefixWord(s string) uint64 {
	if len(s) >= 8 {
		return bits.ReverseBytes64(le64(s, 0))
	}
	return bits.ReverseBytes64(short(s))
}

// indexParen returns the index of the first '(' in s, or -1.
func indexParen(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if m := zeroByte(le64(s, i) ^ '('*lsb); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	if i == len(s) {
		return -1
	}
	// The zero padding never matches '(', and a false flag can only sit
	// above a true one.
	if m := zeroByte(tail(s, i) ^ '('*lsb); m != 0 {
		return i + bits.TrailingZeros64(m)>>3
	}
	return -1
}

// hash returns a hash of s for stringSet. It is deterministic, as plugin
// output must be; a crafted set of colliding names only slows one call.
func hash(s string) uint64 {
	const m = 0x9e3779b97f4a7c15
	h := uint64(len(s)) * m
	i := 0
	for ; i+8 <= len(s); i += 8 {
		h = bits.RotateLeft64((h^le64(s, i))*m, 31)
	}
	if i < len(s) {
		h = (h ^ tail(s, i)) * m
	}
	return h ^ h>>29
}

// A stringSet answers membership for a fixed list of strings, by open
// addressing on hash with equal.
type stringSet struct {
	list  []string
	slots []int32 // 1 + index into list; 0 for an empty slot
	mask  uint64
}

// smallSet is the list length up to which a linear search is used.
const smallSet = 8

func newStringSet(list []string) stringSet {
	s := stringSet{list: list}
	if len(list) <= smallSet {
		return s
	}
	n := 1 << bits.Len(uint(2*len(list)-1)) // a power of two >= 2*len(list)
	s.slots = make([]int32, n)
	s.mask = uint64(n - 1)
	for i, v := range list {
		j := hash(v) & s.mask
		for s.slots[j] != 0 {
			j = (j + 1) & s.mask
		}
		s.slots[j] = int32(i + 1)
	}
	return s
}

func (s *stringSet) has(v string) bool {
	if s.slots == nil {
		for _, w := range s.list {
			if equal(v, w) {
				return true
			}
		}
		return false
	}
	for j := hash(v) & s.mask; s.slots[j] != 0; j = (j + 1) & s.mask {
		if equal(v, s.list[s.slots[j]-1]) {
			return true
		}
	}
	return false
}

// appendIndex appends the decimal form of a non-negative i, without a
// loop for the indexes a request can hold.
func appendIndex(dst []byte, i int) []byte {
	switch {
	case i < 10:
		return append(dst, byte('0'+i))
	case i < 100:
		return append(dst, byte('0'+i/10), byte('0'+i%10))
	case i < 1000:
		return append(dst, byte('0'+i/100), byte('0'+i/10%10), byte('0'+i%10))
	case i < 10000:
		return append(dst, byte('0'+i/1000), byte('0'+i/100%10), byte('0'+i/10%10), byte('0'+i%10))
	}
	return strconv.AppendInt(dst, int64(i), 10)
}
