package abi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRenamesDecode(t *testing.T) {
	var resp ProjectResponse
	require.NoError(t, json.Unmarshal([]byte(`{"tools":[{"i":0,"trust":false,"alwaysLoad":false,"name":"short","description":"d"}],"prompts":[0,{"i":1,"name":"p2","description":"pd"}],"resources":[]}`), &resp))
	assert.Equal(t, ProjectResponse{
		Tools:         []ToolDecision{{Index: 0, Name: "short", Description: "d"}},
		Prompts:       []int{0, 1},
		PromptRenames: []Rename{{}, {Name: "p2", Description: "pd"}},
		Resources:     []int{},
	}, resp)

	// Without objects nothing changes: no PromptRenames, empty lists kept.
	resp = ProjectResponse{}
	require.NoError(t, json.Unmarshal([]byte(`{"tools":[],"prompts":[0,2],"resources":null}`), &resp))
	assert.Equal(t, ProjectResponse{Tools: []ToolDecision{}, Prompts: []int{0, 2}}, resp)

	for in, want := range map[string]string{
		`{"prompts":[{"name":"x"}]}`:               `"i" is missing`,
		`{"prompts":[{"i":0,"x":1}]}`:              `unknown field "x"`,
		`{"prompts":[{"i":0,"name":""}]}`:          `"name" is empty`,
		`{"tools":[{"i":0,"description":""}]}`:     `"description" is empty`,
		`{"tools":[{"i":0,"name":5}]}`:             "cannot unmarshal number",
		`{"prompts":["a"]}`:                        "cannot unmarshal string",
		`{"prompts":[0],"extra":[]}`:               `unknown field "extra"`,
		`{"tools":[{"i":0,"name":"a","nam":"b"}]}`: `unknown field "nam"`,
	} {
		err := json.Unmarshal([]byte(in), &ProjectResponse{})
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), want, in)
	}
}

func TestRenamesEncode(t *testing.T) {
	// A response without renames encodes as before them.
	b, err := json.Marshal(&ProjectResponse{Tools: []ToolDecision{{Index: 1, Trust: true}}, Prompts: []int{0}, Resources: []int{}})
	require.NoError(t, err)
	assert.Equal(t, `{"tools":[{"i":1,"trust":true,"alwaysLoad":false}],"prompts":[0],"resources":[]}`, string(b))

	resp := ProjectResponse{
		Tools:         []ToolDecision{{Index: 0, Name: "short"}},
		Prompts:       []int{0, 1},
		PromptRenames: []Rename{{}, {Description: "pd"}},
	}
	b, err = json.Marshal(resp)
	require.NoError(t, err)
	assert.Equal(t, `{"tools":[{"i":0,"trust":false,"alwaysLoad":false,"name":"short"}],"prompts":[0,{"i":1,"description":"pd"}],"resources":null}`, string(b))
	var back ProjectResponse
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, resp, back)

	// In a batch result too, and a refusal stays {"error":...}.
	br := ProjectBatchResponse{Results: []BatchResult{{ProjectResponse: &resp}, {Error: "no"}}}
	b, err = json.Marshal(br)
	require.NoError(t, err)
	assert.Equal(t, `{"results":[{"tools":[{"i":0,"trust":false,"alwaysLoad":false,"name":"short"}],"prompts":[0,{"i":1,"description":"pd"}],"resources":null},{"error":"no"}]}`, string(b))
	var bback ProjectBatchResponse
	require.NoError(t, json.Unmarshal(b, &bback))
	assert.Equal(t, br, bback)

	// Both an error and a projection member, even null, are seen as both.
	var both BatchResult
	require.NoError(t, json.Unmarshal([]byte(`{"error":"x","tools":null}`), &both))
	assert.NotNil(t, both.ProjectResponse)
	assert.Equal(t, "x", both.Error)
	b, err = json.Marshal(BatchResult{Error: "e", ProjectResponse: &ProjectResponse{}})
	require.NoError(t, err)
	assert.Equal(t, `{"tools":null,"prompts":null,"resources":null,"error":"e"}`, string(b))
}

