package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/reconcile"
)

func TestCheckNamesRefusedBindings(t *testing.T) {
	t.Parallel()
	for _, whole := range []bool{false, true} {
		t.Run(fmt.Sprintf("wholeCall=%t", whole), func(t *testing.T) {
			e := newEnv(t, newUpstream("fs", "read"), newUpstream("git", "log"))
			c := newCfg().server("fs").server("git").
				session("alice").session("bob", "overrides", override("git", `{"includeTools":["log"]}`))
			e.apply(c.build(t))
			ctx := context.Background()
			policy := &refusingPolicy{Policy: ref, marker: `"trust":true`, wholeCall: whole}

			// Nothing refused: one call for every distinct settings object.
			require.NoError(t, e.rec.Check(ctx, c.build(t), policy))
			assert.Equal(t, int64(1), policy.calls.Load())

			// bob's override of git and fs for everyone now set trust.
			next := c.clone().server("fs", "trust", true)
			next.Sessions["bob"]["overrides"] = override("git", `{"trust":true}`)
			err := e.rec.Check(ctx, next.build(t), policy)
			require.ErrorIs(t, err, reconcile.ErrSettingsRefused)
			msg := err.Error()
			for _, want := range []string{
				`mcpServers.fs: session "alice", server "fs": the policy refuses the settings: `,
				`mcpServers.fs: session "bob", server "fs": `,
				`sessions.bob.overrides.git over mcpServers.git: session "bob", server "git": `,
				"refused (test)",
			} {
				assert.Contains(t, msg, want)
			}
			assert.NotContains(t, msg, `session "alice", server "git"`)
			assert.Len(t, strings.Split(msg, "\n"), 3, msg)
		})
	}
}

// TestCheckRunningPolicySkipsSettingsInForce: a refusal in force before the
// reload (settings the running policy refuses, unchanged) does not block
// it; the same refusal brought by the reload does.
func TestCheckRunningPolicySkipsSettingsInForce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read"))
	ctx := context.Background()
	_, err := e.rec.SetPolicy(ctx, &refusingPolicy{Policy: ref, marker: `"trust":true`})
	require.NoError(t, err)

	c := newCfg().server("fs").session("alice", "overrides", override("fs", `{"trust":true}`)).session("bob")
	_, _ = e.rec.Apply(ctx, c.build(t)) // alice's view fails closed
	require.NoError(t, e.rec.Check(ctx, c.build(t), nil), "alice's refusal is in force already")
	// Another policy is not asked about alice either (she shows nothing a
	// swap could take away), but about bob, who has a view.
	require.NoError(t, e.rec.Check(ctx, c.build(t), &refusingPolicy{Policy: ref, marker: `"trust":true`}))
	err = e.rec.Check(ctx, c.build(t), failingPolicy{err: fmt.Errorf("%w: nothing goes", abi.ErrRefused)})
	require.ErrorIs(t, err, reconcile.ErrSettingsRefused)
	assert.Contains(t, err.Error(), `session "bob"`)
	assert.NotContains(t, err.Error(), `session "alice"`)

	next := c.clone()
	next.Sessions["bob"]["overrides"] = override("fs", `{"trust":true}`)
	err = e.rec.Check(ctx, next.build(t), nil)
	require.ErrorIs(t, err, reconcile.ErrSettingsRefused)
	assert.Contains(t, err.Error(), `session "bob"`)
	assert.NotContains(t, err.Error(), `session "alice"`)

	// An overlay the running policy refuses; a call failing otherwise is
	// returned, naming the bindings it was for.
	srv := &config.Server{Name: "fs", Command: "/usr/bin/fs-server", Settings: config.Settings{Trust: raw("true")}}
	require.ErrorIs(t, e.rec.CheckOverlay(ctx, "bob", srv), reconcile.ErrSettingsRefused)
	boom := errors.New("boom")
	err = e.rec.Check(ctx, next.build(t), failingPolicy{err: boom})
	require.ErrorIs(t, err, boom)
	assert.NotErrorIs(t, err, reconcile.ErrSettingsRefused)
	// The failed call is located as a refusal would be: the operator
	// learns which settings the policy failed on.
	assert.Contains(t, err.Error(), `sessions.bob.overrides.fs over mcpServers.fs (session "bob", server "fs")`)
	assert.NotContains(t, err.Error(), `session "alice"`)
}

// failingPolicy fails every canonicalize call with err.
type failingPolicy struct {
	metakey.Reference
	err error
}

func (f failingPolicy) Canonicalize(context.Context, *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	return nil, f.err
}

// nilPolicy answers canonicalize with neither a response nor an error.
type nilPolicy struct{ metakey.Reference }

func (nilPolicy) Canonicalize(context.Context, *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	return nil, nil
}

// TestCheckPolicyWithoutResponse: a policy answering nothing is a failed
// call, not a panic.
func TestCheckPolicyWithoutResponse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read"))
	c := newCfg().server("fs").session("alice")
	err := e.rec.Check(context.Background(), c.build(t), nilPolicy{})
	require.ErrorContains(t, err, "policy returned no response")
	assert.NotErrorIs(t, err, reconcile.ErrSettingsRefused)
}

