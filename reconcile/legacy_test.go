package reconcile_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/view"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

// The TestLegacy tests hold the single-session semantics of stdio mode,
// which once had its own reconciler (reconcile.Legacy), on the one path
// stdio mode now takes: the pool and the Reconciler, serving one session
// of the config (daemon.Stdio).

// A legacyEnv is the one path serving one session over in-memory
// upstreams: env's pool and Reconciler, applied one session at a time.
type legacyEnv struct {
	*env
	leg  *oneSession
	lreg *viewtest.Registry // alice's
	lc   *opcount.Counters
}

// A oneSession applies configs as stdio mode does: only the session it
// serves (see scope).
type oneSession struct {
	e       *env
	session string
}

func newLegacyEnv(t *testing.T, ups ...*mcptest.Upstream) *legacyEnv {
	t.Helper()
	e := newEnv(t, ups...)
	return &legacyEnv{env: e, leg: &oneSession{e: e, session: "alice"}, lreg: e.reg("alice"), lc: e.counters}
}

// newOneSession is the one path serving session over dial (the upstreams
// are reached for real: pool.DefaultDialer), whose registry is reg.
func newOneSession(t *testing.T, session string, dial pool.Dialer, reg view.Registry) *oneSession {
	t.Helper()
	counters := &opcount.Counters{}
	p := pool.New(pool.Options{Dialer: dial, Counters: counters, Logger: quiet})
	rec := reconcile.New(reconcile.Options{Pool: p, Policy: ref, Counters: counters, Logger: quiet,
		Registry: func(string) view.Registry { return reg }})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		assert.NoError(t, rec.Close(ctx))
		assert.NoError(t, p.Close(ctx))
	})
	return &oneSession{e: &env{t: t, counters: counters, pool: p, rec: rec}, session: session}
}

// scope keeps, of c, only the session name, as stdio mode does.
func scope(c *config.Config, name string) *config.Config {
	scoped := *c
	scoped.Sessions = map[string]*config.Session{name: c.Sessions[name]}
	return &scoped
}

// Apply applies session of cfg, which must be the one served.
func (o *oneSession) Apply(ctx context.Context, cfg *config.Config, session string) (reconcile.Summary, error) {
	require.Equal(o.e.t, o.session, session)
	return o.e.rec.Apply(ctx, scope(cfg, session))
}

// Session returns the upstream session serving server, nil when none.
func (o *oneSession) Session(server string) *mcp.ClientSession {
	if h := o.e.rec.Handle(o.session, server); h != nil {
		return h.Conn()
	}
	return nil
}

// Upstream is what the session endpoint forwards through (as
// daemon.upstreamFor has it).
func (o *oneSession) Upstream(server string) (*mcp.ClientSession, time.Duration, pool.Subscriber) {
	h := o.e.rec.Handle(o.session, server)
	if h == nil {
		return nil, 0, nil
	}
	return h.Conn(), h.CallTimeout(), h
}

func (o *oneSession) Restart(ctx context.Context, server string) error {
	return o.e.rec.Restart(ctx, server)
}

func (o *oneSession) SetPolicy(ctx context.Context, p abi.Policy) (reconcile.Summary, error) {
	return o.e.rec.SetPolicy(ctx, p)
}

func (o *oneSession) State() reconcile.State { return o.e.rec.State() }

func (e *legacyEnv) apply(c *config.Config, session string) reconcile.Summary {
	e.t.Helper()
	sum, err := e.leg.Apply(context.Background(), c, session)
	require.NoError(e.t, err)
	return sum
}

func (e *legacyEnv) binding(server string) reconcile.BindingState {
	e.t.Helper()
	st := e.leg.State()
	require.Len(e.t, st.Sessions, 1)
	for _, b := range st.Sessions[0].Servers {
		if b.Server == server {
			return b
		}
	}
	e.t.Fatalf("no binding for %q in %+v", server, st)
	return reconcile.BindingState{}
}

