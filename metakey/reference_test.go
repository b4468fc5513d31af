package metakey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
)

func TestReferenceHandshake(t *testing.T) {
	h := Reference{}.Handshake()
	assert.Equal(t, abi.Handshake{ABI: 1, Name: "metakey-reference", Version: "1.0.0"}, h)
	require.NoError(t, abi.ValidateHandshake(&h))
}

func rawList(v ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(v))
	for i, s := range v {
		out[i] = json.RawMessage(s)
	}
	return out
}

func TestReferenceCanonicalize(t *testing.T) {
	req := &abi.CanonicalizeRequest{Settings: rawList(
		`{}`,
		`{"trust":"false"}`,
		`{"includeTools":["b","a(x)"],"trust":true}`,
		`[]`,
		`{"includeTools":["a", 7]}`,
		`{"trust":true,"trust":true}`,
		`{"excludeTools":["<x>"]}`,
		`{"alwaysLoadTools":true}`,
	)}
	resp, err := Reference{}.Canonicalize(context.Background(), req)
	require.NoError(t, err)
	want := []abi.CanonicalResult{
		{Key: defaultKey},
		{Error: "trust: expected a boolean or null, got a string"},
		{Key: `{"trust":true,"alwaysLoadTools":false,"includeTools":["a","b"],"excludeTools":[]}`},
		{Error: "expected an object, got an array"},
		{Error: "includeTools[1]: expected a string, got a number"},
		{Error: `duplicate key "trust"`},
		{Key: `{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":["\u003cx\u003e"]}`},
		{Key: `{"trust":null,"alwaysLoadTools":true,"includeTools":null,"excludeTools":[]}`},
	}
	for i := range want {
		if want[i].Key != "" {
			want[i].Canonical = json.RawMessage(want[i].Key)
		}
	}
	if diff := cmp.Diff(want, resp.Results); diff != "" {
		t.Errorf("results mismatch (-want +got):\n%s", diff)
	}

	// The results do not share writable memory: appending to one canonical
	// form leaves the next one alone.
	_ = append(resp.Results[0].Canonical, "garbage"...)
	assert.Equal(t, `{"trust":true,"alwaysLoadTools":false,"includeTools":["a","b"],"excludeTools":[]}`, string(resp.Results[2].Canonical))

	// The request is not modified.
	assert.Equal(t, `{"includeTools":["b","a(x)"],"trust":true}`, string(req.Settings[2]))

	// The response goes through JSON as the wire would carry it.
	wire, err := json.Marshal(resp)
	require.NoError(t, err)
	var back abi.CanonicalizeResponse
	require.NoError(t, json.Unmarshal(wire, &back))
	require.NoError(t, abi.ValidateCanonicalize(req, &back))
	assert.Equal(t, resp.Results[6].Key, back.Results[6].Key)
}

func TestReferenceCanonicalizeAgreesWithCanonical(t *testing.T) {
	raws := []string{
		`{}`, `{"trust":false}`, `{"includeTools":[]}`, `{"excludeTools":["b","a","b"]}`,
		`{"includeTools":["x(1)","x(2)","é","<"],"alwaysLoadTools":true,"trust":null}`,
	}
	resp, err := Reference{}.Canonicalize(context.Background(), &abi.CanonicalizeRequest{Settings: rawList(raws...)})
	require.NoError(t, err)
	for i, raw := range raws {
		c := mustParse(t, raw).Canonical()
		assert.Equal(t, c.Key(), resp.Results[i].Key, raw)
		assert.Equal(t, c.Key(), string(resp.Results[i].Canonical), raw)
	}
}