// TestCheckDeleteOverlay: the settings of the file under an overlay are
// not asked about while the overlay decides (a reload brings refused ones
// there); removing the overlay would bring them in force, so
// CheckDeleteOverlay asks, naming the file's JSON path. Settings the
// binding has now, no overlay, or no file binding to come back are not
// asked about.
func TestCheckDeleteOverlay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read"), newUpstream("extra", "e1"))
	ctx := context.Background()
	_, err := e.rec.SetPolicy(ctx, &refusingPolicy{Policy: ref, marker: `"trust":true`})
	require.NoError(t, err)
	c := newCfg().server("fs").session("alice").session("bob")
	e.apply(c.build(t))

	srv := &config.Server{Name: "fs", Command: "/usr/bin/fs-server", Pooled: true, Settings: config.Settings{IncludeTools: raw(`["read"]`)}}
	_, err = e.rec.PutOverlay(ctx, "alice", srv)
	require.NoError(t, err)
	require.NoError(t, e.rec.CheckDeleteOverlay(ctx, "alice", "fs"), "the file's settings are accepted")
	require.NoError(t, e.rec.CheckDeleteOverlay(ctx, "bob", "fs"), "no overlay: DeleteOverlay says so")

	next := c.clone()
	next.Sessions["alice"]["overrides"] = override("fs", `{"trust":true}`)
	require.NoError(t, e.rec.Check(ctx, next.build(t), nil), "the overlay decides alice's settings")
	e.apply(next.build(t))
	err = e.rec.CheckDeleteOverlay(ctx, "alice", "fs")
	require.ErrorIs(t, err, reconcile.ErrSettingsRefused)
	assert.Contains(t, err.Error(), `sessions.alice.overrides.fs over mcpServers.fs: session "alice", server "fs": the policy refuses the settings: `)
	assert.Equal(t, []string{"read"}, e.reg("alice").ToolNames("fs"), "nothing is touched")

	// A server the file does not have: the binding goes, nothing comes back.
	extra := &config.Server{Name: "extra", Command: "/usr/bin/fs-server", Pooled: true, Settings: config.Settings{Trust: raw("false")}}
	_, err = e.rec.PutOverlay(ctx, "alice", extra)
	require.NoError(t, err)
	require.NoError(t, e.rec.CheckDeleteOverlay(ctx, "alice", "extra"))
}

// trappingPolicy fails every canonicalize call that carries settings
// holding marker, as a plugin that traps on them does, and records the
// settings it is asked about.
type trappingPolicy struct {
	abi.Policy
	marker string

	mu    sync.Mutex
	asked []string
}

func (p *trappingPolicy) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	p.mu.Lock()
	for _, s := range req.Settings {
		p.asked = append(p.asked, string(s))
	}
	p.mu.Unlock()
	for _, s := range req.Settings {
		if strings.Contains(string(s), p.marker) {
			return nil, errors.New("plugin trapped (test)")
		}
	}
	return p.Policy.Canonicalize(ctx, req)
}

// askedAbout returns how many settings objects holding s the policy was
// asked about, and forgets them all.
func (p *trappingPolicy) askedAbout(s string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, a := range p.asked {
		if strings.Contains(a, s) {
			n++
		}
	}
	p.asked = nil
	return n
}

// TestApplyDoesNotAskAgainAboutSettingsItLeaves: a reload that moves a
// view away from settings the policy failed on (a trap, or its timeout)
// does not send those settings to the policy again: it would only fail
// again, and a plugin that loops would hold the reload for its timeout.
func TestApplyDoesNotAskAgainAboutSettingsItLeaves(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read", "write"))
	ctx := context.Background()
	p := &trappingPolicy{Policy: ref, marker: "trap-me"}
	_, err := e.rec.SetPolicy(ctx, p)
	require.NoError(t, err)

	bad := newCfg().server("fs").session("alice", "overrides", override("fs", `{"includeTools":["trap-me"]}`)).session("bob")
	_, err = e.rec.Apply(ctx, bad.build(t))
	require.Error(t, err, "alice's view fails closed")
	require.NotZero(t, p.askedAbout("trap-me"))

	good := bad.clone()
	good.Sessions["alice"]["overrides"] = override("fs", `{"includeTools":["read"]}`)
	_, err = e.rec.Apply(ctx, good.build(t))
	require.NoError(t, err)
	assert.Zero(t, p.askedAbout("trap-me"), "the settings alice left were sent to the policy again")
	assert.Equal(t, []string{"read"}, e.reg("alice").ToolNames("fs"))
}

