package reconcile_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/view"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

// compileCacheDir is where the default plugin's compiled form is cached
// between runs (host.DefaultCacheDir, else a temporary directory).
func compileCacheDir(t *testing.T) string {
	if dir := host.DefaultCacheDir(); dir != "" {
		return dir
	}
	return t.TempDir()
}

// TestStdioHarness runs the demo server built from this repo as a real
// subprocess (this test binary, see TestMain) reached through go-sdk's
// CommandTransport by the pool's default dialer, shares it between three
// sessions with different settings, and projects through the real wasm
// default policy.
func TestStdioHarness(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	policy, err := host.LoadEmbedded(ctx, policydefault.Name, policydefault.Wasm, policydefault.SHA256, host.Options{CacheDir: compileCacheDir(t), CallTimeout: time.Minute, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, policy.Close(context.Background())) })

	counters := &opcount.Counters{}
	p := pool.New(pool.Options{Counters: counters, Logger: quiet, Timeout: time.Minute})
	regs := map[string]*viewtest.Registry{"alice": viewtest.NewRegistry(), "bob": viewtest.NewRegistry(), "carol": viewtest.NewRegistry()}
	rec := reconcile.New(reconcile.Options{
		Pool: p, Policy: policy, Counters: counters, Logger: quiet,
		Registry: func(s string) view.Registry { return regs[s] },
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, rec.Close(ctx))
		require.NoError(t, p.Close(ctx))
	})

	mk := func(bob string) *config.Config {
		return newCfg().
			server("demo", "command", os.Args[0], "args", []string{}, "env", map[string]string{demoserver.ChildEnv: "1"}).
			session("alice").
			session("bob", "overrides", override("demo", bob)).
			session("carol", "overrides", override("demo", `{"trust":false,"excludeTools":["write_note","add_tool"]}`)).
			build(t)
	}
	c := mk(`{"trust":true,"alwaysLoadTools":true,"includeTools":["echo","pid(x)"]}`)
	sum, err := rec.Apply(ctx, c)
	require.NoError(t, err)
	assert.Equal(t, 1, sum.TransportsStarted)
	assert.Equal(t, int64(1), counters.Connects.Load(), "one process for every pooled session")

	// The same process answers through every session.
	pid := func(session string) int {
		t.Helper()
		h := rec.Handle(session, "demo")
		require.NotNil(t, h)
		n, err := strconv.Atoi(callText(t, h.Conn(), "pid", nil))
		require.NoError(t, err)
		return n
	}
	upstreamPID := pid("alice")
	assert.NotEqual(t, os.Getpid(), upstreamPID, "a real subprocess")
	assert.Equal(t, upstreamPID, pid("bob"))
	assert.Equal(t, upstreamPID, pid("carol"))

	// Each session's projection and flags, and agreement with the native
	// reference policy on the same snapshot.
	assert.Equal(t, []string{"add", "add_tool", "echo", "pid", "read_note", "write_note"}, regs["alice"].ToolNames("demo"))
	assert.Equal(t, []string{"echo", "pid"}, regs["bob"].ToolNames("demo"))
	assert.Equal(t, []string{"add", "echo", "pid", "read_note"}, regs["carol"].ToolNames("demo"))
	flags := func(session, tool string) [2]any {
		m := regs[session].Tool("demo", tool).Meta
		return [2]any{m[view.MetaTrust], m[view.MetaAlwaysLoad]}
	}
	assert.Equal(t, [2]any{false, false}, flags("alice", "echo"))
	assert.Equal(t, [2]any{true, true}, flags("bob", "echo"))
	assert.Equal(t, [2]any{false, false}, flags("carol", "echo"))
	assert.Equal(t, []string{"greet", "summarize"}, regs["alice"].PromptNames("demo"))
	assert.Empty(t, regs["bob"].PromptNames("demo"), "prompts are filtered by includeTools too")
	assert.Equal(t, []string{"demo://about", "demo://notes/welcome"}, regs["bob"].ResourceURIs("demo"))
	snap := rec.Handle("alice", "demo").Entry().Snapshot()
	for _, s := range c.SessionNames() {
		_, settings, _ := c.Sessions[s].Effective("demo")
		requireProjection(t, regs[s], s, "demo", ref, settings, snap)
	}

	// An actual tool call through a session.
	assert.Equal(t, "hello from bob", callText(t, rec.Handle("bob", "demo").Conn(), "echo", map[string]any{"text": "hello from bob"}))

	// A metadata change: applied with no reconnect.
	c = mk(`{"trust":true,"alwaysLoadTools":false,"includeTools":["echo","pid","add"]}`)
	before := counters.Snapshot()
	sum, err = rec.Apply(ctx, c)
	require.NoError(t, err)
	d := counters.Snapshot().Sub(before)
	assert.Zero(t, d.Connects)
	assert.Zero(t, d.Disconnects)
	assert.Equal(t, []string{"bob"}, sum.Changed)
	assert.Equal(t, upstreamPID, pid("bob"))
	assert.Equal(t, []string{"add", "echo", "pid"}, regs["bob"].ToolNames("demo"))
	assert.Equal(t, [2]any{true, false}, flags("bob", "echo"))

	// Canonical-equivalent settings: zero churn.
	c = mk(`{"trust":true,"includeTools":["pid","add(a, b)","echo","echo"],"excludeTools":[],"alwaysLoadTools":null}`)
	before = counters.Snapshot()
	sum, err = rec.Apply(ctx, c)
	require.NoError(t, err)
	d = counters.Snapshot().Sub(before)
	assert.Zero(t, d.Connects, "no connect")
	assert.Zero(t, d.RegistryOps, "no registry operation")
	assert.Zero(t, d.Replays, "no replay")
	assert.Empty(t, sum.Changed)
	assert.Equal(t, upstreamPID, pid("alice"))
}