// legacyIdentity is what a binding's connection and view must be: the
// fingerprint, "#", and the reference key of the session's settings (the
// identity of a legacy connection joined the two).
func legacyIdentity(t *testing.T, c *config.Config, session, server string) string {
	t.Helper()
	srv, settings, ok := c.Sessions[session].Effective(server)
	require.True(t, ok)
	key, err := view.CanonicalKey(context.Background(), ref, settings)
	require.NoError(t, err)
	return reconcile.SpecOf(srv).Fingerprint() + "#" + key
}

// identity joins b's connection identity (the fingerprint) and its view's
// key as legacyIdentity does.
func identity(b reconcile.BindingState) string { return b.Identity + "#" + b.Key }

func callText(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) string {
	t.Helper()
	require.NotNil(t, cs)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err)
	require.False(t, res.IsError, "%v", res.Content)
	require.Len(t, res.Content, 1)
	return res.Content[0].(*mcp.TextContent).Text
}

func TestLegacyReconnectKeys(t *testing.T) {
	t.Parallel()
	up := newUpstream("fs", "read", "write", "list")
	e := newLegacyEnv(t, up)
	mk := func(settings string) *config.Config {
		return newCfg().server("fs").session("alice", "overrides", override("fs", settings)).build(t)
	}
	c := mk(`{"includeTools":["read"]}`)
	before := e.lc.Snapshot()
	sum := e.apply(c, "alice")
	d := e.lc.Snapshot().Sub(before)
	assert.Equal(t, int64(1), d.Connects)
	assert.Equal(t, int64(1), d.Discoveries)
	assert.Equal(t, 1, sum.Acquired)
	assert.Equal(t, []string{"alice"}, sum.Changed)
	b := e.binding("fs")
	assert.Equal(t, legacyIdentity(t, c, "alice", "fs"), identity(b), "fingerprint#key")
	assert.Equal(t, b.Desired, b.Identity)
	assert.Equal(t, reconcile.SpecOf(c.Servers["fs"]).Fingerprint()+`#{"trust":null,"alwaysLoadTools":false,"includeTools":["read"],"excludeTools":[]}`, identity(b))
	assert.Equal(t, []string{"read"}, e.lreg.ToolNames("fs"))
	first := e.leg.Session("fs")
	assert.Equal(t, "fs/read", callText(t, first, "read", nil))

	// The legacy reconciler reconnected and rediscovered here (the design
	// note's rule for unpooled single-session discovery, whose identity
	// held the key). On the one path a metadata change is the pooled
	// rule's: the view is refreshed on the connection it has.
	t.Run("metadata change refreshes in place", func(t *testing.T) {
		c := mk(`{"includeTools":["read","write"],"trust":true}`)
		before := e.lc.Snapshot()
		dials := up.Dials()
		sum := e.apply(c, "alice")
		d := e.lc.Snapshot().Sub(before)
		assert.Zero(t, d.Connects)
		assert.Zero(t, d.Disconnects)
		assert.Zero(t, d.Discoveries)
		assert.Equal(t, dials, up.Dials())
		assert.Zero(t, sum.Released)
		assert.Zero(t, sum.Acquired)
		assert.Equal(t, 1, sum.Refreshed)
		assert.Equal(t, []string{"alice"}, sum.Changed)
		assert.Equal(t, legacyIdentity(t, c, "alice", "fs"), identity(e.binding("fs")))
		assert.Same(t, first, e.leg.Session("fs"))
		assert.Equal(t, []string{"read", "write"}, e.lreg.ToolNames("fs"))
		assert.Equal(t, true, e.lreg.Tool("fs", "write").Meta[view.MetaTrust])
	})

	t.Run("canonical-equivalent change does nothing", func(t *testing.T) {
		cs := e.leg.Session("fs")
		c := mk(`{"trust":true,"includeTools":["write(path)","read","read"],"excludeTools":[],"alwaysLoadTools":false}`)
		before := e.lc.Snapshot()
		ops := e.lreg.OpCount()
		sum := e.apply(c, "alice")
		d := e.lc.Snapshot().Sub(before)
		// The legacy reconciler computed the key again (PolicyCalls 1);
		// the one path has it memoized and refreshes the handle to the
		// same key, which changes nothing.
		assert.Equal(t, opcount.Values{Refreshes: 1}, d, "one refresh to the same key, nothing else")
		assert.Equal(t, ops, e.lreg.OpCount())
		assert.Empty(t, sum.Changed)
		assert.Equal(t, 1, sum.TransportsReused)
		assert.Same(t, cs, e.leg.Session("fs"))
	})

	t.Run("transport change reconnects", func(t *testing.T) {
		c := newCfg().server("fs", "args", []string{"-v"}).
			session("alice", "overrides", override("fs", `{"includeTools":["read","write"],"trust":true}`)).build(t)
		before := e.lc.Snapshot()
		e.apply(c, "alice")
		assert.Equal(t, int64(1), e.lc.Snapshot().Sub(before).Connects)
		assert.Equal(t, legacyIdentity(t, c, "alice", "fs"), identity(e.binding("fs")))
	})

	t.Run("disabled server disconnects", func(t *testing.T) {
		c := newCfg().server("fs", "disabled", true).session("alice").build(t)
		before := e.lc.Snapshot()
		sum := e.apply(c, "alice")
		assert.Equal(t, int64(1), e.lc.Snapshot().Sub(before).Disconnects)
		assert.Equal(t, 1, sum.Released)
		assert.Nil(t, e.leg.Session("fs"))
		assert.Empty(t, e.lreg.Servers())
		assert.Empty(t, e.leg.State().Sessions[0].Servers)
	})
}