func TestReferenceCanonicalizeEdges(t *testing.T) {
	ctx := context.Background()

	resp, err := Reference{}.Canonicalize(ctx, &abi.CanonicalizeRequest{})
	require.NoError(t, err)
	assert.Empty(t, resp.Results)

	_, err = Reference{}.Canonicalize(ctx, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nil request")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = Reference{}.Canonicalize(cancelled, &abi.CanonicalizeRequest{Settings: rawList(`{}`)})
	require.ErrorIs(t, err, context.Canceled)

	// A missing settings object (nil raw message) is refused, not a panic.
	resp, err = Reference{}.Canonicalize(ctx, &abi.CanonicalizeRequest{Settings: []json.RawMessage{nil, json.RawMessage(`null`)}})
	require.NoError(t, err)
	assert.Contains(t, resp.Results[0].Error, "invalid JSON")
	assert.Equal(t, "expected an object, got null", resp.Results[1].Error)
}

func TestReferenceCanonicalizeKeyTooLong(t *testing.T) {
	names := make([]string, 0, 20000)
	for i := range 20000 {
		names = append(names, strings.Repeat("n", 4)+string(rune('a'+i%26))+strings.Repeat("x", i%7)+string(rune('A'+i/26%26))+string(rune('A'+i/676)))
	}
	big, err := json.Marshal(map[string][]string{"excludeTools": names})
	require.NoError(t, err)
	resp, err := Reference{}.Canonicalize(context.Background(), &abi.CanonicalizeRequest{Settings: []json.RawMessage{big, json.RawMessage(`{"trust":true}`)}})
	require.NoError(t, err)
	assert.Contains(t, resp.Results[0].Error, "more than the 65536 bytes a key may hold")
	assert.Empty(t, resp.Results[0].Key)
	assert.Equal(t, `{"trust":true,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}`, resp.Results[1].Key)
	assert.Equal(t, resp.Results[1].Key, string(resp.Results[1].Canonical))
}

func TestReferenceProject(t *testing.T) {
	tools := []string{"read_file", "write_file", "", "Read_File", "search(x)", "delete"}
	prompts := []string{"summarize", "", "write_file", "review"}
	resources := []string{"file:///a", "file:///b", ""}
	allResources := []int{0, 1, 2}
	tests := []struct {
		name     string
		settings string
		tools    []abi.ToolDecision
		prompts  []int
	}{
		{
			name:     "default shows every named tool and prompt",
			settings: `{}`,
			tools:    []abi.ToolDecision{{Index: 0}, {Index: 1}, {Index: 3}, {Index: 4}, {Index: 5}},
			prompts:  []int{0, 2, 3},
		},
		{
			name:     "trust true and alwaysLoad true flag every visible tool",
			settings: `{"trust":true,"alwaysLoadTools":true,"excludeTools":["delete"]}`,
			tools: []abi.ToolDecision{
				{Index: 0, Trust: true, AlwaysLoad: true}, {Index: 1, Trust: true, AlwaysLoad: true},
				{Index: 3, Trust: true, AlwaysLoad: true}, {Index: 4, Trust: true, AlwaysLoad: true},
			},
			prompts: []int{0, 2, 3},
		},
		{
			name:     "trust false and null are not trusted",
			settings: `{"trust":false,"alwaysLoadTools":null,"includeTools":["delete"]}`,
			tools:    []abi.ToolDecision{{Index: 5}},
			prompts:  []int{},
		},
		{
			name:     "empty include hides every tool and prompt",
			settings: `{"includeTools":[],"trust":true}`,
			tools:    []abi.ToolDecision{},
			prompts:  []int{},
		},
		{
			name:     "include cut at paren, names exact",
			settings: `{"includeTools":["read_file(path)","search(x)","review"]}`,
			tools:    []abi.ToolDecision{{Index: 0}},
			prompts:  []int{3},
		},
		{
			name:     "exclude exact, wins over include",
			settings: `{"includeTools":["read_file","write_file","search"],"excludeTools":["write_file","search(x)"]}`,
			tools:    []abi.ToolDecision{{Index: 0}},
			prompts:  []int{},
		},
		{
			name:     "exclude a literal name with parens",
			settings: `{"excludeTools":["search(x)","summarize"]}`,
			tools:    []abi.ToolDecision{{Index: 0}, {Index: 1}, {Index: 3}, {Index: 5}},
			prompts:  []int{2, 3},
		},
		{
			name:     "empty name from (x) never shows the unnamed tool",
			settings: `{"includeTools":["(x)"]}`,
			tools:    []abi.ToolDecision{},
			prompts:  []int{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &abi.ProjectRequest{
				Settings:  json.RawMessage(tt.settings),
				Tools:     append([]string(nil), tools...),
				Prompts:   append([]string(nil), prompts...),
				Resources: append([]string(nil), resources...),
			}
			got, err := Reference{}.Project(context.Background(), req)
			require.NoError(t, err)
			want := &abi.ProjectResponse{Tools: tt.tools, Prompts: tt.prompts, Resources: allResources}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Project mismatch (-want +got):\n%s", diff)
			}
			assert.Equal(t, tools, req.Tools, "request tools untouched")
			assert.Equal(t, prompts, req.Prompts, "request prompts untouched")
		})
	}
}

