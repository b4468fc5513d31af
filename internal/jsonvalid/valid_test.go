package jsonvalid

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidJSONAgreesWithEncodingJSON(t *testing.T) {
	nest := func(n int, open, close, inner string) string {
		return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
	}
	inputs := []string{
		// encoding/json allows 10000 levels of nesting, not one more.
		nest(maxDepth, "[", "]", ""),
		nest(maxDepth+1, "[", "]", ""),
		`{"x":` + nest(maxDepth-1, `{"a":`, "}", "1") + "}",
		`{"x":` + nest(maxDepth, `{"a":`, "}", "1") + "}",
		nest(100, "[", "]", `"deep"`),
		nest(100, "[", "]", `"deep"`) + "]",
		`{"a":"b\u12"}`, `{"a":"b\u12G4"}`, `{"a":"b\u12aF"}`, `"\`, `"\u"`, `"\u123`,
		`-`, `-a`, `1e5`, `1E+05`, `0.0`, `00`, `-01`, `1.e3`,
		"\xff", "\"\xff\xfe\"", "{\"\xc3\":\"\xed\xa0\x80\"}",
	}
	for _, in := range inputs {
		assert.Equal(t, json.Valid([]byte(in)), String(in), "input %.60q", in)
	}
}

func TestValueEnd(t *testing.T) {
	for _, tc := range []struct {
		in   string
		i    int
		want int
	}{
		{`{"a":1},"key":"x"`, 0, 7},
		{`[1, [2]] x`, 0, 8},
		{`x:12,`, 2, 4},
		{`"a\"b"}`, 0, 6},
		{`true}`, 0, 4},
		{` 1`, 0, -1}, // white space is not a value
		{`{"a":}`, 0, -1},
		{`[1,2`, 0, -1},
		{`{}`, 2, -1},
	} {
		assert.Equal(t, tc.want, ValueEnd([]byte(tc.in), tc.i), "ValueEnd(%q, %d)", tc.in, tc.i)
	}
}

func TestBytesAgreesWithString(t *testing.T) {
	for _, in := range []string{`{}`, `{"a":[1,"b"]}`, `{"a"`, ``, ` `} {
		assert.Equal(t, String(in), Bytes([]byte(in)), "input %q", in)
	}
	assert.False(t, Bytes(nil))
}

func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{
		`0`, `-0`, `-`, `01`, `1.`, `1.5`, `.5`, `1e`, `1e+`, `1E-7`, `-1.5e+30`, `2a`, `truex`, `nul`,
		`"\u00zz"`, `"\u00e9"`, `"\q"`, "\"\x1f\"", "\"\x7f\"", `"\"`, `[1,]`, `[,1]`, `{"a" 1}`, `{"a":1,}`,
		`{,}`, `{1:2}`, `[]]`, `[[]`, `{"a":[}]`, " \t\r\n[ ] ", "\v[]", `[] x`, `"a"  "b"`,
		`{"trust":true,"includeTools":["read_file(path)","list_dir"],"x":{"y":[1,2.5e3,null]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		require.Equal(t, json.Valid(raw), String(string(raw)), "input %q", raw)
		// ValueEnd from the first byte that is not white space: what it
		// spans is valid, and it spans the whole of a valid document.
		start := len(raw) - len(bytes.TrimLeft(raw, " \t\r\n"))
		end := ValueEnd(raw, start)
		if end >= 0 {
			require.True(t, json.Valid(raw[start:end]), "ValueEnd(%q, %d) = %d", raw, start, end)
		}
		if json.Valid(raw) {
			require.Equal(t, len(bytes.TrimRight(raw, " \t\r\n")), end, "ValueEnd(%q, %d)", raw, start)
		}
	})
}

// BenchmarkValid checks a thousand settings objects as the host does before
// a canonicalize call, with String and with encoding/json's Valid.
func BenchmarkValid(b *testing.B) {
	docs := make([][]byte, 1000)
	for i := range docs {
		docs[i] = []byte(`{"trust":true,"includeTools":["read_file(path)","list_dir","search_` +
			strings.Repeat("x", i%17) + `"],"excludeTools":["delete_file"],"alwaysLoadTools":false}`)
	}
	for _, v := range []struct {
		name  string
		valid func([]byte) bool
	}{{"jsonvalid", Bytes}, {"encoding-json", json.Valid}} {
		b.Run(v.name, func(b *testing.B) {
			for b.Loop() {
				for _, d := range docs {
					if !v.valid(d) {
						b.Fatal("invalid")
					}
				}
			}
		})
	}
}
