package session_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/session"
	"github.com/wasmhost/wasmhost/view"
)

// noResources is the default policy, except that a session sees no
// resource at all: what a custom policy that hides resources answers.
type noResources struct{ metakey.Reference }

func (p noResources) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	resp, err := p.Reference.Project(ctx, req)
	if resp != nil {
		resp.Resources = nil
	}
	return resp, err
}

// TestIsolationHiddenResourceNotReadThroughTemplate: a resource the policy
// hides is not read, subscribed to or completed through a resource
// template of its server that matches its URI: such a template is hidden
// with it.
func TestIsolationHiddenResourceNotReadThroughTemplate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var h *pool.Handle
	ep := session.New(session.Options{Name: "alice", Logger: quiet, Upstream: func(s string) session.Target {
		if s != "demo" || h == nil {
			return session.Target{}
		}
		return session.Target{Conn: h.Conn(), Subscriptions: h}
	}})
	v := view.New(view.Config{Session: "alice", Server: "demo", Registry: ep, Counters: f.counters, Policy: noResources{}, Settings: json.RawMessage(`{}`), Logger: quiet})
	var err error
	h, err = f.pool.Acquire(t.Context(), pool.Spec{Name: "demo", Command: "in-memory", Pooled: true}, v)
	require.NoError(t, err)
	cs := connectServer(t, ep.Server(), legacy) // subscribe answers at once

	require.Empty(t, ep.Resources(), "the policy hides every resource")
	res, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "demo://notes/welcome"})
	if err == nil {
		t.Logf("hidden resource read through the template: %q", res.Contents[0].Text)
	}
	requireResourceNotFound(t, err, "demo://notes/welcome")
	requireResourceNotFound(t, cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: "demo://notes/welcome"}), "demo://notes/welcome")
	_, err = cs.Complete(t.Context(), &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: "demo://notes/{name}"}, Argument: mcp.CompleteParamsArgument{Name: "name", Value: "w"}})
	requireUnknown(t, err, "resource", "demo://notes/{name}")
}