func TestValidateRenames(t *testing.T) {
	req := &ProjectRequest{Tools: []string{"read_file", "write_file", "short"}, Prompts: []string{"sum", "other"}}
	tool := func(i int, name, desc string) ToolDecision {
		return ToolDecision{Index: i, Name: name, Description: desc}
	}
	ok := []*ProjectResponse{
		{Tools: []ToolDecision{tool(0, "read", ""), tool(1, "", "shorter")}},
		{Tools: []ToolDecision{tool(0, "short", "")}},                              // "short" itself is hidden
		{Tools: []ToolDecision{tool(0, "read_file", "")}},                          // renamed to its own name
		{Tools: []ToolDecision{tool(0, "a", ""), tool(1, "write_file.v2-x_", "")}}, // the rule's characters
		{Tools: []ToolDecision{tool(0, strings.Repeat("n", 128), strings.Repeat("é", MaxDescriptionBytes/2))}},
		{Prompts: []int{0, 1}, PromptRenames: []Rename{{Name: "s"}, {}}},
	}
	for i, resp := range ok {
		require.NoError(t, ValidateProjectWith(req, resp, true), "ok[%d]", i)
		err := ValidateProjectWith(req, resp, false)
		require.Error(t, err, "ok[%d] without the opt-in", i)
		assert.Contains(t, err.Error(), `does not opt into renames ("renames": true)`)
		require.Error(t, ValidateProject(req, resp))
	}
	bad := []struct {
		resp *ProjectResponse
		err  string
	}{
		{&ProjectResponse{Tools: []ToolDecision{tool(0, "short", ""), tool(2, "", "")}}, `tools[0] ("read_file") and tools[1] ("short") are both exposed as "short"`},
		{&ProjectResponse{Tools: []ToolDecision{tool(0, "x", ""), tool(1, "x", "")}}, `are both exposed as "x"`},
		{&ProjectResponse{Tools: []ToolDecision{tool(0, "", ""), tool(1, "read_file", "")}}, `are both exposed as "read_file"`},
		{&ProjectResponse{Tools: []ToolDecision{tool(0, "has space", "")}}, `outside the MCP tool-name rule`},
		{&ProjectResponse{Tools: []ToolDecision{tool(0, "ü", "")}}, `outside the MCP tool-name rule`},
		{&ProjectResponse{Tools: []ToolDecision{tool(0, strings.Repeat("n", 129), "")}}, `129 bytes long, over the 128`},
		{&ProjectResponse{Tools: []ToolDecision{tool(0, "", strings.Repeat("d", MaxDescriptionBytes+1))}}, `description is 4097 bytes long, over 4096`},
		{&ProjectResponse{Tools: []ToolDecision{tool(0, "", "\xff")}}, `not valid UTF-8`},
		{&ProjectResponse{Prompts: []int{0, 1}, PromptRenames: []Rename{{Name: "other"}, {}}}, `prompts[0] ("sum") and prompts[1] ("other") are both exposed as "other"`},
		{&ProjectResponse{Prompts: []int{0, 1}, PromptRenames: []Rename{{Name: "a b"}, {}}}, `prompts[0]: name "a b" has ' '`},
		{&ProjectResponse{Prompts: []int{0, 1}, PromptRenames: []Rename{{Name: "s"}}}, `1 prompt renames for 2 prompts`},
	}
	for _, tt := range bad {
		err := ValidateProjectWith(req, tt.resp, true)
		require.Error(t, err, tt.err)
		assert.Contains(t, err.Error(), tt.err)
	}
	// Two tools an upstream lists under one name and the plugin leaves
	// alone pass, as before renames.
	dup := &ProjectRequest{Tools: []string{"a", "a"}}
	require.NoError(t, ValidateProjectWith(dup, &ProjectResponse{Tools: []ToolDecision{{Index: 0}, {Index: 1, Description: "d"}}}, true))

	// The batch path checks each item the same way.
	breq := &ProjectBatchRequest{Settings: []json.RawMessage{[]byte(`{}`)}, Snapshots: []BatchSnapshot{{Tools: req.Tools, Prompts: req.Prompts}}, Items: []BatchItem{{0, 0}}}
	bresp := &ProjectBatchResponse{Results: []BatchResult{{ProjectResponse: &ProjectResponse{Tools: []ToolDecision{tool(0, "x", "")}}}}}
	require.NoError(t, ValidateProjectBatchWith(breq, bresp, true))
	require.Error(t, ValidateProjectBatch(breq, bresp))
}
