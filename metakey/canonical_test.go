package metakey

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const defaultKey = `{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}`

func mustParse(t testing.TB, raw string) Settings {
	t.Helper()
	s, err := ParseSettings([]byte(raw))
	require.NoError(t, err, "ParseSettings(%s)", raw)
	return s
}

func TestCanonicalRules(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want string // the exact key bytes
	}{
		{"nothing set", `{}`, defaultKey},
		{"other keys only", `{"command":"x","args":[]}`, defaultKey},
		{"all null", `{"trust":null,"alwaysLoadTools":null,"includeTools":null,"excludeTools":null}`, defaultKey},

		{"trust true", `{"trust":true}`, `{"trust":true,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}`},
		{"trust false", `{"trust":false}`, `{"trust":false,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}`},
		{"trust null", `{"trust":null}`, defaultKey},

		{"alwaysLoadTools true", `{"alwaysLoadTools":true}`, `{"trust":null,"alwaysLoadTools":true,"includeTools":null,"excludeTools":[]}`},
		{"alwaysLoadTools false", `{"alwaysLoadTools":false}`, defaultKey},
		{"alwaysLoadTools null", `{"alwaysLoadTools":null}`, defaultKey},

		{"includeTools null", `{"includeTools":null}`, defaultKey},
		{"includeTools empty stays empty", `{"includeTools":[]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":[],"excludeTools":[]}`},
		{"includeTools sorted", `{"includeTools":["b","c","a"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":["a","b","c"],"excludeTools":[]}`},
		{"includeTools deduplicated", `{"includeTools":["a","b","a","a"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":["a","b"],"excludeTools":[]}`},
		{"includeTools cut at (", `{"includeTools":["foo(args)"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":["foo"],"excludeTools":[]}`},
		{"includeTools (x) is empty", `{"includeTools":["(x)"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":[""],"excludeTools":[]}`},
		{"includeTools cut at first (", `{"includeTools":["foo(a)(b)"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":["foo"],"excludeTools":[]}`},
		{"includeTools open paren alone", `{"includeTools":["foo("]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":["foo"],"excludeTools":[]}`},
		{"includeTools close paren kept", `{"includeTools":["foo)"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":["foo)"],"excludeTools":[]}`},
		{"includeTools cut then deduplicated", `{"includeTools":["foo(x)","foo","foo(y)","bar"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":["bar","foo"],"excludeTools":[]}`},
		{"includeTools cut keeps space", `{"includeTools":[" foo (x)"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":[" foo "],"excludeTools":[]}`},
		{"includeTools escaped paren cut", `{"includeTools":["foo\u0028x)"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":["foo"],"excludeTools":[]}`},

		{"excludeTools null", `{"excludeTools":null}`, defaultKey},
		{"excludeTools empty", `{"excludeTools":[]}`, defaultKey},
		{"excludeTools sorted and deduplicated", `{"excludeTools":["b","a","b"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":["a","b"]}`},
		{"excludeTools never cut", `{"excludeTools":["foo(args)","(x)"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":["(x)","foo(args)"]}`},

		{"sorted by bytes", `{"excludeTools":["b","a","_","Z","0","é","z","A"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":["0","A","Z","_","a","b","z","é"]}`},
		{"case and space kept", `{"includeTools":["Read"," read","read ","read"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":[" read","Read","read","read "],"excludeTools":[]}`},
		{"exclude not subtracted from include", `{"includeTools":["a","b"],"excludeTools":["b"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":["a","b"],"excludeTools":["b"]}`},
		{
			"all four",
			`{"excludeTools":["z","y"],"includeTools":["q(1)","p"],"alwaysLoadTools":true,"trust":false}`,
			`{"trust":false,"alwaysLoadTools":true,"includeTools":["p","q"],"excludeTools":["y","z"]}`,
		},
		{"HTML escaped", `{"excludeTools":["<b>&"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":["\u003cb\u003e\u0026"]}`},
		{"quotes and controls escaped", `{"excludeTools":["a\"b\\c\nd\u0001"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":["a\"b\\c\nd\u0001"]}`},
		{"line separators escaped", `{"excludeTools":["\u2028\u2029"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":["\u2028\u2029"]}`},
		{"UTF-8 written raw", `{"excludeTools":["\u00e9"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":["é"]}`},
		{"lone surrogate", `{"excludeTools":["\ud800"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":["�"]}`},
		{"slash not escaped", `{"excludeTools":["a\/b"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":["a/b"]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, tt.raw).Canonical()
			got, err := c.MarshalJSON()
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(got))
			assert.Equal(t, tt.want, c.Key())
			// encoding/json accepts the bytes and, re-encoding through
			// MarshalJSON, changes nothing.
			viaJSON, err := json.Marshal(c)
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(viaJSON))
		})
	}
}

func TestCanonicalShape(t *testing.T) {
	tru, fls := true, false
	tests := []struct {
		raw  string
		want Canonical
	}{
		{`{}`, Canonical{ExcludeTools: []string{}}},
		{`{"trust":true}`, Canonical{Trust: &tru, ExcludeTools: []string{}}},
		{`{"trust":false}`, Canonical{Trust: &fls, ExcludeTools: []string{}}},
		{`{"includeTools":[]}`, Canonical{IncludeTools: []string{}, ExcludeTools: []string{}}},
		{`{"includeTools":["b(1)","a"],"excludeTools":["c","c"],"alwaysLoadTools":true}`, Canonical{AlwaysLoadTools: true, IncludeTools: []string{"a", "b"}, ExcludeTools: []string{"c"}}},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			got := mustParse(t, tt.raw).Canonical()
			// cmp.Diff tells a nil slice from an empty one: null from [].
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Canonical mismatch (-want +got):\n%s", diff)
			}
			assert.NotNil(t, got.ExcludeTools)
		})
	}
}

func TestCanonicalLeavesSettingsAlone(t *testing.T) {
	s := mustParse(t, `{"includeTools":["b(x)","a","b"],"excludeTools":["z","y","z"]}`)
	before := Settings{
		IncludeTools: list("b(x)", "a", "b"),
		ExcludeTools: list("z", "y", "z"),
	}
	require.Equal(t, before, s)
	c := s.Canonical()
	assert.Equal(t, before, s)
	assert.Equal(t, []string{"a", "b"}, c.IncludeTools)
	assert.Equal(t, []string{"y", "z"}, c.ExcludeTools)

	// Each canonical form owns its trust value.
	s = mustParse(t, `{"trust":true}`)
	c1, c2 := s.Canonical(), s.Canonical()
	*c1.Trust = false
	assert.True(t, *c2.Trust)
}

func TestCanonicalHandBuilt(t *testing.T) {
	// A nil ExcludeTools is still written as [] so the key stays in the
	// canonical shape.
	assert.Equal(t, defaultKey, Canonical{}.Key())
	// Settings with Values but no Presence carry no setting.
	s := Settings{
		Trust:           Bool{Value: true},
		AlwaysLoadTools: Bool{Presence: Null, Value: true},
		IncludeTools:    Strings{Presence: Null, Values: []string{"a"}},
		ExcludeTools:    Strings{Presence: Missing, Values: []string{"a"}},
	}
	assert.Equal(t, defaultKey, s.Canonical().Key())
}

// canonicalOracle has the field order and encoding of the canonical JSON; its
// encoding/json output is what MarshalJSON must reproduce byte for byte.
type canonicalOracle struct {
	Trust           *bool    `json:"trust"`
	AlwaysLoadTools bool     `json:"alwaysLoadTools"`
	IncludeTools    []string `json:"includeTools"`
	ExcludeTools    []string `json:"excludeTools"`
}

func oracleJSON(t testing.TB, c Canonical) string {
	t.Helper()
	b, err := json.Marshal(canonicalOracle(c))
	require.NoError(t, err)
	return string(b)
}

func TestMarshalJSONMatchesEncodingJSON(t *testing.T) {
	awkward := []string{
		"", "plain", "with space", `"quoted"`, `back\slash`, "<script>", "a&b", "x>y",
		"\x00\x01\x07\x08\x09\x0a\x0b\x0c\x0d\x1f", "\x7f", "é", "日本語", "😀",
		"\u2028", "\u2029", "\ufffd", "a\xffb", "\xed\xa0\x80", "\xc3", "\xf4\x90\x80\x80",
		strings.Repeat("long", 100),
	}
	tru := true
	for _, s := range awkward {
		c := Canonical{Trust: &tru, IncludeTools: []string{s}, ExcludeTools: []string{s, s + "!"}}
		got, err := c.MarshalJSON()
		require.NoError(t, err)
		assert.Equal(t, oracleJSON(t, c), string(got), "string %q", s)
	}
}

func TestVisible(t *testing.T) {
	tests := []struct {
		raw     string
		visible []string
		hidden  []string
	}{
		{`{}`, []string{"a", "A", " a", "anything(x)"}, []string{""}},
		{`{"includeTools":null}`, []string{"a"}, []string{""}},
		{`{"includeTools":[]}`, nil, []string{"a", "", "b"}},
		{`{"includeTools":["a","c"]}`, []string{"a", "c"}, []string{"b", "A", "a ", " a", "", "ab"}},
		{`{"includeTools":["read(path)"]}`, []string{"read"}, []string{"read(path)", "read("}},
		{`{"includeTools":["(x)"]}`, nil, []string{"", "x", "(x)"}},
		{`{"excludeTools":["b"]}`, []string{"a", "B", "bb"}, []string{"b", ""}},
		{`{"excludeTools":["b(x)"]}`, []string{"b"}, []string{"b(x)"}},
		{`{"includeTools":["a","b"],"excludeTools":["b"]}`, []string{"a"}, []string{"b", "c"}},
		{`{"includeTools":["a(x)"],"excludeTools":["a"]}`, nil, []string{"a"}},
		{`{"includeTools":["a"],"excludeTools":["a(x)"]}`, []string{"a"}, []string{"a(x)"}},
		{`{"includeTools":["é"]}`, []string{"é"}, []string{"e\u0301", "É"}},
		{`{"includeTools":["read_*"]}`, []string{"read_*"}, []string{"read_file"}},
		{`{"includeTools":["mcp__fs__read"]}`, []string{"mcp__fs__read"}, []string{"read"}},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			c := mustParse(t, tt.raw).Canonical()
			for _, name := range tt.visible {
				assert.True(t, c.Visible(name), "%q should be visible", name)
			}
			for _, name := range tt.hidden {
				assert.False(t, c.Visible(name), "%q should be hidden", name)
			}
		})
	}
}
