package policy

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/rand"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The eight-bytes-at-a-time tests must agree with the byte tables for every
// byte value in every position, and on random words.
func TestWordTestsMatchByteTables(t *testing.T) {
	check := func(t *testing.T, x uint64) {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], x)
		wantPlain, wantSafe := true, true
		for _, c := range b {
			wantPlain = wantPlain && plainByte[c]
			wantSafe = wantSafe && safeByte[c]
		}
		// Compared plainly, not with require: this runs 400,000 times.
		if got := notPlain8(x) == 0; got != wantPlain {
			t.Fatalf("notPlain8(%#016x) == 0 is %v, want %v", x, got, wantPlain)
		}
		if got := notSafe8(x) == 0; got != wantSafe {
			t.Fatalf("notSafe8(%#016x) == 0 is %v, want %v", x, got, wantSafe)
		}
	}
	const fill = 0x6161616161616161 // "aaaaaaaa"
	for pos := range 8 {
		for c := range 256 {
			x := uint64(fill)&^(0xff<<(8*pos)) | uint64(c)<<(8*pos)
			check(t, x)
		}
	}
	rng := rand.New(rand.NewSource(1))
	for range 200000 {
		x := rng.Uint64()
		check(t, x)
		// Mostly printable words, where a single bad byte is what matters.
		var b [8]byte
		for i := range b {
			b[i] = byte(0x20 + rng.Intn(0x5f))
			if rng.Intn(16) == 0 {
				b[i] = byte(rng.Intn(256))
			}
		}
		check(t, binary.LittleEndian.Uint64(b[:]))
	}
}

func TestPlainString(t *testing.T) {
	check := func(b []byte, from int) {
		t.Helper()
		// The reference: a byte loop over the string starting at b[from].
		want, wantHTML := -1, false
		for i := from + 1; i < len(b); i++ {
			if b[i] == '"' {
				want = i + 1
				break
			}
			if !plainByte[b[i]] {
				break
			}
			wantHTML = wantHTML || !safeByte[b[i]]
		}
		end, html := plainString(b, from)
		require.Equal(t, want, end, "%q from %d", b, from)
		if want >= 0 {
			require.Equal(t, wantHTML, html, "%q from %d", b, from)
		}
	}
	for _, s := range []string{`""`, `"a"`, `"abcdefg"`, `"abcdefgh"`, `"abcdefghijklmnopq"`, `"abcdefghijklmnop\"`, "\"abcdefghij\x7f\"", "\"abcdefghijk\xc3\xa9\"", "\"\x1f\"", `"<"`, `"abcdefgh<"`, `"a<"&`, `"abcdefg"<`, `"abc`} {
		check([]byte(s), 0)
	}
	// Random buffers with a rare bad byte, tested from every offset, so
	// that quotes, bad bytes and HTML bytes fall in every word position.
	rng := rand.New(rand.NewSource(5))
	for range 3000 {
		b := make([]byte, rng.Intn(40))
		for i := range b {
			b[i] = byte(0x20 + rng.Intn(0x5f))
			switch rng.Intn(12) {
			case 0:
				b[i] = byte(rng.Intn(256))
			case 1:
				b[i] = "<>&\"\\"[rng.Intn(5)]
			case 2:
				b[i] = '"'
			}
		}
		for from := range len(b) {
			check(b, from)
		}
	}
}

func TestSafe(t *testing.T) {
	for _, s := range append(encodeCorpus, "abcdefghijklmnop", "abcdefghijklmnop<", "abcdefgh\x00ijk") {
		want := true
		for i := 0; i < len(s); i++ {
			want = want && safeByte[s[i]]
		}
		assert.Equal(t, want, safe(s), "%q", s)
	}
}