func TestLegacyListChangedAndLoss(t *testing.T) {
	t.Parallel()
	up := newUpstream("fs", "read")
	e := newLegacyEnv(t, up)
	c := newCfg().server("fs").session("alice").build(t)
	e.apply(c, "alice")
	require.Equal(t, []string{"read"}, e.lreg.ToolNames("fs"))

	up.AddTool("late")
	require.Eventually(t, func() bool { return len(e.lreg.ToolNames("fs")) == 2 }, mcptest.EventWithin, 5*time.Millisecond)
	assert.Equal(t, []string{"late", "read"}, e.lreg.ToolNames("fs"))

	up.KillAll()
	// The connection is dropped first, then the view withdrawn and the
	// error recorded: wait for all three.
	require.Eventually(t, func() bool {
		return e.leg.Session("fs") == nil && len(e.lreg.Servers()) == 0 && e.binding("fs").Error != ""
	}, mcptest.EventWithin, 5*time.Millisecond, "disconnected, withdrawn, error shown")
	b := e.binding("fs")
	assert.Contains(t, b.Error, pool.ErrDisconnected.Error())
	assert.Equal(t, "failed", b.EntryState, "no live connection (the legacy binding had no identity then)")

	before := e.lc.Snapshot()
	e.apply(c, "alice")
	assert.Equal(t, int64(1), e.lc.Snapshot().Sub(before).Connects, "the next Apply reconnects")
	assert.Equal(t, []string{"late", "read"}, e.lreg.ToolNames("fs"))

	before = e.lc.Snapshot()
	require.NoError(t, e.leg.Restart(context.Background(), "fs"))
	assert.Equal(t, int64(1), e.lc.Snapshot().Sub(before).Connects)
	require.ErrorIs(t, e.leg.Restart(context.Background(), "nope"), reconcile.ErrNotBound)
}