func TestReferenceProjectEmptySnapshot(t *testing.T) {
	got, err := Reference{}.Project(context.Background(), &abi.ProjectRequest{Settings: json.RawMessage(`{}`)})
	require.NoError(t, err)
	// Lists are empty, never nil, so JSON shows [] like a plugin's output.
	assert.Equal(t, &abi.ProjectResponse{Tools: []abi.ToolDecision{}, Prompts: []int{}, Resources: []int{}}, got)
	wire, err := json.Marshal(got)
	require.NoError(t, err)
	assert.JSONEq(t, `{"tools":[],"prompts":[],"resources":[]}`, string(wire))
}

func TestReferenceProjectRefuses(t *testing.T) {
	ctx := context.Background()
	for _, settings := range []string{
		`{"trust":"false"}`, `{"alwaysLoadTools":1}`, `{"includeTools":"foo"}`,
		`{"includeTools":["a",7]}`, `{"excludeTools":{}}`, `[]`, `null`, `{"trust":true,"trust":true}`, ``,
	} {
		t.Run(settings, func(t *testing.T) {
			resp, err := Reference{}.Project(ctx, &abi.ProjectRequest{
				Settings:  json.RawMessage(settings),
				Tools:     []string{"a"},
				Resources: []string{"r"},
			})
			require.Error(t, err)
			assert.Nil(t, resp)
			assert.Contains(t, err.Error(), "settings refused")
			var se *SettingsError
			assert.True(t, errors.As(err, &se), "error wraps *SettingsError: %v", err)
			assert.ErrorIs(t, err, abi.ErrRefused, "a refusal, not a failure")
			assert.Equal(t, "metakey: project: settings refused: "+se.Error(), err.Error())
		})
	}

	_, err := Reference{}.Project(ctx, nil)
	require.Error(t, err)
	assert.NotErrorIs(t, err, abi.ErrRefused)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = Reference{}.Project(cancelled, &abi.ProjectRequest{Settings: json.RawMessage(`{}`)})
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, abi.ErrRefused)
}

func TestReferenceProjectBatch(t *testing.T) {
	ctx := context.Background()
	req := &abi.ProjectBatchRequest{
		Settings: rawList(`{"includeTools":["a","p"],"trust":true}`, `{"excludeTools":{}}`, `{}`, ``),
		Snapshots: []abi.BatchSnapshot{
			{Tools: []string{"a", "b"}, Prompts: []string{"p", "q"}, Resources: []string{"r"}},
			{Tools: []string{"b", "", "a"}},
		},
		Items: []abi.BatchItem{{Settings: 0, Snapshot: 0}, {Settings: 0, Snapshot: 1}, {Settings: 1, Snapshot: 0}, {Settings: 2, Snapshot: 1}, {Settings: 3, Snapshot: 0}, {Settings: 1, Snapshot: 1}},
	}
	resp, err := Reference{}.ProjectBatch(ctx, req)
	require.NoError(t, err)
	require.NoError(t, abi.ValidateProjectBatch(req, resp))
	require.Len(t, resp.Results, len(req.Items))
	// Item by item, the same answer as Project: the projection, or
	// Project's refusal without the "metakey: " of a Go error.
	for i := range req.Items {
		want, err := Reference{}.Project(ctx, req.ItemRequest(i))
		got := resp.Results[i]
		if err != nil {
			assert.Equal(t, strings.TrimPrefix(err.Error(), "metakey: "), got.Error, "items[%d]", i)
			assert.Nil(t, got.ProjectResponse, "items[%d]", i)
			continue
		}
		assert.Empty(t, got.Error, "items[%d]", i)
		assert.Equal(t, want, got.ProjectResponse, "items[%d]", i)
	}
	assert.Equal(t, &abi.ProjectResponse{
		Tools: []abi.ToolDecision{{Index: 2, Trust: true}}, Prompts: []int{}, Resources: []int{},
	}, resp.Results[1].ProjectResponse)
	assert.Equal(t, "project: settings refused: excludeTools: expected an array of strings or null, got an object", resp.Results[2].Error)
	assert.Equal(t, "project: settings refused: invalid JSON", resp.Results[4].Error[:len("project: settings refused: invalid JSON")])

	_, err = Reference{}.ProjectBatch(ctx, nil)
	require.Error(t, err)
	_, err = Reference{}.ProjectBatch(ctx, &abi.ProjectBatchRequest{Items: []abi.BatchItem{{Settings: 0, Snapshot: 0}}})
	assert.ErrorContains(t, err, "metakey: project_batch: items[0]: settings index 0 out of range [0,0)")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = Reference{}.ProjectBatch(cancelled, req)
	require.ErrorIs(t, err, context.Canceled)
}

