package view_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/view"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

// renamePolicy shows everything and renames what its settings say:
// {"tools": {"a": {"name": "x", "description": "..."}}, "prompts": {...}}.
// Its key is the settings' bytes; optIn is its handshake's Renames.
type renamePolicy struct {
	optIn bool
}

type renameSettings struct {
	Tools   map[string]abi.Rename `json:"tools"`
	Prompts map[string]abi.Rename `json:"prompts"`
}

func (p *renamePolicy) Handshake() abi.Handshake {
	return abi.Handshake{ABI: abi.Version, Name: "rename", Renames: p.optIn}
}

func (p *renamePolicy) Canonicalize(_ context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	resp := &abi.CanonicalizeResponse{}
	for _, s := range req.Settings {
		resp.Results = append(resp.Results, abi.CanonicalResult{Key: string(s), Canonical: s})
	}
	return resp, nil
}

func (p *renamePolicy) Project(_ context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	var s renameSettings
	if err := json.Unmarshal(req.Settings, &s); err != nil {
		return nil, fmt.Errorf("%w: %v", abi.ErrRefused, err)
	}
	resp := &abi.ProjectResponse{Tools: []abi.ToolDecision{}, Prompts: []int{}, Resources: []int{}}
	for i, n := range req.Tools {
		r := s.Tools[n]
		resp.Tools = append(resp.Tools, abi.ToolDecision{Index: i, Name: r.Name, Description: r.Description})
	}
	renames := make([]abi.Rename, len(req.Prompts))
	for i, n := range req.Prompts {
		resp.Prompts = append(resp.Prompts, i)
		renames[i] = s.Prompts[n]
	}
	resp.PromptRenames = renames
	for i := range req.Resources {
		resp.Resources = append(resp.Resources, i)
	}
	return resp, nil
}

// A renamed tool is a clone under the exposed name, with the new
// description and the upstream's name in its _meta; a renamed prompt
// likewise; the snapshot is untouched; an item not renamed is as before.
func TestProjectRenames(t *testing.T) {
	snap := newSnapshot(1, "a", "b")
	settings := json.RawMessage(`{"tools":{"a":{"name":"x","description":"short"}},"prompts":{"greet":{"name":"hello"},"read":{"description":"reads"}}}`)
	proj, err := view.Project(context.Background(), &renamePolicy{optIn: true}, settings, snap)
	require.NoError(t, err)
	require.Len(t, proj.Tools, 2)
	x := proj.Tools[0]
	assert.Equal(t, "x", x.Name)
	assert.Equal(t, "short", x.Description)
	assert.Equal(t, "a", x.Meta[view.MetaUpstreamName])
	assert.Equal(t, float64(0), x.Meta["upstream/rank"], "the upstream's _meta is kept")
	assert.Same(t, snap.Tools[0].Annotations, x.Annotations, "the rest is shared")
	assert.Equal(t, "a", snap.Tools[0].Name, "the snapshot is untouched")
	assert.Equal(t, "tool a", snap.Tools[0].Description)
	assert.NotContains(t, snap.Tools[0].Meta, view.MetaUpstreamName)
	b := proj.Tools[1]
	assert.Equal(t, "b", b.Name)
	assert.Equal(t, "tool b", b.Description)
	assert.NotContains(t, b.Meta, view.MetaUpstreamName)

	assert.Equal(t, []string{"hello", "read"}, promptNames(proj))
	assert.Equal(t, "greet", proj.Prompts[0].Meta[view.MetaUpstreamName])
	assert.Equal(t, "say hi", proj.Prompts[0].Description)
	assert.NotSame(t, snap.Prompts[1], proj.Prompts[1], "a redescribed prompt is a copy")
	assert.Equal(t, "reads", proj.Prompts[1].Description)
	assert.NotContains(t, proj.Prompts[1].Meta, view.MetaUpstreamName, "not renamed, only redescribed")
	assert.Equal(t, "greet", snap.Prompts[0].Name)
	assert.Nil(t, snap.Prompts[0].Meta)

	// Not renamed: the snapshot's own prompts, as before renames.
	proj, err = view.Project(context.Background(), &renamePolicy{optIn: true}, json.RawMessage(`{}`), snap)
	require.NoError(t, err)
	assert.Same(t, snap.Prompts[0], proj.Prompts[0])
	assert.Equal(t, "a", proj.Tools[0].Name)
	assert.NotContains(t, proj.Tools[0].Meta, view.MetaUpstreamName)

	// A policy that did not opt in fails.
	_, err = view.Project(context.Background(), &renamePolicy{}, settings, snap)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not opt into renames")
}

// Views with different renames do not share a projection (their keys
// differ); views with equal keys do; a change of a rename replaces the
// old name in the registry with the new one; a policy that did not opt
// in fails the view closed.
func TestViewRenames(t *testing.T) {
	ctx := context.Background()
	memo := view.NewMemo()
	counters := &opcount.Counters{}
	newView := func(p abi.Policy, session, settings string) (*view.View, *viewtest.Registry, *view.Attachment) {
		reg := viewtest.NewRegistry()
		v := view.New(view.Config{Session: session, Server: "fs", Registry: reg, Counters: counters, Policy: p, Settings: json.RawMessage(settings), Logger: quiet})
		att, err := v.Attach(memo)
		require.NoError(t, err)
		return v, reg, att
	}
	p := &renamePolicy{optIn: true}
	snap := newSnapshot(1, "a", "b")
	toX := `{"tools":{"a":{"name":"x"}}}`
	v1, reg1, att1 := newView(p, "s1", toX)
	v2, reg2, att2 := newView(p, "s2", toX)
	v3, reg3, att3 := newView(p, "s3", `{"tools":{"a":{"name":"y"}}}`)
	for _, att := range []*view.Attachment{att1, att2, att3} {
		require.NoError(t, att.Apply(ctx, snap))
	}
	assert.Equal(t, []string{"b", "x"}, reg1.ToolNames("fs"))
	assert.Equal(t, []string{"b", "x"}, reg2.ToolNames("fs"))
	assert.Equal(t, []string{"b", "y"}, reg3.ToolNames("fs"))
	assert.Same(t, v1.Applied(), v2.Applied(), "equal keys share one projection")
	assert.NotSame(t, v1.Applied(), v3.Applied())

	// s1 renames a to z: x goes, z comes, b is not sent again.
	before := len(reg1.Ops())
	changed, err := v1.SetSettings(ctx, json.RawMessage(`{"tools":{"a":{"name":"z"}}}`))
	require.NoError(t, err)
	require.True(t, changed)
	assert.Equal(t, []string{"b", "z"}, reg1.ToolNames("fs"))
	assert.Equal(t, "a", reg1.Tool("fs", "z").Meta[view.MetaUpstreamName])
	ops := reg1.Ops()[before:]
	assert.Equal(t, []viewtest.Op{{Method: "DeleteTools", Server: "fs", Keys: []string{"x"}}, {Method: "PutTools", Server: "fs", Keys: []string{"z"}}}, ops)
	assert.Equal(t, []string{"b", "x"}, reg2.ToolNames("fs"), "s2 keeps its view")

	// A policy without the opt-in fails the view closed.
	require.Error(t, v3.SetPolicy(ctx, &renamePolicy{}))
	assert.Empty(t, reg3.ToolNames("fs"))
	require.Error(t, v3.Err())
	assert.Contains(t, v3.Err().Error(), "does not opt into renames")
}