func TestLegacySetPolicyAndErrors(t *testing.T) {
	t.Parallel()
	e := newLegacyEnv(t, newUpstream("fs", "read", "wipe"), newUpstream("broken", "x"))
	e.setFailing("broken", errDial)
	c := newCfg().server("fs").server("broken").session("alice").build(t)
	sum, err := e.leg.Apply(context.Background(), c, "alice")
	require.ErrorIs(t, err, errDial)
	require.Len(t, sum.Errors, 1)
	assert.Equal(t, "broken", sum.Errors[0].Server)
	assert.Equal(t, []string{"read", "wipe"}, e.lreg.ToolNames("fs"), "the other server connected")
	assert.Contains(t, e.binding("broken").Error, errDial.Error())

	e.setFailing("broken", nil)
	e.apply(c, "alice")
	assert.Equal(t, []string{"x"}, e.lreg.ToolNames("broken"), "retried")

	cs := e.leg.Session("fs")
	before := e.lc.Snapshot()
	sum, err = e.leg.SetPolicy(context.Background(), altPolicy{})
	require.NoError(t, err)
	assert.Zero(t, e.lc.Snapshot().Sub(before).Connects)
	assert.Equal(t, 2, sum.Refreshed)
	assert.Equal(t, []string{"read"}, e.lreg.ToolNames("fs"))
	assert.Same(t, cs, e.leg.Session("fs"))
	_, settings, _ := c.Sessions["alice"].Effective("fs")
	key, err := view.CanonicalKey(context.Background(), altPolicy{}, settings)
	require.NoError(t, err)
	assert.Equal(t, reconcile.SpecOf(c.Servers["fs"]).Fingerprint()+"#"+key, identity(e.binding("fs")))

	// The re-keyed identity is what the next Apply compares against.
	before = e.lc.Snapshot()
	e.apply(c, "alice")
	assert.Zero(t, e.lc.Snapshot().Sub(before).Connects)
	// A config without the session served is refused by the daemon in
	// stdio mode (daemon.TestStdioRefusesAReloadWithoutItsSession).
}

// TestLegacyWithoutSessions: the legacy reconciler served a config
// without sessions as every server that is not disabled, with its own
// settings. The one path always serves a session: one without a "servers"
// list (as `wasmhost run -- CMD` writes it) is that.
func TestLegacyWithoutSessions(t *testing.T) {
	t.Parallel()
	e := newLegacyEnv(t, newUpstream("fs", "read", "write"), newUpstream("git", "log"))
	data := []byte(`{"mcpServers": {
		"fs": {"command": "fs-server", "includeTools": ["write"]},
		"git": {"command": "git-server", "disabled": true}
	}, "sessions": {"alice": {"token": "alice-token-0123456789abcdef"}}}`)
	c, _, err := config.Parse("nosessions.json", data, nil, nil)
	require.NoError(t, err)
	e.apply(c, "alice")
	assert.Equal(t, []string{"fs"}, e.lreg.Servers())
	assert.Equal(t, []string{"write"}, e.lreg.ToolNames("fs"))
	key, err := view.CanonicalKey(context.Background(), ref, json.RawMessage(`{"includeTools":["write"]}`))
	require.NoError(t, err)
	assert.Equal(t, reconcile.SpecOf(c.Servers["fs"]).Fingerprint()+"#"+key, identity(e.binding("fs")))
}

// TestLegacyRepairsFailedView: a view that failed closed on a policy
// failure, on a connection that stayed up, is re-projected by the next
// Apply once the policy answers again, without reconnecting, as the pooled
// Reconciler does (TestApplyRepairsBackgroundFailure).
func TestLegacyRepairsFailedView(t *testing.T) {
	t.Parallel()
	e := newLegacyEnv(t, newUpstream("fs", "read"))
	fail := new(atomic.Bool)
	_, err := e.leg.SetPolicy(context.Background(), togglePolicy{ref, fail})
	require.NoError(t, err)
	c := newCfg().server("fs").session("alice").build(t)
	fail.Store(true)
	_, err = e.leg.Apply(context.Background(), c, "alice")
	require.ErrorContains(t, err, "policy down", "the projection failed: the view failed closed")
	assert.Empty(t, e.lreg.ToolNames("fs"))
	assert.Contains(t, e.binding("fs").Error, "policy down", "State reports the failed view")

	fail.Store(false)
	before := e.lc.Snapshot()
	sum := e.apply(c, "alice")
	assert.Equal(t, []string{"read"}, e.lreg.ToolNames("fs"), "the next Apply repaired the view")
	assert.Equal(t, 1, sum.Refreshed)
	assert.Zero(t, e.lc.Snapshot().Sub(before).Connects, "in place, without reconnecting")
	assert.Empty(t, e.binding("fs").Error)
}

