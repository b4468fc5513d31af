package reconcile_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/view"
)

var ref = metakey.Reference{}

// twoSessions is the config most tests start from: server fs (pooled)
// used by alice (trusted) and bob (only read and write).
func twoSessions() *cfg {
	return newCfg().
		server("fs", "trust", true).
		session("alice").
		session("bob", "overrides", override("fs", `{"trust":null,"includeTools":["read","write"]}`))
}

func TestApplyAcquiresAndProjects(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read", "write", "list"))
	c := twoSessions().build(t)
	before := e.snap()
	sum := e.apply(c)
	d := e.delta(before)
	assert.Equal(t, int64(1), d.Connects, "one pooled transport for both sessions")
	assert.Equal(t, int64(2), d.Acquires)
	assert.Equal(t, 2, sum.Acquired)
	assert.Equal(t, 1, sum.TransportsStarted)
	assert.Equal(t, []string{"alice", "bob"}, sum.Changed)
	e.requireProjected(c, ref)
	assert.Equal(t, []string{"list", "read", "write"}, e.reg("alice").ToolNames("fs"))
	assert.Equal(t, []string{"read", "write"}, e.reg("bob").ToolNames("fs"))
	assert.Equal(t, true, e.reg("alice").Tool("fs", "read").Meta[view.MetaTrust])
	assert.Equal(t, false, e.reg("bob").Tool("fs", "read").Meta[view.MetaTrust])
	assert.Same(t, e.handle("alice", "fs").Entry(), e.handle("bob", "fs").Entry())
	e.requireRefsMatch()

	// Applying the same config again does nothing at all.
	before = e.snap()
	sum = e.apply(c)
	d = e.delta(before)
	assert.Equal(t, opcount.Values{}, d, "byte-identical settings on the same transports: no refresh, no policy call")
	assert.Empty(t, sum.Changed)
	assert.Equal(t, 1, sum.TransportsReused)
	assert.Equal(t, 0, sum.Refreshed)
	assert.Equal(t, 1, e.rec.State().Sessions[0].Servers[0].Prompts)
}

func TestApplyPooledRefresh(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read", "write", "list"))
	e.apply(twoSessions().build(t))
	alice, bob := e.handle("alice", "fs"), e.handle("bob", "fs")
	aliceOps := e.reg("alice").OpCount()

	// Metadata-only change in bob's override: a refresh, not a reconnect.
	next := twoSessions()
	next.session("bob", "overrides", override("fs", `{"trust":null,"includeTools":["read","list"],"alwaysLoadTools":true}`))
	c := next.build(t)
	before := e.snap()
	sum := e.apply(c)
	d := e.delta(before)
	assert.Zero(t, d.Connects)
	assert.Zero(t, d.Disconnects)
	assert.Zero(t, d.Acquires)
	assert.Zero(t, d.Releases)
	assert.Equal(t, int64(1), d.Replays, "only bob's view replays")
	assert.Equal(t, int64(2), d.RegistryOps, "bob: delete write, put list and read with alwaysLoad")
	assert.Equal(t, []string{"bob"}, sum.Changed)
	assert.Equal(t, 1, sum.TransportsReused)
	assert.Equal(t, aliceOps, e.reg("alice").OpCount())
	assert.Same(t, alice, e.handle("alice", "fs"))
	assert.Same(t, bob, e.handle("bob", "fs"))
	assert.Equal(t, true, e.reg("bob").Tool("fs", "list").Meta[view.MetaAlwaysLoad])
	assert.Equal(t, false, e.reg("alice").Tool("fs", "list").Meta[view.MetaAlwaysLoad], "per-session alwaysLoadTools")
	e.requireProjected(c, ref)
	e.requireRefsMatch()
}

func TestApplyTransportChange(t *testing.T) {
	t.Parallel()
	up := newUpstream("fs", "read", "write", "list")
	e := newEnv(t, up)
	e.apply(twoSessions().build(t))
	oldAlice, oldBob := e.handle("alice", "fs"), e.handle("bob", "fs")

	next := twoSessions()
	next.server("fs", "trust", true, "args", []string{"--root", "/other"})
	c := next.build(t)
	before := e.snap()
	sum := e.apply(c)
	d := e.delta(before)
	assert.Equal(t, int64(1), d.Connects)
	assert.Equal(t, int64(1), d.Disconnects)
	assert.Equal(t, int64(2), d.Releases)
	assert.Equal(t, int64(2), d.Acquires)
	assert.Equal(t, 2, sum.Acquired)
	assert.Equal(t, 2, sum.Released)
	assert.Equal(t, 1, sum.TransportsStarted)
	assert.Equal(t, 1, sum.TransportsStopped)
	assert.Zero(t, sum.TransportsReused)
	assert.True(t, oldAlice.Released())
	assert.True(t, oldBob.Released())
	want := reconcile.SpecOf(c.Servers["fs"]).Fingerprint()
	assert.Equal(t, want, e.handle("alice", "fs").Identity())
	assert.NotEqual(t, oldAlice.Identity(), want)
	assert.Equal(t, 2, up.Dials())
	e.requireProjected(c, ref)
	e.requireRefsMatch()
}

