package metakey

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func present(v bool) Bool { return Bool{Presence: Present, Value: v} }

func list(v ...string) Strings { return Strings{Presence: Present, Values: v} }

func TestParseSettingsAccepts(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want Settings
	}{
		{"empty object", `{}`, Settings{}},
		{"empty object with space", " \t\r\n{ \n } \n", Settings{}},
		{"trust true", `{"trust":true}`, Settings{Trust: present(true)}},
		{"trust false", `{"trust":false}`, Settings{Trust: present(false)}},
		{"trust null", `{"trust":null}`, Settings{Trust: Bool{Presence: Null}}},
		{"alwaysLoadTools true", `{"alwaysLoadTools":true}`, Settings{AlwaysLoadTools: present(true)}},
		{"alwaysLoadTools false", `{"alwaysLoadTools":false}`, Settings{AlwaysLoadTools: present(false)}},
		{"alwaysLoadTools null", `{"alwaysLoadTools":null}`, Settings{AlwaysLoadTools: Bool{Presence: Null}}},
		{"includeTools null", `{"includeTools":null}`, Settings{IncludeTools: Strings{Presence: Null}}},
		{"includeTools empty", `{"includeTools":[]}`, Settings{IncludeTools: list()}},
		{"includeTools empty with space", `{"includeTools":[ ]}`, Settings{IncludeTools: list()}},
		{"includeTools kept as written", `{"includeTools":["b","a(x)","b"," c "]}`, Settings{IncludeTools: list("b", "a(x)", "b", " c ")}},
		{"excludeTools null", `{"excludeTools":null}`, Settings{ExcludeTools: Strings{Presence: Null}}},
		{"excludeTools empty", `{"excludeTools":[]}`, Settings{ExcludeTools: list()}},
		{"excludeTools kept as written", `{"excludeTools":["z","a(x)"]}`, Settings{ExcludeTools: list("z", "a(x)")}},
		{
			"all four with space",
			"{ \"excludeTools\" : [ \"e\" , \"f\" ] ,\n\"includeTools\":[\"i\"],\t\"alwaysLoadTools\" : true , \"trust\" : false }",
			Settings{Trust: present(false), AlwaysLoadTools: present(true), IncludeTools: list("i"), ExcludeTools: list("e", "f")},
		},
		{
			"other keys ignored whatever their values",
			`{"command":"npx","args":["-y",1,{"x":[true,null]}],"env":{"A":"}]\"["},"timeout":1.5e3,"n":null,"trust":true}`,
			Settings{Trust: present(true)},
		},
		{"keys are case-sensitive", `{"Trust":"yes","INCLUDETOOLS":7,"excludetools":{}}`, Settings{}},
		{"escaped key", `{"tr\u0075st":true,"include\u0054ools":["a"]}`, Settings{Trust: present(true), IncludeTools: list("a")}},
		{"escaped strings decoded", `{"includeTools":["\u0061","a\"b","\\","\/","\n","\u00e9","\ud83d\ude00"]}`, Settings{IncludeTools: list("a", `a"b`, `\`, "/", "\n", "é", "😀")}},
		{"raw UTF-8 kept", `{"excludeTools":["é","日本"]}`, Settings{ExcludeTools: list("é", "日本")}},
		{"lone surrogate becomes U+FFFD", `{"excludeTools":["\ud800","a\udc00b"]}`, Settings{ExcludeTools: list("\ufffd", "a\ufffdb")}},
		{"invalid UTF-8 becomes U+FFFD", "{\"excludeTools\":[\"a\xffb\"]}", Settings{ExcludeTools: list("a\ufffdb")}},
		{"invalid UTF-8 in an ignored key", "{\"\xff\":1}", Settings{}},
		{"empty string entry", `{"includeTools":[""]}`, Settings{IncludeTools: list("")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSettings([]byte(tt.raw))
			require.NoError(t, err)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ParseSettings(%s) mismatch (-want +got):\n%s", tt.raw, diff)
			}
			// Presence, not Values, tells [] from null.
			assert.Equal(t, tt.want.IncludeTools.Presence, got.IncludeTools.Presence)
			assert.Equal(t, tt.want.ExcludeTools.Presence, got.ExcludeTools.Presence)
		})
	}
}

func TestParseSettingsRefuses(t *testing.T) {
	tests := []struct {
		raw  string
		path string
		msg  string
	}{
		// Not an object.
		{`[]`, "", "expected an object, got an array"},
		{`[{"trust":true}]`, "", "expected an object, got an array"},
		{`"trust"`, "", "expected an object, got a string"},
		{`1`, "", "expected an object, got a number"},
		{`-0.5e3`, "", "expected an object, got a number"},
		{`true`, "", "expected an object, got a boolean"},
		{`false`, "", "expected an object, got a boolean"},
		{`null`, "", "expected an object, got null"},
		{` null `, "", "expected an object, got null"},
		// trust.
		{`{"trust":"false"}`, "trust", "trust: expected a boolean or null, got a string"},
		{`{"trust":"true"}`, "trust", "trust: expected a boolean or null, got a string"},
		{`{"trust":1}`, "trust", "trust: expected a boolean or null, got a number"},
		{`{"trust":0}`, "trust", "trust: expected a boolean or null, got a number"},
		{`{"trust":[]}`, "trust", "trust: expected a boolean or null, got an array"},
		{`{"trust":{}}`, "trust", "trust: expected a boolean or null, got an object"},
		// alwaysLoadTools.
		{`{"alwaysLoadTools":1}`, "alwaysLoadTools", "alwaysLoadTools: expected a boolean or null, got a number"},
		{`{"alwaysLoadTools":"true"}`, "alwaysLoadTools", "alwaysLoadTools: expected a boolean or null, got a string"},
		{`{"alwaysLoadTools":[true]}`, "alwaysLoadTools", "alwaysLoadTools: expected a boolean or null, got an array"},
		{`{"alwaysLoadTools":{"a":true}}`, "alwaysLoadTools", "alwaysLoadTools: expected a boolean or null, got an object"},
		// includeTools.
		{`{"includeTools":"foo"}`, "includeTools", "includeTools: expected an array of strings or null, got a string"},
		{`{"includeTools":{}}`, "includeTools", "includeTools: expected an array of strings or null, got an object"},
		{`{"includeTools":true}`, "includeTools", "includeTools: expected an array of strings or null, got a boolean"},
		{`{"includeTools":3}`, "includeTools", "includeTools: expected an array of strings or null, got a number"},
		{`{"includeTools":["a", 7]}`, "includeTools[1]", "includeTools[1]: expected a string, got a number"},
		{`{"includeTools":[null]}`, "includeTools[0]", "includeTools[0]: expected a string, got null"},
		{`{"includeTools":["a","b",["c"]]}`, "includeTools[2]", "includeTools[2]: expected a string, got an array"},
		{`{"includeTools":[{"name":"a"}]}`, "includeTools[0]", "includeTools[0]: expected a string, got an object"},
		{`{"includeTools":[false]}`, "includeTools[0]", "includeTools[0]: expected a string, got a boolean"},
		{`{"includeTools":["a",1,null]}`, "includeTools[1]", "includeTools[1]: expected a string, got a number"},
		// excludeTools.
		{`{"excludeTools":{}}`, "excludeTools", "excludeTools: expected an array of strings or null, got an object"},
		{`{"excludeTools":"x"}`, "excludeTools", "excludeTools: expected an array of strings or null, got a string"},
		{`{"excludeTools":false}`, "excludeTools", "excludeTools: expected an array of strings or null, got a boolean"},
		{`{"excludeTools":[true]}`, "excludeTools[0]", "excludeTools[0]: expected a string, got a boolean"},
		{`{"excludeTools":["a","b",{}]}`, "excludeTools[2]", "excludeTools[2]: expected a string, got an object"},
		{`{"excludeTools":[ "a" , 1e9 ]}`, "excludeTools[1]", "excludeTools[1]: expected a string, got a number"},
		// Duplicate keys.
		{`{"trust":true,"trust":true}`, "", `duplicate key "trust"`},
		{`{"alwaysLoadTools":true,"alwaysLoadTools":false}`, "", `duplicate key "alwaysLoadTools"`},
		{`{"includeTools":[],"includeTools":["a"]}`, "", `duplicate key "includeTools"`},
		{`{"excludeTools":null,"trust":null,"excludeTools":null}`, "", `duplicate key "excludeTools"`},
		{`{"trust":true,"tr\u0075st":true}`, "", `duplicate key "trust"`},
		{`{"note":1,"note":{}}`, "", `duplicate key "note"`},
		{`{"a\u00e9":1,"aé":2}`, "", `duplicate key "aé"`},
		{"{\"a\xff\":1,\"a\xfe\":2}", "", "duplicate key \"a\ufffd\""},
		// The first problem in document order wins.
		{`{"trust":"x","trust":true}`, "trust", "trust: expected a boolean or null, got a string"},
		{`{"trust":true,"trust":"x"}`, "", `duplicate key "trust"`},
		{`{"excludeTools":[1],"includeTools":"a"}`, "excludeTools[0]", "excludeTools[0]: expected a string, got a number"},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			got, err := ParseSettings([]byte(tt.raw))
			require.Error(t, err)
			assert.Equal(t, tt.msg, err.Error())
			var se *SettingsError
			require.True(t, errors.As(err, &se), "error %T is not a *SettingsError", err)
			assert.Equal(t, tt.path, se.Path)
			assert.Equal(t, Settings{}, got, "a refused object yields the zero Settings")
		})
	}
}

func TestParseSettingsInvalidJSON(t *testing.T) {
	for _, raw := range []string{
		``, `   `, `{`, `}`, `{"trust":}`, `{"trust":tru}`, `{"trust":true,}`,
		`{"includeTools":["a",]}`, `{"includeTools":["a"}`, `{} {}`, `{}x`,
		`{'trust':true}`, `{"trust":True}`, `{"a":01}`, "{\"a\":\"\x01\"}", `{"a":"\x"}`,
		`{"trust":true`, `{"includeTools":["\u12"]}`, `{trust:true}`,
	} {
		t.Run(raw, func(t *testing.T) {
			_, err := ParseSettings([]byte(raw))
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), "invalid JSON"), "got %q", err)
			var se *SettingsError
			require.ErrorAs(t, err, &se)
			assert.Empty(t, se.Path)
		})
	}
}

func TestParseSettingsDeepIgnoredValue(t *testing.T) {
	deep := strings.Repeat(`[{"k":`, 200) + `"]}"` + strings.Repeat(`}]`, 200)
	got, err := ParseSettings([]byte(`{"x":` + deep + `,"trust":false}`))
	require.NoError(t, err)
	assert.Equal(t, Settings{Trust: present(false)}, got)
}

func TestParseSettingsDoesNotAliasInput(t *testing.T) {
	raw := []byte(`{"includeTools":["abc"],"excludeTools":["def"]}`)
	s, err := ParseSettings(raw)
	require.NoError(t, err)
	for i := range raw {
		raw[i] = ' '
	}
	assert.Equal(t, []string{"abc"}, s.IncludeTools.Values)
	assert.Equal(t, []string{"def"}, s.ExcludeTools.Values)
}

func TestPresenceString(t *testing.T) {
	assert.Equal(t, "missing", Missing.String())
	assert.Equal(t, "null", Null.String())
	assert.Equal(t, "present", Present.String())
	assert.Equal(t, "Presence(7)", Presence(7).String())
}

func TestParseSettingsManyOtherKeys(t *testing.T) {
	// Past a handful, other keys are tracked in a map; duplicates are still
	// found wherever they are.
	var keys []string
	for i := range 20 {
		keys = append(keys, fmt.Sprintf(`"k%d":%d`, i, i))
	}
	obj := func(extra ...string) string {
		return "{" + strings.Join(append(append([]string{}, keys...), extra...), ",") + `,"trust":true}`
	}
	got, err := ParseSettings([]byte(obj()))
	require.NoError(t, err)
	assert.Equal(t, Settings{Trust: present(true)}, got)

	for _, dup := range []string{"k0", "k7", "k8", "k19"} {
		_, err := ParseSettings([]byte(obj(`"` + dup + `":null`)))
		require.Error(t, err, dup)
		assert.Equal(t, fmt.Sprintf("duplicate key %q", dup), err.Error())
	}
}