// TestLegacySetPolicyFailureRepairsInPlace: a policy swap whose projection
// fails leaves the view failed closed on a connection that stays up; the
// connection's identity is still the fingerprint and the key the new
// policy gives its settings (not the fingerprint and an empty key), so the
// next Apply of the same config repairs the view in place, as it does
// for a view that failed closed on a list change (TestLegacyRepairsFailedView):
// nothing changed in the settings, so nothing reconnects.
func TestLegacySetPolicyFailureRepairsInPlace(t *testing.T) {
	t.Parallel()
	e := newLegacyEnv(t, newUpstream("fs", "read"))
	c := newCfg().server("fs").session("alice").build(t)
	e.apply(c, "alice")
	cs := e.leg.Session("fs")
	fail := new(atomic.Bool)
	fail.Store(true)
	policy := togglePolicy{ref, fail}
	_, err := e.leg.SetPolicy(context.Background(), policy)
	require.ErrorContains(t, err, "policy down")
	assert.Empty(t, e.lreg.ToolNames("fs"), "the view failed closed")
	b := e.binding("fs")
	// The legacy identity kept the key the new policy gives the settings;
	// on the one path the view forgets its key when it fails closed, and
	// the binding's desired settings (its want) are what the next Apply
	// compares: it repairs the view in place (below).
	assert.Equal(t, reconcile.SpecOf(c.Servers["fs"]).Fingerprint(), b.Identity, "the connection is kept")
	assert.Equal(t, b.Desired, b.Identity)

	fail.Store(false)
	before := e.lc.Snapshot()
	sum := e.apply(c, "alice")
	d := e.lc.Snapshot().Sub(before)
	assert.Zero(t, d.Connects+d.Disconnects+d.Discoveries, "repaired in place: %+v", d)
	assert.Equal(t, 1, sum.Refreshed)
	assert.True(t, cs == e.leg.Session("fs"), "the same connection")
	assert.Equal(t, []string{"read"}, e.lreg.ToolNames("fs"))
	assert.Empty(t, e.binding("fs").Error)

	// Settings the new policy refuses have no key: that connection is
	// closed by the next Apply, with the refusal as its error.
	refusing := &refusingPolicy{Policy: ref, marker: "read"}
	c2 := newCfg().server("fs", "includeTools", []string{"read"}).session("alice").build(t)
	e.apply(c2, "alice")
	_, err = e.leg.SetPolicy(context.Background(), refusing)
	require.ErrorIs(t, err, view.ErrRefused)
	_, err = e.leg.Apply(context.Background(), c2, "alice")
	require.ErrorIs(t, err, view.ErrRefused)
	// The legacy reconciler closed that connection; the one path keeps
	// it with the view failed closed: the session sees nothing of it.
	assert.Empty(t, e.lreg.ToolNames("fs"))
	assert.Contains(t, e.binding("fs").Error, view.ErrRefused.Error())
}

// TestLegacySetPolicyKeysDesiredSettings: settings that are new in bytes
// but equivalent leave the connection alone, and are still what a later
// policy swap keys the view by: under a policy that tells the two byte
// forms apart the identity is that of the settings the config holds, so the
// next Apply of that config does not reconnect.
func TestLegacySetPolicyKeysDesiredSettings(t *testing.T) {
	t.Parallel()
	e := newLegacyEnv(t, newUpstream("fs", "read", "wipe"))
	c0 := newCfg().server("fs").session("alice", "overrides", override("fs", `{}`)).build(t)
	c1 := newCfg().server("fs").session("alice", "overrides", override("fs", `{"excludeTools":[]}`)).build(t)
	e.apply(c0, "alice")
	before := e.lc.Snapshot()
	e.apply(c1, "alice")
	require.Zero(t, e.lc.Snapshot().Sub(before).Connects, "equivalent under the reference policy")

	_, err := e.leg.SetPolicy(context.Background(), bytesPolicy{})
	require.NoError(t, err)
	srv, settings, ok := c1.Sessions["alice"].Effective("fs")
	require.True(t, ok)
	key, err := view.CanonicalKey(context.Background(), bytesPolicy{}, settings)
	require.NoError(t, err)
	assert.Equal(t, reconcile.SpecOf(srv).Fingerprint()+"#"+key, identity(e.binding("fs")))
	assert.Equal(t, key, e.binding("fs").Key)

	before = e.lc.Snapshot()
	e.apply(c1, "alice")
	assert.Zero(t, e.lc.Snapshot().Sub(before).Connects, "the identity is that of c1's settings")
	assert.Equal(t, []string{"read", "wipe"}, e.lreg.ToolNames("fs"))
}

