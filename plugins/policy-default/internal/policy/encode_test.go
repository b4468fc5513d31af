package policy

import (
	"encoding/json"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// encodeCorpus holds Go strings whose JSON encoding takes every path of
// appendString.
var encodeCorpus = []string{
	"", "a", "read_file", "plain ASCII with spaces ~!@#$%^*()_+{}|:?/", "0123456789abcdefghijklmnop",
	`"`, `\`, `a"b\c`, `""""""""""`, `\\\\\\\\\\`,
	"<", ">", "&", "a<b>c&d", "\u2028", "\u2029", "\x00", "\x1f", "\n\r\t\b\f", "\x7f",
	"é", "日本語", "😀", "\xff", "a\xc3", "\xed\xa0\x80", "\ufffd", "mixed \"é\" <x>\n",
}

func randomString(rng *rand.Rand) string {
	pieces := []string{"a", "Z", "_", "(", ")", " ", `"`, `\`, "<", ">", "&", "\x00", "\n", "\x7f", "é", "\u2028", "😀", "\xff", "\xc3", "\xed\xa0\x80", "tool"}
	n := rng.Intn(12)
	b := make([]byte, 0, 4*n)
	for range n {
		if rng.Intn(3) == 0 {
			b = append(b, byte(rng.Intn(256)))
		} else {
			b = append(b, pieces[rng.Intn(len(pieces))]...)
		}
	}
	return string(b)
}

func TestAppendStringMatchesMarshal(t *testing.T) {
	check := func(s string) {
		want, err := json.Marshal(s)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(appendString([]byte("x"), s))[1:], "%q", s)
	}
	for _, s := range encodeCorpus {
		check(s)
	}
	rng := rand.New(rand.NewSource(3))
	for range 20000 {
		check(randomString(rng))
	}
}

func TestAppendEscapedMatchesMarshalOnCanonicalJSON(t *testing.T) {
	// appendEscaped is only used on canonical JSON, which appendString
	// wrote; check it there, on strings with every kind of content.
	rng := rand.New(rand.NewSource(4))
	for range 5000 {
		var b []byte
		for range rng.Intn(4) {
			b = appendString(b, randomString(rng))
		}
		want, err := json.Marshal(string(b))
		require.NoError(t, err)
		assert.Equal(t, string(want), string(appendEscaped(nil, b)), "%q", b)
	}
}

func TestCanonJSON(t *testing.T) {
	tests := []struct {
		name string
		c    canon
		want string
	}{
		{"default", canon{}, `{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}`},
		{"trust false", canon{trust: trustFalse}, `{"trust":false,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}`},
		{
			"everything",
			canon{trust: trustTrue, always: true, hasInclude: true, include: []string{"a", "b"}, exclude: []string{"c"}},
			`{"trust":true,"alwaysLoadTools":true,"includeTools":["a","b"],"excludeTools":["c"]}`,
		},
		{"include none", canon{hasInclude: true}, `{"trust":null,"alwaysLoadTools":false,"includeTools":[],"excludeTools":[]}`},
		{
			"escaped strings",
			canon{hasInclude: true, include: []string{`a"b`, "<x>"}, exclude: []string{"é\n", "\xff"}},
			`{"trust":null,"alwaysLoadTools":false,"includeTools":["a\"b","\u003cx\u003e"],"excludeTools":["é\n","\ufffd"]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.c.appendJSON(nil)
			assert.Equal(t, tt.want, string(got))
			assert.True(t, json.Valid(got))
		})
	}
}