// stringCorpus holds JSON string literals, each with escapes, non-ASCII
// text or invalid UTF-8 of some kind.
var stringCorpus = []string{
	`""`, `"a"`, `"plain ASCII with spaces ~!@#$%^*()_+{}|:?"`,
	`"\""`, `"\\"`, `"\/"`, `"\b\f\n\r\t"`, `"\u0000"`, `"\u001f"`,
	`"\u0041\u00e9\u4e2d"`, `"\uD83D\uDE00"`, `"\ud83d\ude00"`,
	`"\ud800"`, `"\udc00"`, `"a\ud800b"`, `"\ud800\u0041"`, `"\ud800\ud800"`,
	`"\u2028\u2029"`, "\"\u2028\"", `"<>&"`, `"\u003c"`,
	"\"é日本😀\"", "\"\xff\"", "\"a\xc3\"", "\"\xc3\x28\"", "\"\xed\xa0\x80\"",
	"\"\xf4\x90\x80\x80\"", "\"\x7f\"",
}

// malformedStrings are string literals encoding/json refuses.
var malformedStrings = []string{
	`"`, `"abc`, `"\`, `"\x"`, `"\u12"`, `"\u12G4"`, `"\u"`, "\"\n\"", "\"a\x00\"", "\"\x1f\"", `"\'"`, "\"tab\there\"",
}

func TestStrDecodesLikeEncodingJSON(t *testing.T) {
	for _, lit := range stringCorpus {
		var want string
		require.NoError(t, json.Unmarshal([]byte(lit), &want), "%q", lit)
		for _, alias := range []bool{false, true} {
			s := scanner{buf: []byte(lit), alias: alias}
			got, isSafe, err := s.str()
			require.NoError(t, err, "%q", lit)
			assert.Equal(t, want, got, "%q", lit)
			if isSafe {
				assert.True(t, safe(got), "%q said safe", lit)
			}
			if !strings.Contains(lit, `\`) {
				assert.Equal(t, safe(got), isSafe, "%q", lit)
			}
			assert.Equal(t, len(lit), s.pos, "%q", lit)
		}
	}
	for _, lit := range malformedStrings {
		var v string
		require.Error(t, json.Unmarshal([]byte(lit), &v), "%q", lit)
		s := scanner{buf: []byte(lit)}
		_, _, err := s.str()
		var se *SyntaxError
		assert.True(t, errors.As(err, &se), "%q: got %v", lit, err)
	}
}

func TestStrAliasOnlyWhenAllowed(t *testing.T) {
	buf := []byte(`"name"`)
	s := scanner{buf: buf}
	v, _, err := s.str()
	require.NoError(t, err)
	buf[1] = 'X'
	assert.Equal(t, "name", v, "without alias the value must be a copy")

	buf = []byte(`"name"`)
	s = scanner{buf: buf, alias: true}
	v, _, err = s.str()
	require.NoError(t, err)
	assert.Equal(t, "name", v)
	assert.Same(t, &buf[1], unsafe.StringData(v), "with alias the value shares buf")
}

// validCorpus holds JSON documents of every shape.
var validCorpus = []string{
	`null`, `true`, `false`, `0`, `-0`, `1`, `-1`, `12.5`, `1e3`, `1E+3`, `1e-3`, `-0.0e0`, `123456789012345678901234567890`,
	`""`, `"x"`, `[]`, `{}`, `[ ]`, `{ }`, ` [1, "a", null, true, false, {}, [], {"a":[{"b":{}}]}] `,
	`{"a":1,"b":[1,2,{"c":null}],"a":2}`, "\t\n\r {\"k\" : \"v\" }\n",
	`[[[[[[[[[[]]]]]]]]]]`, `{"":""}`, `{"\u0000":"\ud800"}`,
}

// invalidCorpus holds documents encoding/json refuses.
var invalidCorpus = []string{
	``, ` `, `nul`, `nulll`, `tru`, `True`, `fals`, `NaN`, `Infinity`, `+1`, `01`, `-`, `1.`, `.5`, `1e`, `1e+`, `0x10`,
	`[`, `]`, `{`, `}`, `[1,]`, `[,1]`, `[1 2]`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{,}`, `{a:1}`, `{'a':1}`,
	`{"a":1 "b":2}`, `{"a"::1}`, `[1]]`, `{}}`, `[1] [2]`, `{} x`, `"a" "b"`, `[}`, `{]`, "[1,\x00]", "\x00",
	`{"a":[1,2}`, `{"a":{"b":1]}`, `[tru]`, `[nulll]`, `["\x"]`, "[\"a\nb\"]", `/* c */ 1`, `1 // c`,
}

