package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/view"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

func TestMain(m *testing.M) {
	// The stdio harness starts this very binary as the demo server.
	demoserver.RunIfChild()
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var quiet = slog.New(slog.DiscardHandler)

// newUpstream returns the fake upstream the reconcile tests dial in
// memory: tools that answer "<name>/<tool>", the prompt "greet", the
// resource file:///<name>. The name "demo" gets the demo server built from
// this repo (plus the given tools).
func newUpstream(name string, tools ...string) *mcptest.Upstream {
	cfg := mcptest.UpstreamConfig{Name: name, Tools: tools}
	if name == "demo" {
		cfg.Server = demoserver.New().MCP()
	}
	return mcptest.NewUpstream(cfg)
}

// An env is a pool over in-memory upstreams, a registry per session and a
// reconciler.
type env struct {
	t        *testing.T
	counters *opcount.Counters
	pool     *pool.Pool
	rec      *reconcile.Reconciler
	ups      map[string]*mcptest.Upstream

	mu      sync.Mutex
	regs    map[string]*viewtest.Registry
	regCall map[string]int
	failing map[string]error         // dial errors by server name
	gates   map[string]chan struct{} // dials of these servers wait for the channel to close
	noReg   map[string]bool          // sessions whose registry is nil
}

func newEnv(t *testing.T, ups ...*mcptest.Upstream) *env {
	t.Helper()
	e := &env{
		t: t, counters: &opcount.Counters{}, ups: make(map[string]*mcptest.Upstream),
		regs: make(map[string]*viewtest.Registry), regCall: make(map[string]int), failing: make(map[string]error),
	}
	for _, u := range ups {
		e.ups[u.Name] = u
	}
	e.pool = pool.New(pool.Options{Counters: e.counters, Logger: quiet, Dialer: e.dial})
	e.rec = reconcile.New(reconcile.Options{
		Pool: e.pool, Policy: metakey.Reference{}, Counters: e.counters, Logger: quiet,
		Registry: e.registry,
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, e.rec.Close(ctx))
		require.NoError(t, e.pool.Close(ctx))
	})
	return e
}

// dial reaches the upstream named like the spec (the command and args are
// only part of the identity).
func (e *env) dial(ctx context.Context, spec pool.Spec) (mcp.Transport, error) {
	e.mu.Lock()
	err, gate := e.failing[spec.Name], e.gates[spec.Name]
	e.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if err != nil {
		return nil, err
	}
	u := e.ups[spec.Name]
	if u == nil {
		return nil, fmt.Errorf("no upstream %q", spec.Name)
	}
	return u.Transport(ctx)
}

func (e *env) setFailing(server string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err == nil {
		delete(e.failing, server)
	} else {
		e.failing[server] = err
	}
}

// registry returns the session's registry, the same one each time.
func (e *env) registry(session string) view.Registry {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.regCall[session]++
	if e.noReg[session] {
		return nil
	}
	if e.regs[session] == nil {
		e.regs[session] = viewtest.NewRegistry()
	}
	return e.regs[session]
}

func (e *env) reg(session string) *viewtest.Registry {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.regs[session] == nil {
		e.regs[session] = viewtest.NewRegistry()
	}
	return e.regs[session]
}

func (e *env) snap() opcount.Values { return e.counters.Snapshot() }

func (e *env) delta(before opcount.Values) opcount.Values { return e.counters.Snapshot().Sub(before) }

// apply applies cfg and requires success.
func (e *env) apply(cfg *config.Config) reconcile.Summary {
	e.t.Helper()
	sum, err := e.rec.Apply(context.Background(), cfg)
	require.NoError(e.t, err)
	require.Empty(e.t, sum.Errors)
	return sum
}

func (e *env) handle(session, server string) *pool.Handle {
	e.t.Helper()
	h := e.rec.Handle(session, server)
	require.NotNil(e.t, h, "no handle for session %q, server %q", session, server)
	return h
}

// settleAll waits until every held entry is steady.
func (e *env) settleAll() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range e.rec.Sessions() {
		for _, b := range e.rec.Bindings(s) {
			if h := e.rec.Handle(s, b.Server); h != nil {
				require.NoError(e.t, h.Entry().Settle(ctx))
			}
		}
	}
}