func TestApplyUnpooledIdentity(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read", "write", "list"))
	base := twoSessions()
	base.server("fs", "trust", true, "pooled", false)
	c := base.build(t)
	before := e.snap()
	e.apply(c)
	assert.Equal(t, int64(2), e.delta(before).Connects, "one connection per session")
	alice, bob := e.handle("alice", "fs"), e.handle("bob", "fs")
	fp := reconcile.SpecOf(c.Servers["fs"]).Fingerprint()
	for _, h := range []*pool.Handle{alice, bob} {
		assert.True(t, strings.HasPrefix(h.ID(), "fs::unpooled-"), h.ID())
		assert.NotEqual(t, fp, h.ID(), "the lifecycle id is not the fingerprint")
		assert.Equal(t, fp, h.Identity(), "the captured identity is")
	}

	for _, tc := range []struct {
		name     string
		settings string
		ops      int64
	}{
		{"metadata-only change", `{"trust":false,"includeTools":["list"]}`, 2},
		{"canonical-equivalent change", `{"trust":false,"includeTools":["list(x)","list"],"excludeTools":[]}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := base.clone()
			next.session("bob", "overrides", override("fs", tc.settings))
			c := next.build(t)
			before := e.snap()
			e.apply(c)
			d := e.delta(before)
			assert.Zero(t, d.Connects, "no replacement")
			assert.Zero(t, d.Disconnects)
			assert.Zero(t, d.Acquires)
			assert.Equal(t, tc.ops, d.RegistryOps)
			assert.Same(t, alice, e.handle("alice", "fs"))
			assert.Same(t, bob, e.handle("bob", "fs"))
			e.requireProjected(c, ref)
			e.requireRefsMatch()
		})
	}
}

// TestApplyEquivalentFilterNormalization: settings that differ in bytes but
// not in meaning change nothing and call no policy, whether the reload
// trusts the bindings (the want alone settles each, the view keeps bytes of
// the same meaning) or not (after a failure anywhere, each view is checked
// and adopts the new bytes); either way a later policy that tells the two
// forms apart keys the view by the new bytes.
func TestApplyEquivalentFilterNormalization(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, from, to string }{
		{"include order, duplicates and (args)", `{"includeTools":["b","a","a"]}`, `{"includeTools":["a","b(x)"]}`},
		{"include (args) only", `{"includeTools":["read(path)","write"]}`, `{"includeTools":["write(a)(b)","read"]}`},
		{"exclude missing versus empty", `{}`, `{"excludeTools":[]}`},
		{"exclude null versus empty", `{"excludeTools":null}`, `{"excludeTools":[]}`},
		{"exclude order and duplicates", `{"excludeTools":["b","a","b"]}`, `{"excludeTools":["a","b"]}`},
		{"alwaysLoadTools missing versus false", `{}`, `{"alwaysLoadTools":false}`},
		{"alwaysLoadTools null versus false", `{"alwaysLoadTools":null}`, `{"alwaysLoadTools":false}`},
		{"trust missing versus null", `{}`, `{"trust":null}`},
		{"include null versus missing", `{"includeTools":null}`, `{}`},
	} {
		for _, trusted := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/trusted=%t", tc.name, trusted), func(t *testing.T) {
				e := newEnv(t, newUpstream("fs", "a", "b", "read", "write"), newUpstream("git", "a", "read"))
				mk := func(settings string) *config.Config {
					return newCfg().server("fs").server("git").
						session("alice", "overrides", map[string]any{"fs": raw(settings), "git": raw(settings)}).
						session("bob", "overrides", override("fs", settings)).build(t)
				}
				e.apply(mk(tc.from))
				h := e.handle("alice", "fs")
				key := view.Of(h).Key()
				from := string(view.Of(h).Settings())
				if !trusted {
					// A failure in the background (here, only counted):
					// the next reload checks every binding.
					e.counters.Failures.Add(1)
				}
				before := e.snap()
				sum := e.apply(mk(tc.to))
				d := e.delta(before)
				assert.Zero(t, d.RegistryOps)
				assert.Zero(t, d.Replays)
				assert.Zero(t, d.Connects)
				assert.Zero(t, d.Acquires)
				assert.Empty(t, sum.Changed)
				assert.Same(t, h, e.handle("alice", "fs"))
				assert.Equal(t, key, view.Of(h).Key())
				assert.Equal(t, 3, sum.Refreshed)
				assert.Equal(t, int64(3), d.Refreshes)
				assert.Zero(t, d.PolicyCalls, "no view calls the policy")
				want, _ := mk(tc.to).Sessions["alice"].EffectiveSettings("fs")
				if trusted {
					assert.Equal(t, from, string(view.Of(h).Settings()), "the view keeps bytes of the same meaning")
				} else {
					assert.Equal(t, string(want), string(view.Of(h).Settings()), "the view adopts the new bytes")
				}

				// The same config again: nothing to do.
				sum = e.apply(mk(tc.to))
				assert.Zero(t, sum.Refreshed)

				// The binding holds the new bytes, so a policy that tells
				// the two forms apart keys the view by them.
				_, err := e.rec.SetPolicy(context.Background(), bytesPolicy{})
				require.NoError(t, err)
				for _, session := range []string{"alice", "bob"} {
					v := view.Of(e.handle(session, "fs"))
					assert.Equal(t, "bytes:"+string(want), v.Key(), session)
					assert.Equal(t, string(want), string(v.Settings()), session)
				}
				e.requireProjected(mk(tc.to), ref)

				// And back to the first form, now apart from the second.
				sum = e.apply(mk(tc.from))
				assert.Equal(t, 3, sum.Refreshed)
				assert.Equal(t, "bytes:"+tc.from, view.Of(h).Key())
			})
		}
	}
}

// TestApplyAfterEquivalentReload: bindings settled by their wants alone
// (a trusted reload to settings of the same meaning, their views keeping
// the old bytes) follow every later change as if their views held the new
// bytes: a change of meaning, a change back, a background failure repaired
// by the next reload, a teardown, an overlay put and deleted.
func TestApplyAfterEquivalentReload(t *testing.T) {
	t.Parallel()
	up := newUpstream("fs", "a", "b", "c")
	e := newEnv(t, up)
	fail := new(atomic.Bool)
	_, err := e.rec.SetPolicy(context.Background(), togglePolicy{ref, fail})
	require.NoError(t, err)
	mk := func(settings string) *config.Config {
		return newCfg().server("fs").
			session("alice", "overrides", override("fs", settings)).
			session("bob", "overrides", override("fs", settings)).build(t)
	}
	const (
		form1 = `{"includeTools":["b","a","a"]}`
		form2 = `{"includeTools":["a","b(x)"]}`
		other = `{"includeTools":["a"]}`
	)
	e.apply(mk(form1))
	h := e.handle("alice", "fs")
	adopt := func(settings string, n int) {
		t.Helper()
		before := e.snap()
		sum := e.apply(mk(settings))
		require.Equal(t, n, sum.Refreshed)
		require.Equal(t, opcount.Values{Refreshes: int64(n)}, e.delta(before), "adopted by the wants alone")
	}
	adopt(form2, 2)
	require.Equal(t, form1, string(view.Of(h).Settings()), "the view keeps bytes of the same meaning")

	// Another meaning: refreshed on the same handle.
	sum := e.apply(mk(other))
	assert.Equal(t, 2, sum.Refreshed)
	assert.Equal(t, []string{"alice", "bob"}, sum.Changed)
	assert.Same(t, h, e.handle("alice", "fs"))
	assert.Equal(t, other, string(view.Of(h).Settings()))
	e.requireProjected(mk(other), ref)

	// Back, and to the first form again: the view holds form2's bytes
	// while the config says form1's.
	e.apply(mk(form2))
	adopt(form1, 2)
	e.requireProjected(mk(form1), ref)
	require.Equal(t, form2, string(view.Of(h).Settings()))

	// A failure in the background: the next reload, to yet another form,
	// checks every binding and repairs the failed view with the new bytes.
	fail.Store(true)
	up.AddTool("d")
	require.Eventually(t, func() bool { return view.Of(h).Err() != nil }, mcptest.EventWithin, 5*time.Millisecond)
	fail.Store(false)
	sum = e.apply(mk(form2))
	assert.Equal(t, 2, sum.Refreshed)
	assert.NoError(t, view.Of(h).Err())
	assert.Equal(t, form2, string(view.Of(h).Settings()), "repaired with the desired bytes")
	assert.Equal(t, []string{"a", "b"}, e.reg("alice").ToolNames("fs"))
	e.requireProjected(mk(form2), ref)

	// A teardown and an overlay acquire or refresh with the desired bytes.
	adopt(form1, 2)
	require.NoError(t, e.rec.Teardown(context.Background(), "alice", "fs"))
	assert.Equal(t, form1, string(view.Of(e.handle("alice", "fs")).Settings()))
	adopt(form2, 2)
	srv := mk(form2).Servers["fs"].Clone()
	srv.Settings.IncludeTools = raw(`["c"]`)
	_, err = e.rec.PutOverlay(context.Background(), "bob", srv)
	require.NoError(t, err)
	assert.Equal(t, []string{"c"}, e.reg("bob").ToolNames("fs"))
	adopt(form1, 1) // bob's overlay is desired, not the file's form
	_, err = e.rec.DeleteOverlay(context.Background(), "bob", "fs")
	require.NoError(t, err)
	assert.Equal(t, form1, string(view.Of(e.handle("bob", "fs")).Settings()))
	e.requireProjected(mk(form1), ref)
	e.requireRefsMatch()
}

func TestApplyAbsentVersusEmptyInclude(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read", "write"))
	mk := func(settings string) *config.Config {
		return newCfg().server("fs").session("alice", "overrides", override("fs", settings)).build(t)
	}
	reg := e.reg("alice")

	e.apply(mk(`{}`))
	assert.Equal(t, []string{"read", "write"}, reg.ToolNames("fs"), "absent: every tool")
	assert.Equal(t, []string{"greet"}, reg.PromptNames("fs"))

	sum := e.apply(mk(`{"includeTools":[]}`))
	assert.Empty(t, reg.ToolNames("fs"), "[]: no tool")
	assert.Empty(t, reg.PromptNames("fs"), "[]: no prompt")
	assert.Equal(t, []string{"file:///fs"}, reg.ResourceURIs("fs"), "resources are never filtered")
	assert.Equal(t, []string{"alice"}, sum.Changed)

	e.apply(mk(`{"includeTools":null}`))
	assert.Equal(t, []string{"read", "write"}, reg.ToolNames("fs"), "null: every tool again")
}

func TestApplyInPlaceConfigMutation(t *testing.T) {
	t.Parallel()
	up := newUpstream("fs", "aa", "bb")
	e := newEnv(t, up)
	c := newCfg().server("fs", "includeTools", []string{"aa"}).session("alice").build(t)
	e.apply(c)
	reg := e.reg("alice")
	h := e.handle("alice", "fs")
	require.Equal(t, []string{"aa"}, reg.ToolNames("fs"))

	// Same *config.Config, settings bytes edited in place.
	inc := c.Servers["fs"].Settings.IncludeTools
	require.Equal(t, `["aa"]`, string(inc))
	copy(inc, `["bb"]`)
	before := e.snap()
	sum := e.apply(c)
	assert.Equal(t, []string{"bb"}, reg.ToolNames("fs"), "the captured key is compared, not the config reference")
	assert.Equal(t, []string{"alice"}, sum.Changed)
	assert.Zero(t, e.delta(before).Connects)
	assert.Same(t, h, e.handle("alice", "fs"))

	// Transport slice edited in place: the entry's captured identity no
	// longer matches, so the binding is reacquired.
	oldIdentity := h.Identity()
	c.Servers["fs"].Args[1] = "/elsewhere"
	assert.Equal(t, oldIdentity, h.Identity(), "mutating the config does not move the captured identity")
	before = e.snap()
	e.apply(c)
	d := e.delta(before)
	assert.Equal(t, int64(1), d.Connects)
	assert.Equal(t, int64(1), d.Releases)
	assert.True(t, h.Released())
	assert.Equal(t, reconcile.SpecOf(c.Servers["fs"]).Fingerprint(), e.handle("alice", "fs").Identity())
	e.requireProjected(c, ref)
}

func TestApplyDisabledServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read", "write"), newUpstream("git", "log"))
	base := twoSessions()
	base.server("git")
	e.apply(base.build(t))
	require.Len(t, e.pool.Entries(), 2)

	// Disabled for bob only, by an override.
	next := base.clone()
	next.session("bob", "overrides", map[string]any{"fs": map[string]any{"disabled": true}})
	c := next.build(t)
	before := e.snap()
	sum := e.apply(c)
	d := e.delta(before)
	assert.Equal(t, int64(1), d.Releases)
	assert.Zero(t, d.Disconnects, "alice still holds the transport")
	assert.Equal(t, 1, sum.Released)
	assert.Nil(t, e.rec.Handle("bob", "fs"))
	assert.Empty(t, e.reg("bob").ToolNames("fs"))
	assert.Equal(t, []string{"bob"}, sum.Changed)
	e.requireProjected(c, ref)
	e.requireRefsMatch()

	// Disabled for everyone: the transport closes.
	next.server("fs", "disabled", true)
	c = next.build(t)
	before = e.snap()
	e.apply(c)
	d = e.delta(before)
	assert.Equal(t, int64(1), d.Releases)
	assert.Equal(t, int64(1), d.Disconnects)
	assert.Nil(t, e.rec.Handle("alice", "fs"))
	e.requireProjected(c, ref)
	e.requireRefsMatch()
	require.Len(t, e.pool.Entries(), 1)
}

func TestApplyRemovedSessionAndServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read"), newUpstream("git", "log"))
	base := twoSessions()
	base.server("git")
	e.apply(base.build(t))
	bobFS, bobGit := e.handle("bob", "fs"), e.handle("bob", "git")

	// Bob goes away: all his handles are released.
	next := base.clone()
	delete(next.Sessions, "bob")
	c := next.build(t)
	sum := e.apply(c)
	assert.Equal(t, 2, sum.Released)
	assert.True(t, bobFS.Released())
	assert.True(t, bobGit.Released())
	assert.Empty(t, e.reg("bob").Servers())
	assert.Equal(t, []string{"bob"}, sum.Changed)
	assert.Equal(t, []string{"alice"}, e.rec.Sessions())
	assert.Nil(t, e.rec.Bindings("bob"))
	e.requireProjected(c, ref)
	e.requireRefsMatch()

	// git leaves alice's server list, then leaves the config.
	next.session("alice", "servers", []string{"fs"})
	c = next.build(t)
	before := e.snap()
	e.apply(c)
	assert.Equal(t, int64(1), e.delta(before).Disconnects)
	e.requireProjected(c, ref)
	delete(next.Servers, "git")
	next.session("alice")
	c = next.build(t)
	sum = e.apply(c)
	assert.Zero(t, sum.Released+sum.Acquired)
	e.requireProjected(c, ref)
	e.requireRefsMatch()

	// Bob comes back: a fresh registry request and a fresh binding joining
	// the live transport.
	before = e.snap()
	sum = e.apply(twoSessions().build(t))
	assert.Zero(t, e.delta(before).Connects)
	assert.Equal(t, 1, sum.TransportsReused)
	assert.Equal(t, []string{"read"}, e.reg("bob").ToolNames("fs"))
	e.mu.Lock()
	assert.Equal(t, 2, e.regCall["bob"])
	e.mu.Unlock()
}

func TestRestart(t *testing.T) {
	t.Parallel()
	up := newUpstream("fs", "read", "write")
	e := newEnv(t, up)
	c := twoSessions().build(t)
	e.apply(c)
	alice, bob := e.handle("alice", "fs"), e.handle("bob", "fs")
	before := e.snap()
	require.NoError(t, e.rec.Restart(context.Background(), "fs"))
	e.settleAll()
	d := e.delta(before)
	assert.Equal(t, int64(1), d.Connects)
	assert.Equal(t, int64(1), d.Disconnects)
	assert.Zero(t, d.Acquires+d.Releases, "handles stay")
	assert.Equal(t, 2, up.Dials())
	assert.Same(t, alice, e.handle("alice", "fs"))
	assert.Same(t, bob, e.handle("bob", "fs"))
	e.requireProjected(c, ref)

	err := e.rec.Restart(context.Background(), "nope")
	require.ErrorIs(t, err, reconcile.ErrNotBound)
}

func TestRestartReplacesFailedEntry(t *testing.T) {
	t.Parallel()
	up := newUpstream("fs", "read")
	e := newEnv(t, up)
	c := twoSessions().build(t)
	e.apply(c)
	h := e.handle("alice", "fs")
	up.KillAll()
	// The entry turns failed, then withdraws its views: wait for both.
	require.Eventually(t, func() bool {
		return h.Entry().State() == pool.StateFailed && len(e.reg("alice").ToolNames("fs")) == 0 &&
			e.rec.Bindings("alice")[0].Error != ""
	}, mcptest.EventWithin, 5*time.Millisecond, "failed, withdrawn, and the error shown")

	// The failed entry is replaced by the next reconciling call.
	before := e.snap()
	sum := e.apply(c)
	assert.Equal(t, int64(1), e.delta(before).Connects)
	assert.Equal(t, 2, sum.Acquired)
	assert.NotSame(t, h, e.handle("alice", "fs"))
	e.requireProjected(c, ref)
	e.requireRefsMatch()

	// Restart does the same for a failed entry.
	up.KillAll()
	h = e.handle("alice", "fs")
	require.Eventually(t, func() bool { return h.Entry().State() == pool.StateFailed }, mcptest.EventWithin, 5*time.Millisecond)
	require.NoError(t, e.rec.Restart(context.Background(), "fs"))
	assert.NotSame(t, h, e.handle("alice", "fs"))
	e.requireProjected(c, ref)
	e.requireRefsMatch()
}

func TestTeardown(t *testing.T) {
	t.Parallel()
	up := newUpstream("fs", "read", "write")
	e := newEnv(t, up, newUpstream("git", "log"))
	base := twoSessions()
	base.server("git")
	base.session("alice", "servers", []string{"fs", "git"})
	base.session("bob", "servers", []string{"fs"}, "overrides", override("fs", `{"includeTools":["read"]}`))
	c := base.build(t)
	e.apply(c)
	alice, bob := e.handle("alice", "fs"), e.handle("bob", "fs")

	// A shared transport: alice's binding is torn down and rejoins it.
	before := e.snap()
	require.NoError(t, e.rec.Teardown(context.Background(), "alice", "fs"))
	d := e.delta(before)
	assert.Equal(t, int64(1), d.Releases)
	assert.Equal(t, int64(1), d.Acquires)
	assert.Zero(t, d.Connects)
	assert.True(t, alice.Released())
	assert.NotSame(t, alice, e.handle("alice", "fs"))
	assert.Same(t, bob, e.handle("bob", "fs"))
	e.requireProjected(c, ref)

	// A transport held by alice alone is closed and reconnected.
	git := e.handle("alice", "git")
	before = e.snap()
	require.NoError(t, e.rec.Teardown(context.Background(), "alice", "git"))
	d = e.delta(before)
	assert.Equal(t, int64(1), d.Connects)
	assert.Equal(t, int64(1), d.Disconnects)
	assert.NotSame(t, git, e.handle("alice", "git"))
	e.requireProjected(c, ref)
	e.requireRefsMatch()

	require.ErrorIs(t, e.rec.Teardown(context.Background(), "bob", "git"), reconcile.ErrNotBound)
	require.ErrorIs(t, e.rec.Teardown(context.Background(), "zed", "fs"), reconcile.ErrUnknownSession)
}

func TestSetPolicyRekeysWithoutReconnect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read", "write", "wipe"))
	c := twoSessions().build(t)
	e.apply(c)
	alice := e.handle("alice", "fs")
	oldKey := view.Of(alice).Key()

	before := e.snap()
	sum, err := e.rec.SetPolicy(context.Background(), altPolicy{})
	require.NoError(t, err)
	d := e.delta(before)
	assert.Zero(t, d.Connects+d.Disconnects+d.Acquires+d.Releases, "no transport touched")
	assert.Equal(t, 2, sum.Refreshed)
	assert.Equal(t, []string{"alice", "bob"}, sum.Changed)
	assert.Equal(t, "alt:"+oldKey, view.Of(alice).Key())
	assert.Same(t, alice, e.handle("alice", "fs"))
	assert.Equal(t, []string{"read"}, e.reg("alice").ToolNames("fs"))
	assert.Equal(t, []string{"read"}, e.reg("bob").ToolNames("fs"))
	e.requireProjected(c, altPolicy{})
	assert.Equal(t, "alt 2.0.0", e.rec.State().Policy)

	// New bindings use the new policy too.
	next := twoSessions()
	next.session("carol")
	c = next.build(t)
	e.apply(c)
	assert.True(t, strings.HasPrefix(view.Of(e.handle("carol", "fs")).Key(), "alt:"))
	e.requireProjected(c, altPolicy{})

	_, err = e.rec.SetPolicy(context.Background(), ref)
	require.NoError(t, err)
	e.requireProjected(c, ref)
}

func TestErrorsDoNotBlockOthers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read"), newUpstream("broken", "x"))
	e.setFailing("broken", errDial)
	base := twoSessions()
	base.server("broken")
	c := base.build(t)
	sum, err := e.rec.Apply(context.Background(), c)
	require.Error(t, err)
	require.ErrorIs(t, err, errDial)
	require.Len(t, sum.Errors, 2)
	assert.Equal(t, [2]string{"alice", "broken"}, [2]string{sum.Errors[0].Session, sum.Errors[0].Server})
	assert.Equal(t, [2]string{"bob", "broken"}, [2]string{sum.Errors[1].Session, sum.Errors[1].Server})
	assert.Contains(t, err.Error(), `session "alice", server "broken"`)
	assert.Contains(t, sum.String(), "2 errors: session \"alice\", server \"broken\"")
	assert.Nil(t, e.rec.Handle("alice", "broken"))
	assert.NotNil(t, e.rec.Handle("alice", "fs"), "the other server is bound")
	assert.Equal(t, []string{"read"}, e.reg("bob").ToolNames("fs"))
	for _, b := range e.rec.Bindings("alice") {
		if b.Server == "broken" {
			assert.Contains(t, b.Error, errDial.Error())
			assert.Empty(t, b.Identity)
			assert.Equal(t, reconcile.SpecOf(c.Servers["broken"]).Fingerprint(), b.Desired)
		} else {
			assert.Empty(t, b.Error)
		}
	}
	e.requireRefsMatch()

	// Fixed: the next Apply retries the absent bindings only.
	e.setFailing("broken", nil)
	before := e.snap()
	sum = e.apply(c)
	assert.Equal(t, 2, sum.Acquired)
	assert.Equal(t, int64(1), e.delta(before).Connects)
	e.requireProjected(c, ref)

	// Settings the policy refuses (an overlay bypasses the config loader's
	// type checks) fail that view closed, and nothing else.
	bad := c.Servers["fs"].Clone()
	bad.Settings.IncludeTools = raw(`7`)
	sum, err = e.rec.PutOverlay(context.Background(), "alice", bad)
	require.ErrorIs(t, err, view.ErrRefused)
	require.Len(t, sum.Errors, 1)
	assert.Empty(t, e.reg("alice").ToolNames("fs"), "alice's fs view failed closed")
	assert.Equal(t, []string{"read"}, e.reg("bob").ToolNames("fs"), "bob untouched")
	assert.Equal(t, []string{"x"}, e.reg("alice").ToolNames("broken"), "alice's other server untouched")
	assert.Contains(t, e.rec.Bindings("alice")[1].Error, "includeTools")

	// Good settings again restore the view, on the same handle.
	h := e.handle("alice", "fs")
	_, err = e.rec.DeleteOverlay(context.Background(), "alice", "fs")
	require.NoError(t, err)
	assert.Same(t, h, e.handle("alice", "fs"))
	e.requireProjected(c, ref)
	assert.Empty(t, e.rec.Bindings("alice")[1].Error)
}

// refusingPolicy is a policy (the reference one, in the tests) refusing
// the settings objects that contain marker ("refuse-me" when empty; a
// policy may refuse settings the config loader accepts), per item or, with
// wholeCall, by failing a call that carries one (as a plugin returning an
// error does). It counts its canonicalize calls.
type refusingPolicy struct {
	abi.Policy
	marker    string
	wholeCall bool
	calls     atomic.Int64
}

func (p *refusingPolicy) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	p.calls.Add(1)
	resp, err := p.Policy.Canonicalize(ctx, req)
	if err != nil {
		return nil, err
	}
	marker := cmp.Or(p.marker, "refuse-me")
	for i, s := range req.Settings {
		if !strings.Contains(string(s), marker) {
			continue
		}
		if p.wholeCall {
			return nil, fmt.Errorf("%w: refused (test)", abi.ErrRefused)
		}
		resp.Results[i] = abi.CanonicalResult{Error: "refused (test)"}
	}
	return resp, nil
}

// TestApplyRefusedSettings: settings the policy refuses fail their views
// closed; the reload asks the policy about them once, in its batch, and
// then each view once, for its own error (refusals are not remembered).
func TestApplyRefusedSettings(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read"))
	policy := &refusingPolicy{Policy: ref}
	_, err := e.rec.SetPolicy(context.Background(), policy)
	require.NoError(t, err)
	mk := func(settings string) *config.Config {
		return newCfg().server("fs").
			session("alice", "overrides", override("fs", settings)).
			session("bob", "overrides", override("fs", settings)).build(t)
	}
	e.apply(mk(`{"includeTools":["read"]}`))
	before := policy.calls.Load()
	sum, err := e.rec.Apply(context.Background(), mk(`{"includeTools":["refuse-me"]}`))
	require.ErrorIs(t, err, view.ErrRefused)
	require.Len(t, sum.Errors, 2)
	assert.Equal(t, int64(3), policy.calls.Load()-before, "one batch, then one call per view")
	assert.Empty(t, e.reg("alice").ToolNames("fs"))
	assert.Empty(t, e.reg("bob").ToolNames("fs"))

	// The next reload repairs them.
	e.apply(mk(`{"includeTools":["read"]}`))
	e.requireProjected(mk(`{"includeTools":["read"]}`), ref)
}

func TestPutOverlaySameFingerprint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read", "write", "list"))
	c := twoSessions().build(t)
	e.apply(c)
	alice, bob := e.handle("alice", "fs"), e.handle("bob", "fs")
	bobOps := e.reg("bob").OpCount()

	// Same transport, other settings: refresh, no reconnect.
	ov := c.Servers["fs"].Clone()
	ov.Settings = config.Settings{Trust: raw(`false`), IncludeTools: raw(`["list"]`)}
	before := e.snap()
	sum, err := e.rec.PutOverlay(context.Background(), "alice", ov)
	require.NoError(t, err)
	d := e.delta(before)
	assert.Zero(t, d.Connects+d.Acquires+d.Releases)
	assert.Equal(t, 1, sum.Refreshed)
	assert.Equal(t, []string{"alice"}, sum.Changed)
	assert.Same(t, alice, e.handle("alice", "fs"))
	assert.Equal(t, []string{"list"}, e.reg("alice").ToolNames("fs"))
	assert.Equal(t, false, e.reg("alice").Tool("fs", "list").Meta[view.MetaTrust])
	assert.Equal(t, bobOps, e.reg("bob").OpCount())
	assert.True(t, e.rec.Bindings("alice")[0].Overlay)

	// The overlay survives a later Apply of the unchanged file.
	before = e.snap()
	sum = e.apply(c)
	assert.Zero(t, e.delta(before).RegistryOps)
	assert.Empty(t, sum.Changed)
	assert.Equal(t, []string{"list"}, e.reg("alice").ToolNames("fs"))

	// Deleting it brings the file's settings back, still without reconnect.
	before = e.snap()
	_, err = e.rec.DeleteOverlay(context.Background(), "alice", "fs")
	require.NoError(t, err)
	assert.Zero(t, e.delta(before).Connects)
	assert.Same(t, alice, e.handle("alice", "fs"))
	assert.Same(t, bob, e.handle("bob", "fs"))
	e.requireProjected(c, ref)

	_, err = e.rec.DeleteOverlay(context.Background(), "alice", "fs")
	require.ErrorIs(t, err, reconcile.ErrNoOverlay)
	_, err = e.rec.PutOverlay(context.Background(), "zed", ov)
	require.ErrorIs(t, err, reconcile.ErrUnknownSession)
	ov.Command = ""
	_, err = e.rec.PutOverlay(context.Background(), "alice", ov)
	require.ErrorIs(t, err, pool.ErrInvalidSpec)
}

func TestPutOverlayDifferentTransport(t *testing.T) {
	t.Parallel()
	up := newUpstream("fs", "read", "write")
	e := newEnv(t, up, newUpstream("extra", "e1"))
	c := twoSessions().build(t)
	e.apply(c)
	alice, bob := e.handle("alice", "fs"), e.handle("bob", "fs")

	ov := c.Servers["fs"].Clone()
	ov.Args = []string{"--root", "/alice-only"}
	before := e.snap()
	sum, err := e.rec.PutOverlay(context.Background(), "alice", ov)
	require.NoError(t, err)
	d := e.delta(before)
	assert.Equal(t, int64(1), d.Connects)
	assert.Zero(t, d.Disconnects, "bob still holds the old transport")
	assert.Equal(t, 1, sum.Released)
	assert.Equal(t, 1, sum.Acquired)
	assert.True(t, alice.Released())
	assert.Same(t, bob, e.handle("bob", "fs"))
	assert.Equal(t, reconcile.SpecOf(ov).Fingerprint(), e.handle("alice", "fs").Identity())
	assert.NotSame(t, bob.Entry(), e.handle("alice", "fs").Entry())
	e.requireProjected(c, ref) // same settings as the file
	e.requireRefsMatch()

	// A server the file does not have: acquired for alice only.
	extra := &config.Server{Name: "extra", Command: "/usr/bin/extra", Pooled: true, Settings: config.Settings{IncludeTools: raw(`["e1"]`)}}
	sum, err = e.rec.PutOverlay(context.Background(), "alice", extra)
	require.NoError(t, err)
	assert.Equal(t, 1, sum.Acquired)
	assert.Equal(t, []string{"e1"}, e.reg("alice").ToolNames("extra"))
	assert.Empty(t, e.reg("bob").ToolNames("extra"))

	// A disabled overlay releases the file's binding for the session.
	dis := c.Servers["fs"].Clone()
	dis.Disabled = true
	sum, err = e.rec.PutOverlay(context.Background(), "alice", dis)
	require.NoError(t, err)
	assert.Equal(t, 1, sum.Released)
	assert.Nil(t, e.rec.Handle("alice", "fs"))

	// Deleting the overlays: fs comes back from the file, extra goes.
	_, err = e.rec.DeleteOverlay(context.Background(), "alice", "fs")
	require.NoError(t, err)
	before = e.snap()
	_, err = e.rec.DeleteOverlay(context.Background(), "alice", "extra")
	require.NoError(t, err)
	assert.Equal(t, int64(1), e.delta(before).Disconnects)
	assert.Same(t, bob.Entry(), e.handle("alice", "fs").Entry(), "rejoined the shared transport")
	e.requireProjected(c, ref)
	e.requireRefsMatch()

	// Overlays of a removed session are dropped with it.
	_, err = e.rec.PutOverlay(context.Background(), "bob", extra)
	require.NoError(t, err)
	next := twoSessions()
	delete(next.Sessions, "bob")
	e.apply(next.build(t))
	sum = e.apply(twoSessions().build(t))
	assert.Nil(t, e.rec.Handle("bob", "extra"))
	assert.Zero(t, sum.Released)
}

func TestCloseReleasesEverything(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read"))
	c := twoSessions().build(t)
	e.apply(c)
	h := e.handle("alice", "fs")
	require.NoError(t, e.rec.Close(context.Background()))
	assert.True(t, h.Released())
	assert.Empty(t, e.pool.Entries())
	assert.Empty(t, e.reg("alice").Servers())
	assert.Nil(t, e.rec.Handle("alice", "fs"))
	_, err := e.rec.Apply(context.Background(), c)
	require.ErrorIs(t, err, reconcile.ErrClosed)
	_, err = e.rec.SetPolicy(context.Background(), ref)
	require.ErrorIs(t, err, reconcile.ErrClosed)
	require.NoError(t, e.rec.Close(context.Background()), "a second Close is a no-op")
}

func TestForwardedCallThroughHandle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("demo"))
	c := newCfg().server("demo").session("alice").build(t)
	e.apply(c)
	res, err := e.handle("alice", "demo").Conn().CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}})
	require.NoError(t, err)
	require.Len(t, res.Content, 1)
	assert.Equal(t, "hello", res.Content[0].(*mcp.TextContent).Text)
}

func TestSummaryString(t *testing.T) {
	t.Parallel()
	s := reconcile.Summary{
		Changed:          []string{"alice", "bob"},
		TransportsReused: 3, TransportsStarted: 1, TransportsStopped: 2,
		Acquired: 4, Released: 5, Refreshed: 6, Replayed: 7, RegistryOps: 1,
		Errors: []*reconcile.BindingError{{Session: "bob", Server: "fs", Err: errors.New("boom")}},
	}
	assert.Equal(t, `2 sessions changed; transports 3 reused, 1 started, 2 stopped; 4 acquired, 5 released, 6 refreshed, 7 replayed, 1 registry op; 1 error: session "bob", server "fs": boom`, s.String())
	assert.Equal(t, 2, s.SessionsChanged())
	assert.True(t, s.SessionChanged("bob"))
	assert.False(t, s.SessionChanged("carol"))
	assert.EqualError(t, s.Err(), `session "bob", server "fs": boom`)
	assert.NoError(t, reconcile.Summary{}.Err())
	// A cause that names the binding already (a view's errors do) is not
	// prefixed twice.
	view := &reconcile.BindingError{Session: "bob", Server: "fs", Err: errors.New(`session "bob", server "fs": canonicalize settings: refused`)}
	assert.EqualError(t, view, `session "bob", server "fs": canonicalize settings: refused`)
	assert.Equal(t, "0 sessions changed; transports 0 reused, 0 started, 0 stopped; 0 acquired, 0 released, 0 refreshed, 0 replayed, 0 registry ops; 0 errors", reconcile.Summary{}.String())
}

// TestApplyFollowsChanges covers the incremental Apply: a session whose
// input did not change keeps its wants and costs no work, a session edited
// in place (its override bytes, its Disabled pointer, its server list) is
// still seen as changed, and a server's change reaches every session that
// did not change itself.
func TestApplyFollowsChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "aa", "bb"), newUpstream("git", "log", "blame"))
	base := newCfg().server("fs").server("git")
	base.session("alice", "servers", []string{"fs", "git"},
		"overrides", map[string]any{"fs": map[string]any{"includeTools": []string{"aa"}, "disabled": false}})
	base.session("bob")
	c := base.build(t)
	e.apply(c)
	e.requireProjected(c, ref)
	calls := func() int64 { return e.snap().PolicyCalls }

	// The same config again: nothing to do, not even a policy call.
	before, n := e.snap(), calls()
	sum := e.apply(c)
	assert.Zero(t, sum.Refreshed+sum.Acquired+sum.Released+sum.RegistryOps, "%+v", sum)
	assert.Equal(t, n, calls())
	assert.Zero(t, e.delta(before).Connects)

	// Alice's override bytes edited in place: only alice's fs view moves.
	copy(c.Sessions["alice"].Overrides["fs"].Settings.IncludeTools, `["bb"]`)
	sum = e.apply(c)
	assert.Equal(t, 1, sum.Refreshed)
	assert.Equal(t, []string{"alice"}, sum.Changed)
	assert.Equal(t, []string{"bb"}, e.reg("alice").ToolNames("fs"))
	e.requireProjected(c, ref)

	// Her Disabled pointer flipped in place: the binding goes.
	*c.Sessions["alice"].Overrides["fs"].Disabled = true
	sum = e.apply(c)
	assert.Equal(t, 1, sum.Released)
	assert.Nil(t, e.rec.Handle("alice", "fs"))
	e.requireProjected(c, ref)

	// Her server list edited in place: git leaves, fs comes back by name
	// but stays disabled by the override.
	c.Sessions["alice"].Servers[1] = "fs"
	sum = e.apply(c)
	assert.Equal(t, 1, sum.Released)
	assert.Nil(t, e.rec.Handle("alice", "git"))
	assert.NotNil(t, e.rec.Handle("bob", "git"), "bob keeps git")
	e.requireProjected(c, ref)

	// A server's own settings change: bob did not change but his view
	// follows, on the same handle.
	h := e.handle("bob", "git")
	next := base.clone()
	next.server("git", "excludeTools", []string{"blame"})
	c2 := next.build(t)
	sum = e.apply(c2)
	assert.Same(t, h, e.handle("bob", "git"))
	assert.Equal(t, []string{"log"}, e.reg("bob").ToolNames("git"))
	assert.Contains(t, sum.Changed, "bob")
	e.requireProjected(c2, ref)

	// And the server leaving the config releases it from a session whose
	// own input is unchanged.
	delete(next.Servers, "git")
	next.session("alice", "servers", []string{"fs"},
		"overrides", map[string]any{"fs": map[string]any{"includeTools": []string{"aa"}, "disabled": false}})
	c3 := next.build(t)
	e.apply(c3)
	assert.Nil(t, e.rec.Handle("bob", "git"))
	e.requireProjected(c3, ref)
	e.requireRefsMatch()
}

// togglePolicy is the reference policy whose project calls fail while fail
// is set.
type togglePolicy struct {
	abi.Policy
	fail *atomic.Bool
}

func (p togglePolicy) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	if p.fail.Load() {
		return nil, errors.New("policy down")
	}
	return p.Policy.Project(ctx, req)
}

// TestApplyRepairsBackgroundFailure: a view that fails closed between two
// reloads (here while replaying an upstream's list change) is retried by
// the next Apply even though the config did not change.
func TestApplyRepairsBackgroundFailure(t *testing.T) {
	t.Parallel()
	up := newUpstream("fs", "read")
	e := newEnv(t, up)
	c := twoSessions().build(t)
	fail := new(atomic.Bool)
	_, err := e.rec.SetPolicy(context.Background(), togglePolicy{ref, fail})
	require.NoError(t, err)
	e.apply(c)
	require.Equal(t, []string{"read"}, e.reg("alice").ToolNames("fs"))

	fail.Store(true)
	up.AddTool("write")
	require.Eventually(t, func() bool {
		return view.Of(e.handle("alice", "fs")).Err() != nil
	}, mcptest.EventWithin, 5*time.Millisecond, "the replay of the list change fails closed")
	assert.Empty(t, e.reg("alice").ToolNames("fs"))

	fail.Store(false)
	sum := e.apply(c)
	assert.Equal(t, []string{"read", "write"}, e.reg("alice").ToolNames("fs"))
	assert.Equal(t, []string{"read", "write"}, e.reg("bob").ToolNames("fs"))
	assert.Equal(t, 2, sum.Refreshed)
	assert.Zero(t, sum.Acquired)
}

// TestHealthEpoch: the epoch stays put across healthy reloads and moves
// when an acquire fails or an entry fails, so a supervisor may skip its
// scans exactly while nothing can have broken.
func TestHealthEpoch(t *testing.T) {
	t.Parallel()
	up := newUpstream("fs", "read")
	e := newEnv(t, up, newUpstream("git", "log"))
	c := twoSessions().build(t)
	e.apply(c)
	epoch := e.rec.HealthEpoch()
	e.apply(c)
	next := twoSessions()
	next.server("fs", "excludeTools", []string{"read"})
	e.apply(next.build(t))
	assert.Equal(t, epoch, e.rec.HealthEpoch(), "healthy reloads")

	// An acquire that fails without any entry failing (the caller gave up
	// while the connection was still being made) moves it.
	gate := make(chan struct{})
	e.mu.Lock()
	e.gates = map[string]chan struct{}{"git": gate}
	e.mu.Unlock()
	slow := twoSessions()
	slow.server("git")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, err := e.rec.Apply(ctx, slow.build(t))
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(gate)
	moved := e.rec.HealthEpoch()
	assert.Greater(t, moved, epoch, "failed acquire")

	// So does any other error a reload records, with no entry or view
	// involved: here a session whose registry cannot be had.
	e.mu.Lock()
	e.noReg = map[string]bool{"carol": true}
	e.mu.Unlock()
	withCarol := slow.clone()
	withCarol.session("carol")
	_, err = e.rec.Apply(context.Background(), withCarol.build(t))
	require.ErrorContains(t, err, "no registry for the session")
	assert.Greater(t, e.rec.HealthEpoch(), moved, "recorded error")
	moved = e.rec.HealthEpoch()

	// So does an entry failing in the background.
	h := e.handle("alice", "fs")
	up.KillAll()
	require.Eventually(t, func() bool { return h.Entry().State() == pool.StateFailed }, mcptest.EventWithin, 5*time.Millisecond)
	assert.Greater(t, e.rec.HealthEpoch(), moved, "entry failed")
}

// TestApplyEmptyServerList: a session listing no servers ("servers": [])
// uses none, and the same session without the list uses every server;
// Apply tells the two apart when it compares a session with its copy.
func TestApplyEmptyServerList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read"))
	none := newCfg().server("fs").session("alice", "servers", []string{}).build(t)
	require.NotNil(t, none.Sessions["alice"].Servers, "an empty list, not an absent one")
	e.apply(none)
	assert.Nil(t, e.rec.Handle("alice", "fs"))

	all := newCfg().server("fs").session("alice").build(t)
	sum := e.apply(all)
	assert.Equal(t, 1, sum.Acquired)
	assert.NotNil(t, e.rec.Handle("alice", "fs"))
	e.requireProjected(all, ref)

	sum = e.apply(none)
	assert.Equal(t, 1, sum.Released)
	assert.Nil(t, e.rec.Handle("alice", "fs"))
	e.requireProjected(none, ref)
}

// TestRepairAfterReload: while a reload changes a binding's transport,
// State shows the binding as pending (not failed) on its running
// connection, and a Repair asked for meanwhile leaves the new connection
// alone, whether it waited for the reload's lock or ran once the reload
// was done; Repair of a binding whose acquire failed acquires it again.
func TestRepairAfterReload(t *testing.T) {
	e := newEnv(t, newUpstream("fs", "read"))
	c := newCfg().server("fs").session("alice")
	e.apply(c.build(t))
	old := e.handle("alice", "fs")

	gate := make(chan struct{})
	e.mu.Lock()
	e.gates = map[string]chan struct{}{"fs": gate}
	e.mu.Unlock()
	moved := newCfg().server("fs", "args", []string{"--root", "/elsewhere"}).session("alice")
	before := e.snap()
	applied := make(chan error, 1)
	go func() {
		_, err := e.rec.Apply(context.Background(), moved.build(t))
		applied <- err
	}()
	pending := func() bool {
		b := e.rec.Bindings("alice")
		return len(b) == 1 && b[0].Pending
	}
	require.Eventually(t, pending, mcptest.EventWithin, time.Millisecond, "the binding shows as pending while it is replaced")
	b := e.rec.Bindings("alice")[0]
	assert.Empty(t, b.Error)
	assert.Equal(t, old.Identity(), b.Identity, "the running connection serves meanwhile")
	assert.NotEqual(t, b.Identity, b.Desired)
	assert.Same(t, old, e.rec.Handle("alice", "fs"))
	repaired := make(chan bool, 1)
	go func() {
		ok, err := e.rec.Repair(context.Background(), "alice", "fs")
		assert.NoError(t, err)
		repaired <- ok
	}()
	waitLockedIn(t, "github.com/wasmhost/wasmhost/reconcile.(*Reconciler).Repair") // Repair waits for the reload's lock
	close(gate)
	require.NoError(t, <-applied)
	assert.False(t, <-repaired, "the reload repaired it")
	ok, err := e.rec.Repair(context.Background(), "alice", "fs")
	require.NoError(t, err)
	assert.False(t, ok, "a Repair once the reload is done leaves it alone too")
	d := e.delta(before)
	assert.Equal(t, int64(1), d.Acquires, "one acquire: the reload's")
	assert.Equal(t, int64(1), d.Releases)
	assert.True(t, old.Released())
	assert.False(t, e.rec.Bindings("alice")[0].Pending)

	// A failed acquire is repaired.
	e.apply(newCfg().server("fs").session("alice", "servers", []string{}).build(t))
	e.setFailing("fs", errors.New("no such command"))
	e.rec.Apply(context.Background(), c.build(t)) //nolint:errcheck // the failure is the point
	require.Nil(t, e.rec.Handle("alice", "fs"))
	e.setFailing("fs", nil)
	ok, err = e.rec.Repair(context.Background(), "alice", "fs")
	require.NoError(t, err)
	assert.True(t, ok)
	require.NotNil(t, e.handle("alice", "fs"))
	assert.Equal(t, []string{"read"}, e.reg("alice").ToolNames("fs"))
}

// TestOverlayOfRemovedServerGoesWithIt: an Apply that removes a server the
// last Apply had releases every session's binding of it, an overlay's
// included, and forgets the overlay, as it does a removed session's: the
// overlay used to keep the removed server bound (and served) for its
// session until DeleteOverlay.
func TestOverlayOfRemovedServerGoesWithIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read", "write"), newUpstream("extra", "e1", "e2"))
	full := twoSessions().server("extra")
	e.apply(full.build(t))
	ov := full.build(t).Servers["extra"].Clone()
	ov.Settings = config.Settings{IncludeTools: raw(`["e1"]`)}
	_, err := e.rec.PutOverlay(context.Background(), "alice", ov)
	require.NoError(t, err)
	_, err = e.rec.PutOverlay(context.Background(), "bob", ov)
	require.NoError(t, err)
	require.Equal(t, []string{"e1"}, e.reg("alice").ToolNames("extra"))

	// alice's input is unchanged (the trusted path), bob's is rebuilt
	// (another server list).
	next := twoSessions()
	next.Sessions["bob"]["servers"] = []string{"fs"}
	// A swap checked with it does not ask about the overlays that go.
	refusing := &refusingPolicy{Policy: ref, marker: `"e1"`}
	require.Error(t, e.rec.Check(context.Background(), full.build(t), refusing))
	require.NoError(t, e.rec.Check(context.Background(), next.build(t), refusing))
	sum := e.apply(next.build(t))
	assert.Equal(t, 2, sum.Released)
	for _, s := range []string{"alice", "bob"} {
		assert.Nil(t, e.rec.Handle(s, "extra"), "%s keeps the removed server", s)
		assert.Empty(t, e.reg(s).ToolNames("extra"), "%s still sees the removed server's tools", s)
		_, err = e.rec.DeleteOverlay(context.Background(), s, "extra")
		assert.ErrorIs(t, err, reconcile.ErrNoOverlay, "%s's overlay is forgotten", s)
	}
	assert.Len(t, e.pool.Entries(), 1, "only fs's entry is left")

	// The server coming back brings the file's entry, not the old overlay.
	e.apply(full.build(t))
	assert.Equal(t, []string{"e1", "e2"}, e.reg("alice").ToolNames("extra"))
}

// TestSetPolicyForRekeysOnTheNewConfig: a swap that comes with a config
// re-keys each view on the settings that config gives it, never on the
// old ones under the new policy; a binding the config drops keeps what it
// showed until the Apply that follows releases it.
func TestSetPolicyForRekeysOnTheNewConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read", "write", "list"))
	c := twoSessions().build(t)
	e.apply(c)
	require.Equal(t, []string{"read", "write"}, e.reg("bob").ToolNames("fs"))
	alice := e.reg("alice").ToolNames("fs")

	next := twoSessions()
	next.Sessions["bob"]["overrides"] = override("fs", `{"includeTools":["list"]}`)
	delete(next.Sessions, "alice")
	_, err := e.rec.SetPolicyFor(context.Background(), altPolicy{}, next.build(t))
	require.NoError(t, err)
	assert.Equal(t, []string{"list"}, e.reg("bob").ToolNames("fs"), "bob's view is on the new settings at once")
	assert.Equal(t, alice, e.reg("alice").ToolNames("fs"), "alice's view is left to the Apply")

	sum := e.apply(next.build(t))
	assert.Equal(t, 1, sum.Released)
	assert.Nil(t, e.rec.Handle("alice", "fs"))
	e.requireProjected(next.build(t), altPolicy{})

	// The Apply after a swap that changed no settings has nothing to do.
	counting := &refusingPolicy{Policy: ref}
	_, err = e.rec.SetPolicyFor(context.Background(), counting, next.build(t))
	require.NoError(t, err)
	before, calls := e.snap(), counting.calls.Load()
	sum = e.apply(next.build(t))
	d := e.delta(before)
	assert.Zero(t, d.RegistryOps+d.Replays+d.Connects+d.Acquires+d.Releases, "%+v", d)
	assert.Equal(t, calls, counting.calls.Load(), "no canonicalize call")
	assert.Empty(t, sum.Changed)
}

// TestOverlayEnablesAServerTheSessionDoesNotList: an overlay is the
// session's whole entry for a configured server, so it turns the server on
// for a session whose servers list leaves it out, and its DELETE turns it
// off again (docs/daemon.md, "Overlays").
func TestOverlayEnablesAServerTheSessionDoesNotList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read", "write"), newUpstream("extra", "e1", "e2"))
	c := twoSessions().server("extra")
	c.Sessions["bob"]["servers"] = []string{"fs"}
	e.apply(c.build(t))
	require.Nil(t, e.rec.Handle("bob", "extra"), "bob does not list extra")
	_, err := e.rec.PutOverlay(context.Background(), "bob", c.build(t).Servers["extra"].Clone())
	require.NoError(t, err)
	assert.Equal(t, []string{"e1", "e2"}, e.reg("bob").ToolNames("extra"))
	_, err = e.rec.DeleteOverlay(context.Background(), "bob", "extra")
	require.NoError(t, err)
	assert.Nil(t, e.rec.Handle("bob", "extra"))
	assert.Empty(t, e.reg("bob").ToolNames("extra"))
}