func TestSkipValueAgreesWithValid(t *testing.T) {
	check := func(t *testing.T, doc string) {
		t.Helper()
		s := scanner{buf: []byte(doc)}
		err := s.skipValue(0)
		if err == nil {
			err = s.end()
		}
		if json.Valid([]byte(doc)) {
			assert.NoError(t, err, "%q", doc)
		} else {
			var se *SyntaxError
			assert.True(t, errors.As(err, &se), "%q: want a *SyntaxError, got %v", doc, err)
		}
	}
	for _, doc := range validCorpus {
		require.True(t, json.Valid([]byte(doc)), doc)
		check(t, doc)
	}
	for _, doc := range invalidCorpus {
		require.False(t, json.Valid([]byte(doc)), doc)
		check(t, doc)
	}
	for _, lit := range append(stringCorpus, malformedStrings...) {
		check(t, lit)
		check(t, "["+lit+"]")
		check(t, "{"+lit+":"+lit+"}")
	}
	// Every prefix and many single-byte mutations of valid documents.
	rng := rand.New(rand.NewSource(2))
	const alphabet = "{}[],:\"\\ntrue0-.eE \x00\xff"
	for _, doc := range validCorpus {
		for i := range len(doc) {
			check(t, doc[:i])
		}
		for range 200 {
			b := []byte(doc)
			i := rng.Intn(len(b) + 1)
			c := alphabet[rng.Intn(len(alphabet))]
			switch rng.Intn(3) {
			case 0:
				b = append(b[:i:i], append([]byte{c}, b[i:]...)...)
			case 1:
				if i < len(b) {
					b[i] = c
				}
			default:
				if i < len(b) {
					b = append(b[:i:i], b[i+1:]...)
				}
			}
			check(t, string(b))
		}
	}
}

func TestSkipValueDepth(t *testing.T) {
	nest := map[string][3]string{
		"arrays":  {"[", "", "]"},
		"objects": {`{"a":`, "0", "}"},
	}
	for _, depth := range []int{1, 100, maxDepth - 1, maxDepth, maxDepth + 1, 100000} {
		for name, n := range nest {
			doc := strings.Repeat(n[0], depth) + n[1] + strings.Repeat(n[2], depth)
			s := scanner{buf: []byte(doc)}
			err := s.skipValue(0)
			assert.Equal(t, json.Valid([]byte(doc)), err == nil, "%s depth %d: %v", name, depth, err)
			assert.Equal(t, depth <= maxDepth, err == nil, "%s depth %d: %v", name, depth, err)
		}
	}
}

func TestSyntaxErrorNamesOffset(t *testing.T) {
	s := scanner{buf: []byte(`[1, x]`)}
	err := s.skipValue(0)
	var se *SyntaxError
	require.True(t, errors.As(err, &se))
	assert.Equal(t, 4, se.Offset)
	assert.Equal(t, `malformed JSON at byte 4: unexpected 'x', expected a value`, err.Error())

	s = scanner{buf: []byte("[\x01")}
	err = s.skipValue(0)
	assert.EqualError(t, err, `malformed JSON at byte 1: unexpected byte 0x01, expected a value`)

	s = scanner{buf: []byte(`[1`)}
	err = s.skipValue(0)
	assert.EqualError(t, err, `malformed JSON at byte 2: unexpected end of input, expected ',' or ']'`)
}

// FuzzSkipValue checks that the scanner accepts exactly what
// encoding/json accepts, and never panics.
func FuzzSkipValue(f *testing.F) {
	for _, doc := range append(append(validCorpus, invalidCorpus...), stringCorpus...) {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		s := scanner{buf: doc}
		err := s.skipValue(0)
		if err == nil {
			err = s.end()
		}
		if json.Valid(doc) != (err == nil) {
			t.Fatalf("json.Valid %v, scanner error %v, for %q", json.Valid(doc), err, doc)
		}
	})
}