// TestUnavailableSaysWhyForTheSessionsOwnServers: Unavailable names the state of a
// session's binding that shows nothing, and says nothing of a healthy
// binding or of a server the session does not use.
func TestUnavailableSaysWhyForTheSessionsOwnServers(t *testing.T) {
	t.Parallel()
	fs := newUpstream("fs", "read")
	e := newEnv(t, fs, newUpstream("git", "log"))
	ctx := context.Background()
	_, err := e.rec.SetPolicy(ctx, &refusingPolicy{Policy: ref})
	require.NoError(t, err)
	c := newCfg().server("fs").server("git").
		session("alice", "servers", []string{"fs", "git"}, "overrides", override("git", `{"includeTools":["refuse-me"]}`)).
		session("bob", "servers", []string{"fs"})
	_, _ = e.rec.Apply(ctx, c.build(t))

	assert.Empty(t, e.rec.Unavailable("alice", "fs"), "healthy")
	assert.Equal(t, "unavailable to this session: the policy could not compute its view", e.rec.Unavailable("alice", "git"))
	assert.Empty(t, e.rec.Unavailable("bob", "git"), "not bob's server")
	assert.Empty(t, e.rec.Unavailable("nobody", "fs"))

	e.setFailing("fs", errors.New("no route (test)"))
	fs.KillAll()
	require.Eventually(t, func() bool { return e.rec.Unavailable("bob", "fs") != "" }, mcptest.EventWithin, 10*time.Millisecond)
	assert.Contains(t, []string{"unavailable: its connection failed", "reconnecting; try again"}, e.rec.Unavailable("bob", "fs"))
}

// toolShy is the default policy, except that projecting a snapshot with the
// tool named tool fails: with a plain error (a trap, say) or, with refuse,
// a refusal. It projects one item per call (batchShy batches).
type toolShy struct {
	tool     string
	refuse   bool
	projects atomic.Int64
}

func (p *toolShy) Handshake() abi.Handshake { return ref.Handshake() }

func (p *toolShy) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	return ref.Canonicalize(ctx, req)
}

func (p *toolShy) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	p.projects.Add(1)
	if slices.Contains(req.Tools, p.tool) {
		if p.refuse {
			return nil, fmt.Errorf("%w: not %s (test)", abi.ErrRefused, p.tool)
		}
		return nil, fmt.Errorf("plugin trapped on %s (test)", p.tool)
	}
	return ref.Project(ctx, req)
}

// batchShy is toolShy with a batch call, which fails as a whole when a
// snapshot has the tool (a trap), or refuses its items (refuse).
type batchShy struct{ *toolShy }

func (p batchShy) ProjectBatch(ctx context.Context, req *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error) {
	if p.refuse { // refused items, in an answer
		return abi.ProjectAll(ctx, p.toolShy, req)
	}
	for _, s := range req.Snapshots {
		if slices.Contains(s.Tools, p.tool) {
			return nil, fmt.Errorf("plugin trapped on %s (test)", p.tool)
		}
	}
	return ref.ProjectBatch(ctx, req)
}

// TestCheckSwapTriesLiveProjections: a policy swap is checked on what the
// bindings see now, not only on their settings: a new policy whose
// projection of a live snapshot fails (or is refused) would blank the
// sessions of that server, so Check reports it, naming them; a policy
// that projects every live snapshot passes, and the running policy is not
// asked to project at all.
func TestCheckSwapTriesLiveProjections(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read"), newUpstream("git", "log"))
	c := newCfg().server("fs").server("git").session("alice").session("bob", "servers", []string{"fs"})
	e.apply(c.build(t))
	ctx := context.Background()

	for _, batch := range []bool{false, true} {
		shy := &toolShy{tool: "log"}
		var p abi.Policy = shy
		if batch {
			p = batchShy{shy}
		}
		err := e.rec.Check(ctx, c.build(t), p)
		require.Error(t, err, "batch=%t", batch)
		assert.NotErrorIs(t, err, reconcile.ErrSettingsRefused)
		assert.Equal(t, `session "alice", server "git": projecting what it sees now: plugin trapped on log (test)`, err.Error(), "batch=%t", batch)

		shy.refuse = true
		err = e.rec.Check(ctx, c.build(t), p)
		require.ErrorIs(t, err, reconcile.ErrSettingsRefused, "batch=%t", batch)
		assert.Contains(t, err.Error(), `mcpServers.git: session "alice", server "git": the policy refuses the settings: projecting what it sees now: `)
		assert.NotContains(t, err.Error(), `server "fs"`)
	}

	fine := &toolShy{tool: "nothing-has-it"}
	require.NoError(t, e.rec.Check(ctx, c.build(t), fine))
	assert.Equal(t, int64(2), fine.projects.Load(), "one projection per distinct (settings, snapshot)")

	running := &toolShy{tool: "log"}
	_, err := e.rec.SetPolicy(ctx, running)
	require.Error(t, err, "the swap Check refused fails git's view closed")
	running.projects.Store(0)
	require.NoError(t, e.rec.Check(ctx, c.build(t), nil))
	assert.Zero(t, running.projects.Load(), "a reload's check asks the running policy for keys only")
}