// TestLegacyProtocolVersion: stdio mode asks an upstream for the protocol
// version its entry pins, as the pool does.
func TestLegacyProtocolVersion(t *testing.T) {
	t.Parallel()
	up := newUpstream("fs", "read")
	var mu sync.Mutex
	var asked string
	up.Server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if params, ok := req.GetParams().(*mcp.InitializeParams); ok {
				mu.Lock()
				asked = params.ProtocolVersion
				mu.Unlock()
			}
			return next(ctx, method, req)
		}
	})
	e := newLegacyEnv(t, up)
	e.apply(newCfg().server("fs", "protocolVersion", "2025-06-18").session("alice").build(t), "alice")
	require.NotNil(t, e.leg.Session("fs"))
	assert.Equal(t, "2025-06-18", e.leg.Session("fs").InitializeResult().ProtocolVersion)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, "2025-06-18", asked)
}

// TestLegacySubscriptions: a Legacy connection holds its one session's
// resource subscriptions to the server.
func TestLegacySubscriptions(t *testing.T) {
	t.Parallel()
	demo := demoserver.New()
	up := mcptest.NewUpstream(mcptest.UpstreamConfig{Name: "demo", Server: demo.MCP()})
	e := newLegacyEnv(t, up, newUpstream("fs", "read"))
	// At protocol 2025-11-25, where an unsubscribe is passed upstream
	// (from 2026-07-28 on the pool keeps the upstream's subscription
	// until the connection closes).
	e.apply(newCfg().server("demo", "protocolVersion", "2025-11-25").server("fs").session("alice").build(t), "alice")
	cs, _, subs := e.leg.Upstream("demo")
	require.NotNil(t, subs)
	const uri = "demo://notes/welcome"
	got := make(chan string, 4)
	require.NoError(t, subs.Subscribe(t.Context(), uri, func(p *mcp.ResourceUpdatedNotificationParams) { got <- p.URI }))
	require.Eventually(t, func() bool { return demo.Subscribed()[uri] == 1 }, mcptest.EventWithin, 5*time.Millisecond)
	_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "write_note", Arguments: map[string]any{"name": "welcome", "text": "x"}})
	require.NoError(t, err)
	assert.Equal(t, uri, <-got)
	require.NoError(t, subs.Unsubscribe(t.Context(), uri))
	require.Eventually(t, func() bool { return demo.Subscribed()[uri] == 0 }, mcptest.EventWithin, 5*time.Millisecond)

	_, _, fs := e.leg.Upstream("fs")
	require.ErrorIs(t, fs.Subscribe(t.Context(), "file:///fs", func(*mcp.ResourceUpdatedNotificationParams) {}), pool.ErrNoSubscriptions)
	_, _, none := e.leg.Upstream("nope")
	assert.Nil(t, none)
}

// TestLegacyDiscoveryTimeoutSaysWhichLimit: a server that answers the
// handshake but never its tools/list fails with the server's timeout
// named, as the pool's entries name it, not only "context deadline
// exceeded".
func TestLegacyDiscoveryTimeoutSaysWhichLimit(t *testing.T) {
	t.Parallel()
	up := newUpstream("mute", "read")
	up.Server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/list" {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return next(ctx, method, req)
		}
	})
	e := newLegacyEnv(t, up)
	c := newCfg().server("mute", "timeout", 200).session("alice").build(t)
	_, err := e.leg.Apply(context.Background(), c, "alice")
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "discover")
	assert.Contains(t, err.Error(), "no answer within the server's timeout, 200ms")
}
