package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
)

const defaultCanonical = `{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}`

func TestParseSettingsCanonical(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want string // canonical JSON
	}{
		{"empty", `{}`, defaultCanonical},
		{"white space", " \t\r\n{ \n } \n", defaultCanonical},
		{"all null", `{"trust":null,"alwaysLoadTools":null,"includeTools":null,"excludeTools":null}`, defaultCanonical},
		{"trust false", `{"trust":false}`, `{"trust":false,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}`},
		{"trust true", `{"trust":true}`, `{"trust":true,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}`},
		{"alwaysLoadTools false is the default", `{"alwaysLoadTools":false}`, defaultCanonical},
		{"alwaysLoadTools true", `{"alwaysLoadTools":true}`, `{"trust":null,"alwaysLoadTools":true,"includeTools":null,"excludeTools":[]}`},
		{"includeTools empty stays empty", `{"includeTools":[]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":[],"excludeTools":[]}`},
		{
			"includeTools cut, deduplicated, sorted",
			`{"includeTools":["foo(args)","bar","foo","(x)","baz(a)(b)","bar"]}`,
			`{"trust":null,"alwaysLoadTools":false,"includeTools":["","bar","baz","foo"],"excludeTools":[]}`,
		},
		{
			"includeTools sorted by bytes",
			`{"includeTools":["b","B","a","_","é","Z"]}`,
			`{"trust":null,"alwaysLoadTools":false,"includeTools":["B","Z","_","a","b","é"],"excludeTools":[]}`,
		},
		{"excludeTools empty is the default", `{"excludeTools":[]}`, defaultCanonical},
		{
			"excludeTools exact names, deduplicated, sorted",
			`{"excludeTools":["z(x)","a","z(x)"," a"]}`,
			`{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[" a","a","z(x)"]}`,
		},
		{
			"all four, any order, other keys ignored",
			`{"command":"npx","excludeTools":["e"],"args":["-y",{"trust":1}],"includeTools":["i"],"alwaysLoadTools":true,"trust":false,"Trust":"x"}`,
			`{"trust":false,"alwaysLoadTools":true,"includeTools":["i"],"excludeTools":["e"]}`,
		},
		{
			"escaped keys and strings",
			`{"tr\u0075st":true,"includeTools":["\u0061","a\"b","\u003c","\ud800","\u2028"]}`,
			`{"trust":true,"alwaysLoadTools":false,"includeTools":["\u003c","a","a\"b","\u2028","` + "\ufffd" + `"],"excludeTools":[]}`,
		},
		{
			"invalid UTF-8",
			"{\"excludeTools\":[\"a\xffb\"]}",
			`{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":["a` + "\ufffd" + `b"]}`,
		},
		{
			"raw UTF-8 kept",
			`{"excludeTools":["日本","é"]}`,
			`{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":["é","日本"]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseSettings([]byte(tt.raw))
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(c.AppendJSON(nil)))
			assert.Equal(t, tt.want, c.Key())
			assert.NotNil(t, c.ExcludeTools)
		})
	}
}

func TestParseSettingsRefuses(t *testing.T) {
	tests := []struct {
		raw  string
		want string
	}{
		{`[]`, "expected an object, got an array"},
		{`null`, "expected an object, got null"},
		{`"x"`, "expected an object, got a string"},
		{`1`, "expected an object, got a number"},
		{`true`, "expected an object, got a boolean"},
		{`{"trust":"false"}`, "trust: expected a boolean or null, got a string"},
		{`{"trust":0}`, "trust: expected a boolean or null, got a number"},
		{`{"trust":[]}`, "trust: expected a boolean or null, got an array"},
		{`{"alwaysLoadTools":1}`, "alwaysLoadTools: expected a boolean or null, got a number"},
		{`{"alwaysLoadTools":{}}`, "alwaysLoadTools: expected a boolean or null, got an object"},
		{`{"includeTools":"foo"}`, "includeTools: expected an array of strings or null, got a string"},
		{`{"includeTools":true}`, "includeTools: expected an array of strings or null, got a boolean"},
		{`{"includeTools":["a",7]}`, "includeTools[1]: expected a string, got a number"},
		{`{"includeTools":[null]}`, "includeTools[0]: expected a string, got null"},
		{`{"includeTools":["a",["b"]]}`, "includeTools[1]: expected a string, got an array"},
		{`{"excludeTools":{}}`, "excludeTools: expected an array of strings or null, got an object"},
		{`{"excludeTools":["a","b",false]}`, "excludeTools[2]: expected a string, got a boolean"},
		{`{"trust":true,"trust":true}`, `duplicate key "trust"`},
		{`{"trust":true,"tr\u0075st":false}`, `duplicate key "trust"`},
		{`{"command":"a","command":"b"}`, `duplicate key "command"`},
		{"{\"\xff\":1,\"\\ufffd\":2}", `duplicate key "�"`},
		{`{"a\nb":1,"a\nb":2}`, `duplicate key "a\nb"`},
		// The first problem in document order wins.
		{`{"trust":1,"includeTools":"x"}`, "trust: expected a boolean or null, got a number"},
		{`{"includeTools":[1,2],"trust":1}`, "includeTools[0]: expected a string, got a number"},
		{`{"trust":1,"trust":true}`, "trust: expected a boolean or null, got a number"},
		{`{"trust":true,"trust":1}`, `duplicate key "trust"`},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			_, err := ParseSettings([]byte(tt.raw))
			assert.EqualError(t, err, tt.want)
		})
	}
}

func TestParseSettingsManyOtherKeys(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := range 100 {
		fmt.Fprintf(&b, `"k%d":%d,`, i, i)
	}
	b.WriteString(`"trust":true}`)
	c, err := ParseSettings([]byte(b.String()))
	require.NoError(t, err)
	require.NotNil(t, c.Trust)
	assert.True(t, *c.Trust)

	dup := strings.Replace(b.String(), `"trust":true`, `"k3":true`, 1)
	_, err = ParseSettings([]byte(dup))
	assert.EqualError(t, err, `duplicate key "k3"`)
}

func TestParseSettingsMalformed(t *testing.T) {
	for _, raw := range []string{``, `{`, `{"trust":}`, `{"trust":true,}`, `{"trust":tru}`, `{} {}`, `{"trust":"x",]`, `{"includeTools":["a"}`, `{"a":1 "b":2}`, "{\"a\":\"\x01\"}"} {
		t.Run(raw, func(t *testing.T) {
			_, err := ParseSettings([]byte(raw))
			require.Error(t, err)
			var v any
			jerr := json.Unmarshal([]byte(raw), &v)
			var se *json.SyntaxError
			require.True(t, errors.As(jerr, &se), "encoding/json must refuse %q too", raw)
			assert.Equal(t, fmt.Sprintf("invalid JSON at byte offset %d: %v", se.Offset, se), err.Error())
		})
	}
}

func TestVisible(t *testing.T) {
	c, err := ParseSettings([]byte(`{"includeTools":["a","b(x)","c",""],"excludeTools":["c"]}`))
	require.NoError(t, err)
	for name, want := range map[string]bool{"a": true, "b": true, "b(x)": false, "c": false, "": false, "d": false, "A": false} {
		assert.Equal(t, want, c.Visible(name), name)
	}
	all, err := ParseSettings([]byte(`{"excludeTools":["x"]}`))
	require.NoError(t, err)
	for name, want := range map[string]bool{"a": true, "x": false, "": false, " x": true} {
		assert.Equal(t, want, all.Visible(name), name)
	}
}

// answer runs export, Canonicalize or Project, on req and decodes its
// answer, which must be valid JSON.
func answer[T any](t *testing.T, export func([]byte) ([]byte, error), req string) T {
	t.Helper()
	out, err := export([]byte(req))
	require.NoError(t, err)
	require.True(t, json.Valid(out), "%s", out)
	var resp T
	require.NoError(t, json.Unmarshal(out, &resp))
	return resp
}

// canonicalize runs Canonicalize on req and decodes its answer as the host
// does for a plugin with canonicalKeys (withKeys).
func canonicalize(t *testing.T, req string) abi.CanonicalizeResponse {
	t.Helper()
	resp := answer[abi.CanonicalizeResponse](t, Canonicalize, req)
	return withKeys(t, resp)
}

func TestCanonicalize(t *testing.T) {
	resp := canonicalize(t, `{"settings":[{},{"trust":"x"},{"includeTools":["b","a(1)"],"trust":true},null,[]]}`)
	want := abi.CanonicalizeResponse{Results: []abi.CanonicalResult{
		{Canonical: json.RawMessage(defaultCanonical), Key: defaultCanonical},
		{Error: "trust: expected a boolean or null, got a string"},
		{
			Canonical: json.RawMessage(`{"trust":true,"alwaysLoadTools":false,"includeTools":["a","b"],"excludeTools":[]}`),
			Key:       `{"trust":true,"alwaysLoadTools":false,"includeTools":["a","b"],"excludeTools":[]}`,
		},
		{Error: "expected an object, got null"},
		{Error: "expected an object, got an array"},
	}}
	assert.Empty(t, cmp.Diff(want, resp), "(-want +got)")
	req := abi.CanonicalizeRequest{Settings: make([]json.RawMessage, 5)}
	require.NoError(t, abi.ValidateCanonicalize(&req, &resp))
}

func TestCanonicalizeRequestShapes(t *testing.T) {
	for req, want := range map[string]int{
		`{}`:                                    0,
		`{"settings":null}`:                     0,
		`{"settings":[]}`:                       0,
		` { "settings" : [ { } ] } `:            1,
		`{"other":[1,{"a":2}],"settings":[{}]}`: 1,
		`{"settings":[{},{}],"settings":[{}]}`:  1, // the last member wins, as with encoding/json
	} {
		resp := canonicalize(t, req)
		assert.Len(t, resp.Results, want, req)
	}
}

func TestCanonicalizeMalformedRequest(t *testing.T) {
	for _, req := range []string{``, `[]`, `null`, `{"settings":{}}`, `{"settings":[{}]`, `{"settings":[{]}`, `{"settings":[{"trust":tru}]}`, `{"settings":[{}]} x`, `{"settings":[1,]}`, `{"settings":"x"}`} {
		_, err := Canonicalize([]byte(req))
		require.Error(t, err, req)
		assert.True(t, strings.HasPrefix(err.Error(), "canonicalize request: "), err.Error())
	}
	_, err := Canonicalize([]byte(`{"settings":[{},{"trust":}]}`))
	assert.EqualError(t, err, `canonicalize request: settings[1]: malformed JSON at byte 25: unexpected '}', expected a value`)
}

func TestCanonicalizeKeyTooLong(t *testing.T) {
	long := strings.Repeat("x", MaxKeyBytes)
	req := fmt.Sprintf(`{"settings":[{"excludeTools":[%q]},{"excludeTools":[%q]}]}`, long[:MaxKeyBytes-200], long)
	resp := canonicalize(t, req)
	require.Len(t, resp.Results, 2)
	assert.Empty(t, resp.Results[0].Error)
	assert.Len(t, resp.Results[0].Key, len(defaultCanonical)+MaxKeyBytes-200+2)
	n := len(defaultCanonical) + MaxKeyBytes + 2
	assert.Equal(t, abi.CanonicalResult{Error: fmt.Sprintf("canonical form is %d bytes, more than the %d bytes a key may hold", n, MaxKeyBytes)}, resp.Results[1])
}

func TestProject(t *testing.T) {
	tests := []struct {
		name string
		req  string
		want abi.ProjectResponse
	}{
		{
			"defaults show every named tool and prompt",
			`{"settings":{},"tools":["a","","b"],"prompts":["p",""],"resources":["file:///x","file:///y"]}`,
			abi.ProjectResponse{
				Tools:     []abi.ToolDecision{{Index: 0}, {Index: 2}},
				Prompts:   []int{0},
				Resources: []int{0, 1},
			},
		},
		{
			"include and exclude, flags",
			`{"settings":{"trust":true,"alwaysLoadTools":true,"includeTools":["a(x)","b","c"],"excludeTools":["c"]},"tools":["c","b","a","d"],"prompts":["a","d","c"],"resources":[]}`,
			abi.ProjectResponse{
				Tools:     []abi.ToolDecision{{Index: 1, Trust: true, AlwaysLoad: true}, {Index: 2, Trust: true, AlwaysLoad: true}},
				Prompts:   []int{0},
				Resources: []int{},
			},
		},
		{
			"trust false and null both give false",
			`{"settings":{"trust":false},"tools":["a"],"prompts":null,"resources":null}`,
			abi.ProjectResponse{Tools: []abi.ToolDecision{{Index: 0}}, Prompts: []int{}, Resources: []int{}},
		},
		{
			"include none",
			`{"settings":{"includeTools":[]},"tools":["a"],"prompts":["a"],"resources":["r"]}`,
			abi.ProjectResponse{Tools: []abi.ToolDecision{}, Prompts: []int{}, Resources: []int{0}},
		},
		{
			"annotations and unknown members ignored, any order",
			`{"toolAnnotations":[{"readOnlyHint":true},null],"resources":["r"],"tools":["a","b"],"x":{"y":[1]},"settings":{"alwaysLoadTools":true,"excludeTools":["a"]}}`,
			abi.ProjectResponse{Tools: []abi.ToolDecision{{Index: 1, AlwaysLoad: true}}, Prompts: []int{}, Resources: []int{0}},
		},
		{
			"names decoded before comparing",
			`{"settings":{"includeTools":["é","a\"b","<"]},"tools":["\u00e9","a\"b","\u003c","\u00e8"],"prompts":[null,"<"]}`,
			abi.ProjectResponse{Tools: []abi.ToolDecision{{Index: 0}, {Index: 1}, {Index: 2}}, Prompts: []int{1}, Resources: []int{}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := answer[abi.ProjectResponse](t, Project, tt.req)
			assert.Empty(t, cmp.Diff(tt.want, got), "(-want +got)")
			var req abi.ProjectRequest
			require.NoError(t, json.Unmarshal([]byte(tt.req), &req))
			require.NoError(t, abi.ValidateProject(&req, &got))
		})
	}
}

func TestProjectErrors(t *testing.T) {
	tests := []struct {
		req  string
		want string
	}{
		{`{"settings":{"trust":1},"tools":["a"]}`, "project: settings refused: trust: expected a boolean or null, got a number"},
		{`{"settings":null,"tools":["a"]}`, "project: settings refused: expected an object, got null"},
		{`{"settings":{"trust":true,"trust":true}}`, `project: settings refused: duplicate key "trust"`},
		{`{"tools":["a"]}`, "project request: settings: missing"},
		{`{"settings":{},"tools":["a",1]}`, "project request: malformed JSON at byte 28: tools[1]: expected a string, got a number"},
		{`{"settings":{},"resources":[{}]}`, "project request: malformed JSON at byte 28: resources[0]: expected a string, got an object"},
		{`{"settings":{},"tools":"a"}`, "project request: malformed JSON at byte 23: unexpected '\"', expected an array or null"},
		{`{"settings":{"trust":}}`, "project request: settings: malformed JSON at byte 21: unexpected '}', expected a value"},
		{`{"settings":{}`, "project request: malformed JSON at byte 14: unexpected end of input, expected ',' or '}'"},
		{`[]`, "project request: malformed JSON at byte 0: unexpected '[', expected '{'"},
	}
	for _, tt := range tests {
		t.Run(tt.req, func(t *testing.T) {
			_, err := Project([]byte(tt.req))
			assert.EqualError(t, err, tt.want)
		})
	}
}

// FuzzRequests feeds arbitrary bytes to both request readers: they must
// answer valid JSON or fail, never panic.
func FuzzRequests(f *testing.F) {
	f.Add([]byte(`{"settings":[{},{"trust":"x"},{"includeTools":["b","a(1)"]}]}`))
	f.Add([]byte(`{"settings":{"excludeTools":["a"]},"tools":["a","b"],"prompts":["p"],"resources":["r"]}`))
	f.Fuzz(func(t *testing.T, req []byte) {
		if out, err := Canonicalize(req); err == nil && !json.Valid(out) {
			t.Fatalf("Canonicalize(%q) wrote invalid JSON %q", req, out)
		}
		if out, err := Project(req); err == nil && !json.Valid(out) {
			t.Fatalf("Project(%q) wrote invalid JSON %q", req, out)
		}
	})
}