func TestReferenceProjectIgnoresAnnotations(t *testing.T) {
	req := &abi.ProjectRequest{
		Settings:        json.RawMessage(`{"trust":true}`),
		Tools:           []string{"a", "b"},
		ToolAnnotations: rawList(`{"destructiveHint":true}`, `null`),
	}
	got, err := Reference{}.Project(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, []abi.ToolDecision{{Index: 0, Trust: true}, {Index: 1, Trust: true}}, got.Tools)
}

func TestReferenceConcurrentUse(t *testing.T) {
	var ref abi.Policy = Reference{}
	req := &abi.ProjectRequest{Settings: json.RawMessage(`{"includeTools":["b","a"]}`), Tools: []string{"a", "b", "c"}}
	creq := &abi.CanonicalizeRequest{Settings: rawList(`{"includeTools":["b","a"]}`)}
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 200 {
				p, err := ref.Project(context.Background(), req)
				assert.NoError(t, err)
				assert.Len(t, p.Tools, 2)
				c, err := ref.Canonicalize(context.Background(), creq)
				assert.NoError(t, err)
				assert.Equal(t, `{"trust":null,"alwaysLoadTools":false,"includeTools":["a","b"],"excludeTools":[]}`, c.Results[0].Key)
			}
		}()
	}
	for range 4 {
		<-done
	}
}

func TestReferenceProjectLongListsAgreeWithVisible(t *testing.T) {
	// Lists past setThreshold are looked up through maps; the answers must
	// not change.
	for _, sizes := range [][2]int{{0, 0}, {setThreshold - 1, setThreshold - 1}, {setThreshold, setThreshold}, {100, 40}} {
		var include, exclude, tools []string
		for i := range sizes[0] {
			include = append(include, fmt.Sprintf("t%d(x)", i*2))
		}
		for i := range sizes[1] {
			exclude = append(exclude, fmt.Sprintf("t%d", i*3))
		}
		for i := range 250 {
			tools = append(tools, fmt.Sprintf("t%d", i))
		}
		tools = append(tools, "", "t0(x)")
		settings, err := json.Marshal(map[string]any{"includeTools": include, "excludeTools": exclude})
		require.NoError(t, err)
		c := mustParse(t, string(settings)).Canonical()
		resp, err := Reference{}.Project(context.Background(), &abi.ProjectRequest{Settings: settings, Tools: tools, Prompts: tools})
		require.NoError(t, err)
		var wantTools []abi.ToolDecision
		var wantPrompts []int
		for i, name := range tools {
			require.Equal(t, oracleVisible(c, name), c.Visible(name), name)
			if c.Visible(name) {
				wantTools = append(wantTools, abi.ToolDecision{Index: i})
				wantPrompts = append(wantPrompts, i)
			}
		}
		if diff := cmp.Diff(wantTools, resp.Tools, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("sizes %v: tools mismatch (-want +got):\n%s", sizes, diff)
		}
		if diff := cmp.Diff(wantPrompts, resp.Prompts, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("sizes %v: prompts mismatch (-want +got):\n%s", sizes, diff)
		}
	}
}
