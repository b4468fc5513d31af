package prefix

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
)

func TestHandshake(t *testing.T) {
	b, err := json.Marshal(&Handshake)
	require.NoError(t, err)
	assert.Equal(t, `{"abi":1,"name":"prefix-policy","version":"1.0.0","wants":["toolAnnotations"]}`, string(b))
	require.NoError(t, abi.ValidateHandshake(&Handshake))
}

func TestCanonicalize(t *testing.T) {
	req := abi.CanonicalizeRequest{Settings: []json.RawMessage{
		json.RawMessage(`{}`),
		json.RawMessage(`{"includeTools":null,"trust":"ignored","excludeTools":7}`),
		json.RawMessage(`{"includeTools":["read_","list","read_","a(b)"]}`),
		json.RawMessage(`{"includeTools":[]}`),
		json.RawMessage(`{"includeTools":"read_"}`),
		json.RawMessage(`{"includeTools":["a",1]}`),
		json.RawMessage(`{"includeTools":[],"includeTools":null}`),
		json.RawMessage(`[]`),
	}}
	in, err := json.Marshal(&req)
	require.NoError(t, err)
	out, err := Canonicalize(in)
	require.NoError(t, err)
	var got abi.CanonicalizeResponse
	require.NoError(t, json.Unmarshal(out, &got))
	result := func(canonical string) abi.CanonicalResult {
		return abi.CanonicalResult{Canonical: json.RawMessage(canonical), Key: canonical}
	}
	want := abi.CanonicalizeResponse{Results: []abi.CanonicalResult{
		result(`{"prefixes":null}`),
		result(`{"prefixes":null}`),
		result(`{"prefixes":["a(b)","list","read_"]}`),
		result(`{"prefixes":[]}`),
		{Error: "includeTools: expected an array of strings or null, got a string"},
		{Error: "includeTools[1]: expected a string, got a number"},
		{Error: `duplicate key "includeTools"`},
		{Error: "expected an object, got an array"},
	}}
	assert.Empty(t, cmp.Diff(want, got), "(-want +got)")
	require.NoError(t, abi.ValidateCanonicalize(&req, &got))

	_, err = Canonicalize([]byte(`{"settings":`))
	assert.Error(t, err)
}

func TestProject(t *testing.T) {
	req := abi.ProjectRequest{
		Settings: json.RawMessage(`{"includeTools":["read_","git_"],"trust":true,"alwaysLoadTools":true}`),
		Tools:    []string{"read_file", "write_file", "git_log", "git_push", "", "read_"},
		ToolAnnotations: []json.RawMessage{
			json.RawMessage(`{"readOnlyHint":true}`),
			json.RawMessage(`{"readOnlyHint":true}`),
			json.RawMessage(`{"readOnlyHint":true,"title":"log"}`),
			json.RawMessage(`{"readOnlyHint":false,"destructiveHint":true}`),
			json.RawMessage(`null`),
			json.RawMessage(`null`),
		},
		Prompts:   []string{"git_summary", "summarize"},
		Resources: []string{"file:///a", "file:///b"},
	}
	in, err := json.Marshal(&req)
	require.NoError(t, err)
	out, err := Project(in)
	require.NoError(t, err)
	var got abi.ProjectResponse
	require.NoError(t, json.Unmarshal(out, &got))
	want := abi.ProjectResponse{
		Tools: []abi.ToolDecision{
			{Index: 0, Trust: true, AlwaysLoad: true},
			{Index: 2, Trust: true, AlwaysLoad: true},
			{Index: 3},
			{Index: 5},
		},
		Prompts:   []int{0},
		Resources: []int{0, 1},
	}
	assert.Empty(t, cmp.Diff(want, got), "(-want +got)")
	require.NoError(t, abi.ValidateProject(&req, &got))
}

func TestProjectDeniesByDefault(t *testing.T) {
	for _, settings := range []string{`{}`, `{"includeTools":null}`, `{"includeTools":[]}`} {
		in, err := json.Marshal(&abi.ProjectRequest{Settings: json.RawMessage(settings), Tools: []string{"a"}, Prompts: []string{"p"}, Resources: []string{"r"}})
		require.NoError(t, err)
		out, err := Project(in)
		require.NoError(t, err)
		assert.JSONEq(t, `{"tools":[],"prompts":[],"resources":[0]}`, string(out), settings)
	}
}

func TestProjectWithoutAnnotations(t *testing.T) {
	in := []byte(`{"settings":{"includeTools":[""]},"tools":["a","b"],"prompts":[],"resources":[]}`)
	out, err := Project(in)
	require.NoError(t, err)
	assert.JSONEq(t, `{"tools":[{"i":0,"trust":false,"alwaysLoad":false},{"i":1,"trust":false,"alwaysLoad":false}],"prompts":[],"resources":[]}`, string(out))
}

func TestProjectRefuses(t *testing.T) {
	_, err := Project([]byte(`{"settings":{"includeTools":[true]},"tools":[],"prompts":[],"resources":[]}`))
	assert.EqualError(t, err, "project: settings refused: includeTools[0]: expected a string, got a boolean")
	_, err = Project([]byte(`{"settings":null,"tools":[],"prompts":[],"resources":[]}`))
	assert.EqualError(t, err, "project: settings refused: expected an object, got null")
	_, err = Project([]byte(`{"settings":`))
	assert.Error(t, err)
}

func TestReadOnly(t *testing.T) {
	for raw, want := range map[string]bool{
		`{"readOnlyHint":true}`:  true,
		`{"readOnlyHint":false}`: false,
		`{}`:                     false,
		`null`:                   false,
		`{"readOnlyHint":"yes"}`: false,
		`[true]`:                 false,
		``:                       false,
	} {
		assert.Equal(t, want, readOnly(json.RawMessage(raw)), raw)
	}
}
