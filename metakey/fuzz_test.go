package metakey

import (
	"bytes"
	"encoding/json"
	"slices"
	"sort"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"
)

// oracleParse is a slow, independent ParseSettings built on encoding/json's
// token stream. It returns the same Settings and, for a refusal other than a
// syntax error, the same message.
func oracleParse(raw []byte) (Settings, string, bool) {
	var whole json.RawMessage
	if err := json.Unmarshal(raw, &whole); err != nil {
		return Settings{}, "invalid JSON", false
	}
	dec := json.NewDecoder(bytes.NewReader(whole))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		panic(err)
	}
	if tok != json.Delim('{') {
		return Settings{}, "expected an object, got " + tokenKind(tok), false
	}
	var out Settings
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			panic(err)
		}
		key := tok.(string)
		if seen[key] {
			return Settings{}, "duplicate key " + strconv.Quote(key), false
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			panic(err)
		}
		var msg string
		switch key {
		case "trust":
			out.Trust, msg = oracleBool(key, v)
		case "alwaysLoadTools":
			out.AlwaysLoadTools, msg = oracleBool(key, v)
		case "includeTools":
			out.IncludeTools, msg = oracleStrings(key, v)
		case "excludeTools":
			out.ExcludeTools, msg = oracleStrings(key, v)
		}
		if msg != "" {
			return Settings{}, msg, false
		}
	}
	return out, "", true
}

func tokenKind(tok json.Token) string {
	switch tok.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Delim:
		if tok == json.Delim('[') {
			return "an array"
		}
		return "an object"
	}
	return "a number"
}

func rawKind(v json.RawMessage) string {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		panic(err)
	}
	return tokenKind(tok)
}

func oracleBool(key string, v json.RawMessage) (Bool, string) {
	switch string(v) {
	case "null":
		return Bool{Presence: Null}, ""
	case "true":
		return Bool{Presence: Present, Value: true}, ""
	case "false":
		return Bool{Presence: Present}, ""
	}
	return Bool{}, key + ": expected a boolean or null, got " + rawKind(v)
}

func oracleStrings(key string, v json.RawMessage) (Strings, string) {
	if string(v) == "null" {
		return Strings{Presence: Null}, ""
	}
	var items []json.RawMessage
	if rawKind(v) != "an array" || json.Unmarshal(v, &items) != nil {
		return Strings{}, key + ": expected an array of strings or null, got " + rawKind(v)
	}
	out := Strings{Presence: Present}
	for i, item := range items {
		var s string
		if rawKind(item) != "a string" || json.Unmarshal(item, &s) != nil {
			return Strings{}, key + "[" + strconv.Itoa(i) + "]: expected a string, got " + rawKind(item)
		}
		out.Values = append(out.Values, s)
	}
	return out, ""
}

// oracleCanonical applies the canonical rules the obvious way.
func oracleCanonical(s Settings) Canonical {
	var c Canonical
	if s.Trust.Presence == Present {
		v := s.Trust.Value
		c.Trust = &v
	}
	c.AlwaysLoadTools = s.AlwaysLoadTools.Presence == Present && s.AlwaysLoadTools.Value
	set := func(names []string, cut bool) []string {
		m := map[string]bool{}
		for _, n := range names {
			if i := bytes.IndexByte([]byte(n), '('); cut && i >= 0 {
				n = n[:i]
			}
			m[n] = true
		}
		out := []string{}
		for n := range m {
			out = append(out, n)
		}
		sort.Strings(out)
		return out
	}
	if s.IncludeTools.Presence == Present {
		c.IncludeTools = set(s.IncludeTools.Values, true)
	}
	c.ExcludeTools = set(s.ExcludeTools.Values, false)
	return c
}

func oracleVisible(c Canonical, name string) bool {
	return name != "" && (c.IncludeTools == nil || slices.Contains(c.IncludeTools, name)) && !slices.Contains(c.ExcludeTools, name)
}

var fuzzSeeds = []string{
	`{}`, `[]`, `null`, `"x"`, `1`, ``, `{`, `{"trust":true}`, `{"trust":"false"}`,
	`{"alwaysLoadTools":1}`, `{"includeTools":["a(b)","a","c"]}`, `{"includeTools":["a",7]}`,
	`{"includeTools":[null]}`, `{"excludeTools":{}}`, `{"excludeTools":["x","x(y)"]}`,
	`{"trust":true,"trust":false}`, `{"tr\u0075st":null}`, `{"x":{"y":[1,"]",{"z":"}"}]},"trust":false}`,
	`{"includeTools":["\ud800","\u00e9","<&>"]}`, "{\"excludeTools\":[\"\xff\"]}",
	`{"a":1e400,"includeTools":[1e400]}`, `{"includeTools":[],"excludeTools":null,"alwaysLoadTools":true}`,
	` { "trust" : null , "includeTools" : [ "p" , "q(1)" ] } `, `{"Trust":1}`, `{"":0,"":1}`,
	`{"a":0,"b":1,"c":2,"d":3,"e":4,"f":5,"g":6,"h":7,"i":8,"j":9,"i":10}`,
}

func FuzzParseSettings(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		want, wantMsg, wantOK := oracleParse(raw)
		got, err := ParseSettings(raw)
		if !wantOK {
			require.Error(t, err, "oracle refused %q: %s", raw, wantMsg)
			if wantMsg == "invalid JSON" {
				require.Regexp(t, "^invalid JSON", err.Error())
			} else {
				require.Equal(t, wantMsg, err.Error(), "input %q", raw)
			}
			return
		}
		require.NoError(t, err, "input %q", raw)
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("ParseSettings(%q) mismatch (-oracle +got):\n%s", raw, diff)
		}

		c := got.Canonical()
		if diff := cmp.Diff(oracleCanonical(got), c); diff != "" {
			t.Fatalf("Canonical of %q mismatch (-oracle +got):\n%s", raw, diff)
		}
		key, err := c.MarshalJSON()
		require.NoError(t, err)
		require.Equal(t, oracleJSON(t, c), string(key))
		require.Equal(t, string(key), c.Key())

		// The key is itself a settings object with the same canonical form.
		again, err := ParseSettings(key)
		require.NoError(t, err)
		require.Equal(t, string(key), again.Canonical().Key())

		names := append(append([]string{"", "a", "a(b)"}, got.IncludeTools.Values...), got.ExcludeTools.Values...)
		for _, n := range names {
			require.Equal(t, oracleVisible(c, n), c.Visible(n), "Visible(%q) for %q", n, raw)
		}
	})
}