// requireProjected checks that session's registry holds, for every server
// the session uses in cfg, exactly the projection of the held entry's
// snapshot under the session's effective settings (computed independently
// with policy), and nothing for any other server.
func (e *env) requireProjected(cfg *config.Config, policy abi.Policy) {
	e.t.Helper()
	e.settleAll()
	for _, name := range cfg.SessionNames() {
		sess := cfg.Sessions[name]
		reg := e.reg(name)
		var want []string
		for _, server := range sess.Enabled() {
			h := e.handle(name, server)
			_, settings, _ := sess.Effective(server)
			requireProjection(e.t, reg, name, server, policy, settings, h.Entry().Snapshot())
			want = append(want, server)
		}
		require.Equal(e.t, want, nilIfEmpty(reg.Servers()), "servers registered in session %q", name)
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// requireProjection checks that reg holds exactly what policy projects of
// snap under settings for server.
func requireProjection(t *testing.T, reg *viewtest.Registry, session, server string, policy abi.Policy, settings json.RawMessage, snap *pool.Snapshot) {
	t.Helper()
	want, err := view.Project(context.Background(), policy, settings, snap)
	require.NoError(t, err)
	if diff := cmp.Diff(viewtest.StateOf(want), reg.State(server)); diff != "" {
		t.Fatalf("session %q, server %q: registry (-want +got):\n%s", session, server, diff)
	}
}

// requireRefsMatch checks that every live pool entry is held by exactly
// the bindings that name it, and that no binding holds anything else.
func (e *env) requireRefsMatch() {
	e.t.Helper()
	held := make(map[string]int)
	for _, s := range e.rec.Sessions() {
		for _, b := range e.rec.Bindings(s) {
			if h := e.rec.Handle(s, b.Server); h != nil {
				require.False(e.t, h.Released(), "session %q holds a released handle for %q", s, b.Server)
				held[h.ID()]++
			}
		}
	}
	got := make(map[string]int)
	for _, info := range e.pool.Entries() {
		require.Equal(e.t, info.Refs, info.Views, "entry %s: refs and attached views differ", info.ID)
		got[info.ID] = info.Refs
	}
	require.Equal(e.t, held, got, "pool refcounts versus bindings")
}

// A cfg builds config files: servers and sessions as JSON-able maps.
type cfg struct {
	Servers  map[string]map[string]any
	Sessions map[string]map[string]any
}

func newCfg() *cfg {
	return &cfg{Servers: make(map[string]map[string]any), Sessions: make(map[string]map[string]any)}
}

// server adds a stdio server entry; kv adds or overrides keys.
func (c *cfg) server(name string, kv ...any) *cfg {
	m := map[string]any{"command": "/usr/bin/" + name + "-server", "args": []string{"--root", "/srv"}}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	c.Servers[name] = m
	return c
}

// session adds a session; kv adds keys ("servers", "overrides").
func (c *cfg) session(name string, kv ...any) *cfg {
	m := map[string]any{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	c.Sessions[name] = m
	return c
}

// clone returns a deep copy (through JSON).
func (c *cfg) clone() *cfg {
	b, err := json.Marshal(c)
	if err != nil {
		panic(err)
	}
	out := newCfg()
	if err := json.Unmarshal(b, out); err != nil {
		panic(err)
	}
	return out
}

// build parses the config, giving every session its own inline token.
func (c *cfg) build(t testing.TB) *config.Config {
	t.Helper()
	sessions := make(map[string]map[string]any, len(c.Sessions))
	for name, s := range c.Sessions {
		m := maps.Clone(s)
		m["token"] = "token-for-" + name + "-0123456789"
		sessions[name] = m
	}
	data, err := json.Marshal(map[string]any{"mcpServers": c.Servers, "sessions": sessions})
	require.NoError(t, err)
	out, _, err := config.Parse("test.json", data, func(string) (string, bool) { return "", false }, nil)
	require.NoError(t, err, "config %s", data)
	return out
}

// raw is a JSON literal for cfg maps.
func raw(s string) json.RawMessage { return json.RawMessage(s) }

// override is a session "overrides" value for one server.
func override(server, settings string) map[string]any {
	return map[string]any{server: raw(settings)}
}

// altPolicy is a second native policy: keys carry an "alt:" prefix (so they
// never equal Reference keys) and tools whose names start with "w" are
// hidden.
type altPolicy struct{}

func (altPolicy) Handshake() abi.Handshake {
	return abi.Handshake{ABI: abi.Version, Name: "alt", Version: "2.0.0"}
}

func (altPolicy) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	return rekeyed(ctx, req, func(_ int, key string) string { return "alt:" + key })
}

// bytesPolicy is the reference policy with a key that is the settings
// bytes themselves: any two byte forms differ under it.
type bytesPolicy struct{ metakey.Reference }

func (bytesPolicy) Handshake() abi.Handshake {
	return abi.Handshake{ABI: abi.Version, Name: "bytes", Version: "1.0.0"}
}

func (bytesPolicy) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	return rekeyed(ctx, req, func(i int, _ string) string { return "bytes:" + string(req.Settings[i]) })
}

// rekeyed canonicalizes with the reference policy and replaces the key of
// each accepted settings object i (whose reference key is key) by key(i,
// key).
func rekeyed(ctx context.Context, req *abi.CanonicalizeRequest, key func(i int, key string) string) (*abi.CanonicalizeResponse, error) {
	resp, err := metakey.Reference{}.Canonicalize(ctx, req)
	if err != nil {
		return nil, err
	}
	for i := range resp.Results {
		if resp.Results[i].Error == "" {
			resp.Results[i].Key = key(i, resp.Results[i].Key)
		}
	}
	return resp, nil
}

func (altPolicy) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	resp, err := metakey.Reference{}.Project(ctx, req)
	if err != nil {
		return nil, err
	}
	resp.Tools = slices.DeleteFunc(resp.Tools, func(d abi.ToolDecision) bool {
		n := req.Tools[d.Index]
		return n != "" && n[0] == 'w'
	})
	return resp, nil
}

