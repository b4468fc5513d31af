package reconcile_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/metakey"
)

// closablePolicy is the reference policy that counts the calls it gets
// once closed is set.
type closablePolicy struct {
	metakey.Reference
	closed atomic.Bool
	after  atomic.Int64
}

func (p *closablePolicy) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	if p.closed.Load() {
		p.after.Add(1)
	}
	return p.Reference.Canonicalize(ctx, req)
}

func (p *closablePolicy) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	if p.closed.Load() {
		p.after.Add(1)
	}
	return p.Reference.Project(ctx, req)
}

// TestSetPolicyForLeavesNoViewOnTheOldPolicy: SetPolicyFor leaves the
// views its config drops on the old policy, for the Apply that follows to
// release; the daemon closes the old policy after that Apply. Every kind
// of dropped view (a removed session, a removed server with a session's
// overlay of it, a server an override disables) is gone then, and a
// binding whose transport change failed serves under the new policy:
// tool list changes afterwards reach no view of the old policy.
func TestSetPolicyForLeavesNoViewOnTheOldPolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read", "write"), newUpstream("extra", "e1", "e2"), newUpstream("other", "o1"))
	c1 := newCfg().server("fs").server("extra").server("other").
		session("alice").session("bob").session("carol", "servers", []string{"fs"})
	old := &closablePolicy{}
	_, err := e.rec.SetPolicyFor(context.Background(), old, c1.build(t))
	require.NoError(t, err)
	e.apply(c1.build(t))
	_, err = e.rec.PutOverlay(context.Background(), "bob", c1.build(t).Servers["extra"].Clone())
	require.NoError(t, err)

	// carol and extra go, alice's other is disabled, fs changes transport
	// and its new connection cannot be made.
	c2 := newCfg().server("fs", "args", []string{"--variant", "1"}).server("other").
		session("alice", "overrides", override("other", `{"disabled":true}`)).session("bob")
	_, err = e.rec.SetPolicyFor(context.Background(), altPolicy{}, c2.build(t))
	require.NoError(t, err)
	e.setFailing("fs", context.DeadlineExceeded)
	_, err = e.rec.Apply(context.Background(), c2.build(t))
	require.Error(t, err, "fs's transport change fails")
	e.setFailing("fs", nil)
	old.closed.Store(true)

	for _, u := range e.ups {
		u.AddTool("zz")
	}
	e.waitCaughtUp()
	assert.Zero(t, old.after.Load(), "policy calls after the old policy was closed")
	assert.Equal(t, []string{"read", "zz"}, e.reg("alice").ToolNames("fs"), "the running fs connection serves under the new policy")
	assert.Empty(t, e.reg("alice").ToolNames("other"))
	assert.Equal(t, []string{"o1", "zz"}, e.reg("bob").ToolNames("other"))
	assert.Empty(t, e.reg("bob").ToolNames("extra"))
	assert.Nil(t, e.rec.Handle("carol", "fs"))
}
