package policy

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wordStrings returns strings of every length up to 40 over a small
// alphabet, so that pairs share long prefixes and differ in every position,
// with bytes 0x00, '(' and 0xff among them.
func wordStrings(rng *rand.Rand, n int) []string {
	const alphabet = "ab(\x00\xff"
	out := []string{""}
	for range n {
		b := make([]byte, rng.Intn(41))
		for i := range b {
			b[i] = alphabet[rng.Intn(len(alphabet))]
		}
		out = append(out, string(b))
		if len(b) > 0 && rng.Intn(2) == 0 {
			// A near twin: one byte changed, or one byte shorter.
			c := slices.Clone(b)
			if rng.Intn(2) == 0 {
				c[rng.Intn(len(c))] = alphabet[rng.Intn(len(alphabet))]
			} else {
				c = c[:len(c)-1]
			}
			out = append(out, string(c))
		}
	}
	return out
}

func TestWordPrimitivesMatchTheStandardLibrary(t *testing.T) {
	rng := rand.New(rand.NewSource(21))
	strs := wordStrings(rng, 400)
	// Compared plainly, not with require: the inner loop runs 160,000
	// times. The first mismatch fails the test.
	for _, a := range strs {
		if want, got := strings.IndexByte(a, '('), indexParen(a); got != want {
			t.Fatalf("indexParen(%q) = %d, want %d", a, got, want)
		}
		for _, b := range strs {
			if want, got := a == b, equal(a, b); got != want {
				t.Fatalf("equal(%q, %q) = %v, want %v", a, b, got, want)
			}
			if want, got := strings.Compare(a, b), compare(a, b); got != want {
				t.Fatalf("compare(%q, %q) = %d, want %d", a, b, got, want)
			}
			if a == b && hash(a) != hash(b) {
				t.Fatalf("hash(%q) differs from hash of an equal string", a)
			}
		}
	}
}

func TestWords(t *testing.T) {
	const s = "0123456789abcdef"
	word := func(b string) uint64 {
		var x uint64
		for k := range len(b) {
			x |= uint64(b[k]) << (8 * k)
		}
		return x
	}
	for i := range 9 {
		assert.Equal(t, word(s[i:i+8]), le64(s, i), "le64 at %d", i)
		assert.Equal(t, word(s[i:i+8]), le64([]byte(s), i), "le64 at %d", i)
	}
	for n := range 8 {
		assert.Equal(t, word(s[:n]), short(s[:n]), "short %d", n)
		assert.Equal(t, word(s[:n]), short([]byte(s[:n])), "short %d", n)
	}
	for l := range len(s) + 1 {
		for i := 0; i < l; i += 8 {
			if l-i < 8 {
				assert.Equal(t, word(s[i:l]), tail(s[:l], i), "tail of %d at %d", l, i)
			}
		}
	}
	for _, v := range []string{"", "a", "abcdefgh", "abcdefghi", "zz"} {
		var b [8]byte
		copy(b[:], v)
		assert.Equal(t, binary.BigEndian.Uint64(b[:]), prefixWord(v), v)
	}
}

func TestStringSet(t *testing.T) {
	rng := rand.New(rand.NewSource(22))
	for _, size := range []int{0, 1, smallSet, smallSet + 1, 100, 1000} {
		var list []string
		for i := range size {
			list = append(list, fmt.Sprintf("tool_%04d", i*2))
		}
		list = append(list, list...) // duplicates are harmless
		set := newStringSet(list)
		for i := range 2*size + 2 {
			name := fmt.Sprintf("tool_%04d", i)
			assert.Equal(t, i%2 == 0 && i < 2*size, set.has(name), "size %d: %s", size, name)
		}
		assert.False(t, set.has(""))
	}
	strs := wordStrings(rng, 300)
	set := newStringSet(strs[:150])
	for i, s := range strs {
		assert.Equal(t, i < 150 || slices.Contains(strs[:150], s), set.has(s), "%q", s)
	}
}

func TestAppendIndex(t *testing.T) {
	for _, i := range []int{0, 1, 9, 10, 99, 100, 999, 1000, 9999, 10000, 12345, 1 << 40} {
		assert.Equal(t, "x"+strconv.Itoa(i), string(appendIndex([]byte("x"), i)))
	}
}

func TestSettingKey(t *testing.T) {
	for key, want := range map[string]uint8{
		"trust": seenTrust, "alwaysLoadTools": seenAlwaysLoad, "includeTools": seenInclude, "excludeTools": seenExclude,
		"Trust": 0, "trusT": 0, "trus": 0, "trust ": 0, "includeTool": 0, "includeToolz": 0, "xncludeTools": 0,
		"alwaysLoadToolz": 0, "alwaysLoadTool": 0, "": 0, "command": 0, "\x00\x00\x00\x00\x00": 0,
	} {
		bit, name := settingKey([]byte(key))
		assert.Equal(t, want, bit, "%q", key)
		if want != 0 {
			assert.Equal(t, key, name)
		}
	}
}

func TestParenIn(t *testing.T) {
	rng := rand.New(rand.NewSource(23))
	for range 3000 {
		b := make([]byte, rng.Intn(30))
		for i := range b {
			b[i] = "ab(\x00"[rng.Intn(4)]
		}
		start := rng.Intn(len(b) + 1)
		end := start + rng.Intn(len(b)-start+1)
		want := end
		if k := strings.IndexByte(string(b[start:end]), '('); k >= 0 {
			want = start + k
		}
		require.Equal(t, want, parenIn(b, start, end), "%q [%d:%d]", b, start, end)
	}
}