// errDial is the failure injected into dials.
var errDial = errors.New("connection refused (test)")

// waitLockedIn waits until a goroutine waits for a mutex in the function
// fn (its full name, as a stack dump gives it).
func waitLockedIn(t *testing.T, fn string) {
	t.Helper()
	mcptest.WaitFor(t, mcptest.EventWithin, func() bool { return mcptest.BlockedIn("sync.Mutex.Lock", fn) },
		mcptest.Stacks, "a goroutine waits for a mutex in %s", fn)
}

// waitCaughtUp waits, once the test stopped breaking connections and
// changing tool lists, until every held entry has heard of all of it: a
// ready entry's connection answers a ping (a connection the test broke
// has been noticed, and restarted or failed) and, the entry steady, its
// snapshot lists the tools its upstream offers now (the last list_changed
// has been discovered; one still on its way can only list them again).
// Then every entry is steady (settleAll).
func (e *env) waitCaughtUp() {
	e.t.Helper()
	var behind string
	mcptest.WaitFor(e.t, mcptest.EventWithin, func() bool {
		behind = e.behind()
		return behind == ""
	}, func() string { return behind }, "every entry heard of its upstream's crashes and tool list changes")
	e.settleAll()
}

// behind says which held entry has not yet heard of what its upstream did
// ("" when none; see waitCaughtUp).
func (e *env) behind() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offered := map[string][]string{}
	for _, s := range e.rec.Sessions() {
		for _, b := range e.rec.Bindings(s) {
			h := e.rec.Handle(s, b.Server)
			if h == nil {
				continue
			}
			if err := h.Entry().Settle(ctx); err != nil {
				return fmt.Sprintf("session %q, server %q: settle: %v", s, b.Server, err)
			}
			if h.Entry().State() != pool.StateReady {
				continue // failed or closed: nothing to hear of
			}
			cs := h.Conn()
			if cs == nil {
				return fmt.Sprintf("session %q, server %q: no upstream connection to call (the view lags)", s, b.Server)
			}
			if err := cs.Ping(ctx, nil); err != nil {
				return fmt.Sprintf("session %q, server %q: the connection is gone (ping: %v), not yet noticed", s, b.Server, err)
			}
			name := h.Spec().Name
			if offered[name] == nil {
				offered[name] = toolNames(upstreamSnapshot(e.t, e.ups[name]).Tools)
			}
			if got := toolNames(h.Entry().Snapshot().Tools); !slices.Equal(got, offered[name]) {
				return fmt.Sprintf("session %q, server %q: the snapshot lists %v, the upstream %v", s, b.Server, got, offered[name])
			}
		}
	}
	return ""
}

// toolNames lists the tools' names, sorted.
func toolNames(tools []*mcp.Tool) []string {
	names := make([]string, 0, len(tools))
	for _, t := range tools {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	return names
}
