package pool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	"github.com/wasmhost/wasmhost/view/viewtest"
)

func TestFingerprint(t *testing.T) {
	base := stdioSpec("fs")
	fp := base.Fingerprint()
	assert.Regexp(t, `^fs::[0-9a-f]{64}$`, fp)

	same := base.Clone()
	same.Env = map[string]string{"MODE": "ro", "TOKEN": "t1"} // another map, same pairs
	assert.Equal(t, fp, same.Fingerprint(), "stable across map order")

	empty := pool.Spec{Name: "x", Command: "c", Pooled: true}
	emptyColl := pool.Spec{Name: "x", Command: "c", Args: []string{}, Env: map[string]string{}, Headers: map[string]string{}, Pooled: true}
	assert.Equal(t, empty.Fingerprint(), emptyColl.Fingerprint(), "nil and empty collections alike")

	differ := map[string]func(*pool.Spec){
		"name":         func(s *pool.Spec) { s.Name = "fs2" },
		"name with ::": func(s *pool.Spec) { s.Name = "fs::x" },
		"command":      func(s *pool.Spec) { s.Command = "/bin/other" },
		"args":         func(s *pool.Spec) { s.Args = []string{"--root", "/tmp"} },
		"args split":   func(s *pool.Spec) { s.Args = []string{"--root /srv"} },
		"env value":    func(s *pool.Spec) { s.Env["MODE"] = "rw" },
		"env key":      func(s *pool.Spec) { s.Env["EXTRA"] = "" },
		"cwd":          func(s *pool.Spec) { s.Cwd = "/srv" },
		"timeout":      func(s *pool.Spec) { s.Timeout = time.Second },
		"unpooled":     func(s *pool.Spec) { s.Pooled = false },
		"http":         func(s *pool.Spec) { s.Command, s.HTTPURL = "", "https://h/mcp" },
		"headers":      func(s *pool.Spec) { s.Headers = map[string]string{"A": "b"} },
		"protocol":     func(s *pool.Spec) { s.ProtocolVersion = "2025-11-25" },
	}
	seen := map[string]string{fp: "base"}
	for name, mutate := range differ {
		s := base.Clone()
		mutate(&s)
		got := s.Fingerprint()
		prev, dup := seen[got]
		assert.False(t, dup, "%s collides with %s", name, prev)
		seen[got] = name
	}
	assert.Equal(t, fp, base.Fingerprint(), "mutating clones left base alone")
	// The fingerprint of a spec that sets no protocol version is the one it
	// had before Spec.ProtocolVersion existed.
	assert.Equal(t, "fs::489fd2b7b73e1277efb5413c0b7dd3a2a731ccf071b8335f97f43de155055496", fp)

	// Metadata settings and display fields are not transport identity.
	cfgA := &config.Server{Name: "fs", Command: "srv", Args: []string{"a"}, Pooled: true,
		Description: "one", Settings: config.Settings{Trust: json.RawMessage(`true`)}}
	cfgB := cfgA.Clone()
	cfgB.Description = "two"
	cfgB.Settings = config.Settings{IncludeTools: json.RawMessage(`[]`), AlwaysLoadTools: json.RawMessage(`true`)}
	assert.Equal(t, reconcile.SpecOf(cfgA).Fingerprint(), reconcile.SpecOf(cfgB).Fingerprint())
}

// TestSpecProtocolVersion: a spec's ProtocolVersion is what the pool's
// client asks the upstream for. Pinned to 2025-11-25, the connection opens
// with the initialize handshake of that version; left empty, the go-sdk
// first tries the newer server/discover, which this upstream answers.
func TestSpecProtocolVersion(t *testing.T) {
	for _, tc := range []struct{ version, first string }{
		{"", "server/discover"},
		{"2025-11-25", "initialize"},
	} {
		t.Run("version="+tc.version, func(t *testing.T) {
			u := newUpstream(t, "fs", "read")
			var mu sync.Mutex
			var methods []string
			var asked string                 // the version of an initialize request
			var caps *mcp.ClientCapabilities // its client capabilities
			u.Server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
				return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
					mu.Lock()
					methods = append(methods, method)
					if params, ok := req.GetParams().(*mcp.InitializeParams); ok {
						asked = params.ProtocolVersion
						caps = params.Capabilities
					}
					mu.Unlock()
					return next(ctx, method, req)
				}
			})
			e := newEnv(t, pool.Options{}, u)
			spec := stdioSpec("fs")
			spec.ProtocolVersion = tc.version
			h := e.acquire(spec, "alice", `{}`, viewtest.NewRegistry())
			mu.Lock()
			require.NotEmpty(t, methods)
			assert.Equal(t, tc.first, methods[0])
			if tc.version != "" {
				assert.Equal(t, tc.version, asked)
				// The pool's client bridges no roots, sampling or
				// elicitation, so it announces none. (go-sdk v1.8.0 always
				// sends "roots": {}; without listChanged, at least.)
				require.NotNil(t, caps)
				b, err := json.Marshal(caps)
				require.NoError(t, err)
				for _, word := range []string{"listChanged", "sampling", "elicitation"} {
					assert.NotContains(t, string(b), word, "announced")
				}
			}
			mu.Unlock()
			res, err := h.Conn().CallTool(context.Background(), &mcp.CallToolParams{Name: "read"})
			require.NoError(t, err)
			assert.False(t, res.IsError)
		})
	}
}

func TestSpecStringHidesSecrets(t *testing.T) {
	s := stdioSpec("fs")
	s.Args = []string{"--password", "hunter2"}
	assert.NotContains(t, s.String(), "hunter2")
	assert.NotContains(t, s.String(), "t1")
	h := pool.Spec{Name: "web", HTTPURL: "https://user:pw@h/mcp?key=abc", Headers: map[string]string{"Authorization": "Bearer zzz"}}
	assert.NotContains(t, h.String(), "zzz")
	assert.NotContains(t, h.String(), "abc")
	assert.NotContains(t, h.String(), ":pw@")
	assert.Contains(t, h.String(), "Authorization")
}

func TestValidate(t *testing.T) {
	for name, s := range map[string]pool.Spec{
		"no name":      {Command: "x"},
		"no transport": {Name: "a"},
		"two":          {Name: "a", Command: "x", URL: "http://h"},
		"negative":     {Name: "a", Command: "x", Timeout: -1},
	} {
		assert.ErrorIs(t, s.Validate(), pool.ErrInvalidSpec, name)
	}
	e := newEnv(t, pool.Options{})
	_, err := e.pool.Acquire(context.Background(), pool.Spec{Name: "a"}, e.newView("s", "a", `{}`, viewtest.NewRegistry(), nil))
	require.ErrorIs(t, err, pool.ErrInvalidSpec)
}

func TestDefaultDialer(t *testing.T) {
	ctx := context.Background()
	spec := stdioSpec("fs")
	spec.Cwd = "/tmp"
	tr, err := pool.DefaultDialer(ctx, spec)
	require.NoError(t, err)
	ct, ok := tr.(*mcp.CommandTransport)
	require.True(t, ok, "%T", tr)
	assert.Equal(t, []string{"/usr/bin/fs-server", "--root", "/srv"}, ct.Command.Args)
	assert.Equal(t, "/tmp", ct.Command.Dir)
	assert.Contains(t, ct.Command.Env, "MODE=ro")
	assert.Contains(t, ct.Command.Env, "TOKEN=t1")

	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("X-Token"))
		w.WriteHeader(http.StatusTeapot)
	}))
	defer srv.Close()
	tr, err = pool.DefaultDialer(ctx, pool.Spec{Name: "web", HTTPURL: srv.URL, Headers: map[string]string{"X-Token": "sekrit"}})
	require.NoError(t, err)
	st, ok := tr.(*mcp.StreamableClientTransport)
	require.True(t, ok, "%T", tr)
	assert.Equal(t, srv.URL, st.Endpoint)
	resp, err := st.HTTPClient.Get(srv.URL)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, "sekrit", got.Load())
}

// TestPooledRefresh: sessions on one pooled transport share one connection;
// a metadata refresh replays only the refreshed session's view, with no
// connect and no refcount change.
func TestPooledRefresh(t *testing.T) {
	ctx := context.Background()
	up := newUpstream(t, "fs", "read", "write", "delete")
	e := newEnv(t, pool.Options{}, up)
	spec := stdioSpec("fs")
	r1, r2 := viewtest.NewRegistry(), viewtest.NewRegistry()
	h1 := e.acquire(spec, "s1", `{}`, r1)
	h2 := e.acquire(spec, "s2", `{"excludeTools":["delete"]}`, r2)
	assert.Equal(t, 1, up.Dials(), "one transport for both sessions")
	assert.Same(t, h1.Entry(), h2.Entry())
	assert.Equal(t, []string{"delete", "read", "write"}, r1.ToolNames("fs"))
	assert.Equal(t, []string{"read", "write"}, r2.ToolNames("fs"))
	assert.Equal(t, spec.Fingerprint(), h1.ID(), "a pooled entry's id is its fingerprint")

	before := e.counters.Snapshot()
	r2ops := r2.OpCount()
	changed, err := h1.RefreshMetadata(ctx, json.RawMessage(`{"includeTools":["read"],"trust":true}`))
	require.NoError(t, err)
	assert.True(t, changed)
	d := e.delta(before)
	assert.Equal(t, opcount.Values{Refreshes: 1, Replays: 1, PolicyCalls: 2, RegistryOps: 3}, d,
		"canonicalize+project; delete 2 tools, delete the greet prompt, put 1 re-flagged tool")
	assert.Equal(t, r2ops, r2.OpCount(), "the other session is untouched")
	requireProjection(t, r1, "fs", `{"includeTools":["read"],"trust":true}`, h1.Entry().Snapshot())
	info := e.entry(h1.ID())
	assert.Equal(t, 2, info.Refs)
	assert.Equal(t, pool.StateReady, info.State)
	assert.Equal(t, 1, up.Dials())
}

// TestRefreshMetadataCases: table of refreshes on a pooled handle, each
// checked for churn and for the final registry state.
func TestRefreshMetadataCases(t *testing.T) {
	tests := []struct {
		name     string
		from, to string
		changed  bool
		want     opcount.Values
		tools    []string
	}{
		{"equivalent filter normalization", `{"includeTools":["write","read(path)"],"excludeTools":null}`,
			`{"excludeTools":[],"includeTools":["read","write","read"]}`, false,
			opcount.Values{Refreshes: 1, PolicyCalls: 1}, []string{"read", "write"}},
		{"absent include allows all", `{"includeTools":[]}`, `{}`, true,
			opcount.Values{Refreshes: 1, Replays: 1, PolicyCalls: 2, RegistryOps: 2}, []string{"delete", "read", "write"}},
		{"empty include allows none", `{}`, `{"includeTools":[]}`, true,
			opcount.Values{Refreshes: 1, Replays: 1, PolicyCalls: 2, RegistryOps: 2}, nil},
		{"null include equals absent", `{}`, `{"includeTools":null}`, false,
			opcount.Values{Refreshes: 1, PolicyCalls: 1}, []string{"delete", "read", "write"}},
		{"new key, same projection", `{}`, `{"trust":false}`, true,
			opcount.Values{Refreshes: 1, Replays: 1, PolicyCalls: 2}, []string{"delete", "read", "write"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, "fs", "read", "write", "delete")
			e := newEnv(t, pool.Options{}, up)
			reg := viewtest.NewRegistry()
			h := e.acquire(stdioSpec("fs"), "s1", tc.from, reg)
			before := e.counters.Snapshot()
			changed, err := h.RefreshMetadata(context.Background(), json.RawMessage(tc.to))
			require.NoError(t, err)
			assert.Equal(t, tc.changed, changed)
			assert.Equal(t, tc.want, e.delta(before))
			assert.Equal(t, tc.tools, reg.ToolNames("fs"))
			requireProjection(t, reg, "fs", tc.to, h.Entry().Snapshot())
		})
	}
}

// TestUnpooledIdentity: each session on an unpooled spec gets its own
// connection with a lifecycle id, and is identified by its captured
// fingerprint: a metadata-only change refreshes, never reconnects.
func TestUnpooledIdentity(t *testing.T) {
	ctx := context.Background()
	up := newUpstream(t, "team::fs", "read", "write")
	e := newEnv(t, pool.Options{}, up)
	spec := stdioSpec("team::fs")
	spec.Pooled = false
	r1, r2 := viewtest.NewRegistry(), viewtest.NewRegistry()
	h1 := e.acquire(spec, "s1", `{}`, r1)
	h2 := e.acquire(spec, "s2", `{}`, r2)
	assert.Equal(t, "team::fs::unpooled-1", h1.ID())
	assert.Equal(t, "team::fs::unpooled-2", h2.ID())
	assert.NotSame(t, h1.Entry(), h2.Entry())
	assert.Equal(t, 2, up.Dials(), "two connections")

	// The reconcile check: captured identity against the desired
	// fingerprint, never the lifecycle id.
	desired := spec.Clone() // metadata lives outside the Spec
	assert.Equal(t, desired.Fingerprint(), h1.Identity())
	assert.Equal(t, desired.Fingerprint(), h2.Identity())
	assert.NotEqual(t, h1.ID(), h1.Identity())

	before := e.counters.Snapshot()
	changed, err := h1.RefreshMetadata(ctx, json.RawMessage(`{"excludeTools":["write"],"alwaysLoadTools":true}`))
	require.NoError(t, err)
	assert.True(t, changed)
	d := e.delta(before)
	assert.Zero(t, d.Connects)
	assert.Zero(t, d.Disconnects)
	assert.Zero(t, d.Acquires)
	assert.Equal(t, 2, up.Dials(), "no reconnect on a metadata-only change")
	assert.Equal(t, []string{"read"}, r1.ToolNames("team::fs"))
	assert.Equal(t, []string{"read", "write"}, r2.ToolNames("team::fs"))

	// Canonical-equivalent settings: nothing at all.
	before = e.counters.Snapshot()
	changed, err = h1.RefreshMetadata(ctx, json.RawMessage(`{"alwaysLoadTools":true,"excludeTools":["write","write"]}`))
	require.NoError(t, err)
	assert.False(t, changed)
	assert.Equal(t, opcount.Values{Refreshes: 1, PolicyCalls: 1}, e.delta(before))

	// Releasing one unpooled handle closes its connection only.
	require.NoError(t, h1.Release(ctx))
	assert.Len(t, e.pool.Entries(), 1)
	assert.Equal(t, "team::fs::unpooled-2", e.pool.Entries()[0].ID)
}

// TestSpecMutationIgnored: the entry captures a deep copy of the spec, so
// mutating the caller's Spec maps and slices afterwards cannot make the old
// transport look current.
func TestSpecMutationIgnored(t *testing.T) {
	up := newUpstream(t, "fs", "read")
	e := newEnv(t, pool.Options{}, up)
	spec := stdioSpec("fs")
	original := spec.Fingerprint()
	h := e.acquire(spec, "s1", `{}`, viewtest.NewRegistry())

	spec.Env["TOKEN"] = "t2" // in place: the caller's map
	spec.Args[1] = "/other"
	assert.Equal(t, original, h.Identity(), "captured identity unchanged")
	assert.Equal(t, "t1", h.Spec().Env["TOKEN"])
	assert.Equal(t, "/srv", h.Spec().Args[1])
	assert.NotEqual(t, spec.Fingerprint(), h.Identity(), "the mutated desired spec no longer matches: reconcile reacquires")

	h2 := e.acquire(spec, "s2", `{}`, viewtest.NewRegistry())
	assert.NotSame(t, h.Entry(), h2.Entry(), "the mutated spec is another transport")
	assert.Equal(t, 2, up.Dials())

	// Mutating what Spec() returned does not reach the entry either.
	got := h.Spec()
	got.Env["TOKEN"] = "t3"
	assert.Equal(t, "t1", h.Spec().Env["TOKEN"])
}

// TestInPlaceSettingsMutation: the view keeps the key computed from a
// private copy, so mutating the caller's bytes is detected at the next
// refresh and changes nothing before.
func TestInPlaceSettingsMutation(t *testing.T) {
	ctx := context.Background()
	up := newUpstream(t, "fs", "read", "write")
	e := newEnv(t, pool.Options{}, up)
	reg := viewtest.NewRegistry()
	cfg := []byte(`{"includeTools":["read"] }`)
	h := e.acquire(stdioSpec("fs"), "s1", string(cfg), reg)
	changed, err := h.RefreshMetadata(ctx, cfg)
	require.NoError(t, err)
	require.False(t, changed)
	ops := reg.OpCount()

	copy(cfg, `{"includeTools":["write"]}`)
	assert.Equal(t, ops, reg.OpCount())
	assert.Equal(t, []string{"read"}, reg.ToolNames("fs"))

	changed, err = h.RefreshMetadata(ctx, cfg)
	require.NoError(t, err)
	assert.True(t, changed, "an in-place edit is compared with the captured key")
	assert.Equal(t, []string{"write"}, reg.ToolNames("fs"))
}

// TestPerSessionAlwaysLoadAndIsolation: two sessions on one transport with
// opposite trust and alwaysLoadTools each see their own flags, and the
// shared snapshot stays as discovered.
func TestPerSessionAlwaysLoadAndIsolation(t *testing.T) {
	up := newUpstream(t, "fs", "read", "write")
	e := newEnv(t, pool.Options{}, up)
	r1, r2 := viewtest.NewRegistry(), viewtest.NewRegistry()
	h1 := e.acquire(stdioSpec("fs"), "s1", `{"trust":true,"alwaysLoadTools":true}`, r1)
	snap := h1.Entry().Snapshot()
	pristine := cloneSnapshot(t, snap)
	h2 := e.acquire(stdioSpec("fs"), "s2", `{"trust":false,"alwaysLoadTools":false}`, r2)

	for _, name := range []string{"read", "write"} {
		assert.Equal(t, [2]bool{true, true}, flagsOf(t, r1.Tool("fs", name)), name)
		assert.Equal(t, [2]bool{false, false}, flagsOf(t, r2.Tool("fs", name)), name)
		assert.Equal(t, r1.Tool("fs", name).Description, r2.Tool("fs", name).Description)
	}
	_, err := h2.RefreshMetadata(context.Background(), json.RawMessage(`{"alwaysLoadTools":true}`))
	require.NoError(t, err)
	assert.Equal(t, [2]bool{false, true}, flagsOf(t, r2.Tool("fs", "read")))
	assert.Equal(t, [2]bool{true, true}, flagsOf(t, r1.Tool("fs", "read")))

	assert.Same(t, snap, h1.Entry().Snapshot())
	if diff := cmp.Diff(pristine, snap); diff != "" {
		t.Fatalf("shared snapshot mutated (-want +got):\n%s", diff)
	}
	for _, tool := range snap.Tools {
		assert.NotContains(t, tool.Meta, view.MetaTrust)
		assert.NotContains(t, tool.Meta, view.MetaAlwaysLoad)
	}
}

// cloneSnapshot deep-copies a snapshot through JSON.
func cloneSnapshot(t *testing.T, s *pool.Snapshot) *pool.Snapshot {
	t.Helper()
	b, err := json.Marshal(s)
	require.NoError(t, err)
	var out pool.Snapshot
	require.NoError(t, json.Unmarshal(b, &out))
	return &out
}

// TestReleasedHandleFailsClosed: a released handle refuses refreshes with
// ErrReleased and changes nothing.
func TestReleasedHandleFailsClosed(t *testing.T) {
	ctx := context.Background()
	up := newUpstream(t, "fs", "read")
	e := newEnv(t, pool.Options{}, up)
	reg := viewtest.NewRegistry()
	h := e.acquire(stdioSpec("fs"), "s1", `{}`, reg)
	keep := e.acquire(stdioSpec("fs"), "s2", `{}`, viewtest.NewRegistry())
	require.NoError(t, h.Release(ctx))
	assert.Empty(t, reg.Servers(), "release deletes the view's registrations")
	assert.Equal(t, 1, e.entry(keep.ID()).Refs)

	before := e.counters.Snapshot()
	ops := reg.OpCount()
	changed, err := h.RefreshMetadata(ctx, json.RawMessage(`{"trust":true}`))
	require.ErrorIs(t, err, pool.ErrReleased)
	assert.False(t, changed)
	assert.Equal(t, opcount.Values{}, e.delta(before))
	assert.Equal(t, ops, reg.OpCount())
	assert.Equal(t, 1, e.entry(keep.ID()).Refs)
	assert.Equal(t, `{}`, string(view.Of(h).Settings()), "settings not taken")
	require.ErrorIs(t, h.Release(ctx), pool.ErrReleased)
	assert.Nil(t, h.Conn())
}

// TestTerminalEntryFailsClosed: when the upstream goes away and no restart
// is allowed, the entry fails, its views are withdrawn, and refreshes fail
// with ErrTerminal without touching anything; a new Acquire reconnects.
func TestTerminalEntryFailsClosed(t *testing.T) {
	ctx := context.Background()
	up := newUpstream(t, "fs", "read")
	e := newEnv(t, pool.Options{}, up)
	reg := viewtest.NewRegistry()
	h := e.acquire(stdioSpec("fs"), "s1", `{}`, reg)
	require.Equal(t, []string{"read"}, reg.ToolNames("fs"))

	up.Kill()
	require.Eventually(t, func() bool { return h.Entry().State() == pool.StateFailed }, 5*time.Second, 5*time.Millisecond)
	settle(t, h)
	assert.Empty(t, reg.Servers(), "views of a failed entry are withdrawn")
	assert.ErrorIs(t, view.Of(h).Err(), pool.ErrTerminal)
	assert.ErrorIs(t, view.Of(h).Err(), pool.ErrDisconnected)
	assert.Nil(t, h.Conn())

	before := e.counters.Snapshot()
	ops := reg.OpCount()
	refs := h.Entry().Info().Refs
	changed, err := h.RefreshMetadata(ctx, json.RawMessage(`{"trust":true}`))
	require.ErrorIs(t, err, pool.ErrTerminal)
	assert.False(t, changed)
	assert.Equal(t, opcount.Values{}, e.delta(before))
	assert.Equal(t, ops, reg.OpCount())
	assert.Equal(t, refs, h.Entry().Info().Refs)
	require.ErrorIs(t, h.Entry().Restart(ctx), pool.ErrTerminal)

	// The failed entry left the fingerprint map: a new Acquire starts over.
	reg2 := viewtest.NewRegistry()
	h2 := e.acquire(stdioSpec("fs"), "s2", `{}`, reg2)
	assert.NotSame(t, h.Entry(), h2.Entry())
	assert.Equal(t, []string{"read"}, reg2.ToolNames("fs"))
	require.NoError(t, h.Release(ctx))
}

// gatedPolicy is the reference policy whose Canonicalize, while armed,
// reports that it was entered and waits to be let go.
type gatedPolicy struct {
	metakey.Reference
	armed   *atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (p gatedPolicy) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	if p.armed.Load() {
		p.entered <- struct{}{}
		<-p.release
	}
	return p.Reference.Canonicalize(ctx, req)
}

// TestRefreshWhileEntryFails: an entry that fails while a refresh asks the
// policy for the new key makes the refresh return ErrTerminal, so the
// reconciler replaces the entry at once; the failure still withdraws the
// view.
func TestRefreshWhileEntryFails(t *testing.T) {
	ctx := context.Background()
	up := newUpstream(t, "fs", "read")
	e := newEnv(t, pool.Options{}, up)
	reg := viewtest.NewRegistry()
	p := gatedPolicy{armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
	h, err := e.pool.Acquire(ctx, stdioSpec("fs"), e.newView("s1", "fs", `{}`, reg, p))
	require.NoError(t, err)
	require.Equal(t, []string{"read"}, reg.ToolNames("fs"))

	p.armed.Store(true)
	refreshed := make(chan error, 1)
	go func() {
		_, err := h.RefreshMetadata(ctx, json.RawMessage(`{"trust":true}`))
		refreshed <- err
	}()
	<-p.entered
	up.Kill()
	require.Eventually(t, func() bool { return h.Entry().State() == pool.StateFailed }, 5*time.Second, 5*time.Millisecond)
	close(p.release)
	require.ErrorIs(t, <-refreshed, pool.ErrTerminal)
	settle(t, h)
	assert.Empty(t, reg.Servers(), "the failure withdrew the view")
	assert.ErrorIs(t, view.Of(h).Err(), pool.ErrTerminal)
	require.NoError(t, h.Release(ctx))
}

// TestCrashRestart: with CrashRestarts, an upstream that goes away is
// reconnected and rediscovered; views keep their settings.
func TestCrashRestart(t *testing.T) {
	up := newUpstream(t, "fs", "read")
	e := newEnv(t, pool.Options{CrashRestarts: 1}, up)
	reg := viewtest.NewRegistry()
	h := e.acquire(stdioSpec("fs"), "s1", `{"trust":true}`, reg)
	v1 := h.Entry().Info().Version
	up.AddTool("write")
	require.Eventually(t, func() bool { return len(reg.ToolNames("fs")) == 2 }, 5*time.Second, 5*time.Millisecond)

	up.Kill()
	require.Eventually(t, func() bool { return up.Dials() == 2 }, 5*time.Second, 5*time.Millisecond)
	settle(t, h)
	info := h.Entry().Info()
	assert.Equal(t, pool.StateReady, info.State)
	assert.Greater(t, info.Version, v1)
	requireProjection(t, reg, "fs", `{"trust":true}`, h.Entry().Snapshot())
	assert.Equal(t, int64(2), e.counters.Snapshot().Connects)
	assert.Equal(t, int64(1), e.counters.Snapshot().Disconnects)
}

// TestEntryInfoCountsRestarts: EntryInfo counts the restarts an entry
// began, crash and explicit, and keeps the reason its connection last went
// away once it is ready again.
func TestEntryInfoCountsRestarts(t *testing.T) {
	up := newUpstream(t, "fs", "read")
	e := newEnv(t, pool.Options{CrashRestarts: 1}, up)
	h := e.acquire(stdioSpec("fs"), "s1", `{}`, viewtest.NewRegistry())
	info := h.Entry().Info()
	assert.Zero(t, info.Restarts)
	assert.NoError(t, info.LastErr)

	up.Kill()
	require.Eventually(t, func() bool { return up.Dials() == 2 }, 5*time.Second, 5*time.Millisecond)
	settle(t, h)
	info = h.Entry().Info()
	assert.Equal(t, pool.StateReady, info.State)
	assert.Equal(t, 1, info.Restarts, "the crash restart")
	assert.Error(t, info.LastErr, "why the connection went away, kept once ready again")
	assert.NoError(t, info.Err)

	require.NoError(t, h.Entry().Restart(t.Context()))
	assert.Equal(t, 2, h.Entry().Info().Restarts, "the explicit restart")
}

// gate blocks dials after the first n until released.
type gate struct {
	n       atomic.Int64
	after   int64
	entered chan struct{}
	release chan struct{}
}

func newGate(after int64) *gate {
	return &gate{after: after, entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (g *gate) hook(context.Context, pool.Spec) error {
	if g.n.Add(1) > g.after {
		g.entered <- struct{}{}
		<-g.release
	}
	return nil
}

// TestRefreshDuringRestart: while the entry restarts, a refresh is accepted
// (old registrations stay) and the restart's fan-out applies it to the
// rediscovered snapshot; the refcount never moves.
func TestRefreshDuringRestart(t *testing.T) {
	ctx := context.Background()
	up := newUpstream(t, "fs", "read", "write")
	e := newEnv(t, pool.Options{}, up)
	g := newGate(1)
	hook := g.hook
	e.beforeDial.Store(&hook)
	reg, other := viewtest.NewRegistry(), viewtest.NewRegistry()
	h := e.acquire(stdioSpec("fs"), "s1", `{}`, reg)
	e.acquire(stdioSpec("fs"), "s2", `{}`, other)
	refs := h.Entry().Info().Refs

	restarted := make(chan error, 1)
	go func() { restarted <- h.Entry().Restart(ctx) }()
	<-g.entered
	assert.Equal(t, pool.StateRestarting, h.Entry().State())
	assert.Nil(t, h.Conn())

	ops := reg.OpCount()
	changed, err := h.RefreshMetadata(ctx, json.RawMessage(`{"includeTools":["write","search"],"trust":true}`))
	require.NoError(t, err)
	assert.True(t, changed, "the view accepted the new key")
	assert.Equal(t, ops, reg.OpCount(), "nothing replayed during the restart")
	assert.Equal(t, []string{"read", "write"}, reg.ToolNames("fs"))

	up.AddTool("search") // the restart discovers it
	close(g.release)
	require.NoError(t, <-restarted)

	assert.Equal(t, pool.StateReady, h.Entry().State())
	assert.NotNil(t, h.Conn())
	assert.Equal(t, refs, h.Entry().Info().Refs)
	snap := h.Entry().Snapshot()
	assert.Equal(t, []string{"read", "search", "write"}, snapshotToolNames(snap))
	requireProjection(t, reg, "fs", `{"includeTools":["write","search"],"trust":true}`, snap)
	requireProjection(t, other, "fs", `{}`, snap)
	assert.Equal(t, 2, up.Dials())
}

// TestRefreshKeepsRefcount: refreshes never acquire.
func TestRefreshKeepsRefcount(t *testing.T) {
	ctx := context.Background()
	up := newUpstream(t, "fs", "read")
	e := newEnv(t, pool.Options{}, up)
	h := e.acquire(stdioSpec("fs"), "s1", `{}`, viewtest.NewRegistry())
	before := e.counters.Snapshot()
	for i, s := range []string{`{"trust":true}`, `{"trust":true}`, `{}`, `{"includeTools":[]}`} {
		_, err := h.RefreshMetadata(ctx, json.RawMessage(s))
		require.NoError(t, err)
		assert.Equal(t, 1, h.Entry().Info().Refs, "refresh %d", i)
	}
	d := e.delta(before)
	assert.Zero(t, d.Acquires)
	assert.Zero(t, d.Releases)
	assert.Zero(t, d.Connects)
	assert.Equal(t, int64(4), d.Refreshes)
}

// TestListChangedFanOut: an upstream tools change reaches every view, with
// one project call per distinct key; a burst of notifications coalesces into
// fewer refreshes than notifications.
func TestListChangedFanOut(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, "fs", "read")
	e := newEnv(t, pool.Options{}, up)
	settings := []string{`{}`, `{"excludeTools":[]}`, `{"trust":true}`, `{"includeTools":["read","new0"]}`}
	regs := make([]*viewtest.Registry, len(settings))
	var h *pool.Handle
	for i, s := range settings {
		regs[i] = viewtest.NewRegistry()
		h = e.acquire(stdioSpec("fs"), fmt.Sprint("s", i), s, regs[i])
	}

	before := e.counters.Snapshot()
	up.AddTool("new0")
	require.Eventually(t, func() bool { return len(regs[0].ToolNames("fs")) == 2 }, 5*time.Second, 5*time.Millisecond)
	settle(t, h)
	d := e.delta(before)
	assert.Equal(t, int64(1), d.Notifications)
	assert.Equal(t, int64(1), d.Discoveries)
	assert.Equal(t, int64(3), d.PolicyCalls, "one project per distinct key (3 keys for 4 views)")
	assert.Equal(t, int64(4), d.Replays)
	for i, s := range settings {
		requireProjection(t, regs[i], "fs", s, h.Entry().Snapshot())
	}
	assert.Equal(t, []string{"new0", "read"}, regs[3].ToolNames("fs"))

	// A burst: each change is notified while a slow listing is in flight.
	up.ListDelay.Store(int64(60 * time.Millisecond))
	before = e.counters.Snapshot()
	for i := 1; i <= 8; i++ {
		up.AddTool(fmt.Sprint("new", i))
		// The pacing is what is tested: each change comes after the
		// server's 10ms debounce, so each is notified, while a listing is
		// still in flight.
		time.Sleep(20 * time.Millisecond)
	}
	up.ListDelay.Store(0)
	require.Eventually(t, func() bool {
		return cmp.Equal(up.ToolNames(), snapshotToolNames(h.Entry().Snapshot()))
	}, 5*time.Second, 5*time.Millisecond)
	settle(t, h)
	d = e.delta(before)
	assert.GreaterOrEqual(t, d.Notifications, int64(4))
	assert.Less(t, d.Discoveries, d.Notifications, "notifications coalesce")
	for i, s := range settings {
		requireProjection(t, regs[i], "fs", s, h.Entry().Snapshot())
	}
	assert.Zero(t, d.Connects)
}

// togglePolicy fails every call while fail is set.
type togglePolicy struct {
	metakey.Reference
	fail *atomic.Bool
}

var errTrap = errors.New("wasm trap")

func (p togglePolicy) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	if p.fail.Load() {
		return nil, errTrap
	}
	return p.Reference.Canonicalize(ctx, req)
}

func (p togglePolicy) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	if p.fail.Load() {
		return nil, errTrap
	}
	return p.Reference.Project(ctx, req)
}

// TestPolicyFailureFailsClosed: a policy failing for one session on one
// server empties that view only; the transport and the other views carry
// on; a later successful refresh restores it with the current snapshot.
func TestPolicyFailureFailsClosed(t *testing.T) {
	ctx := context.Background()
	fs := newUpstream(t, "fs", "read")
	git := newUpstream(t, "git", "log")
	e := newEnv(t, pool.Options{}, fs, git)
	var fail atomic.Bool
	reg, other := viewtest.NewRegistry(), viewtest.NewRegistry()
	bad, err := e.pool.Acquire(ctx, stdioSpec("fs"), e.newView("s1", "fs", `{}`, reg, togglePolicy{fail: &fail}))
	require.NoError(t, err)
	gitH := e.acquire(stdioSpec("git"), "s1", `{}`, reg) // same session, other server
	good := e.acquire(stdioSpec("fs"), "s2", `{}`, other)
	require.Equal(t, []string{"fs", "git"}, reg.Servers())

	fail.Store(true)
	_, err = bad.RefreshMetadata(ctx, json.RawMessage(`{"trust":true}`))
	require.ErrorIs(t, err, errTrap)
	assert.ErrorIs(t, view.Of(bad).Err(), errTrap)
	assert.Equal(t, []string{"git"}, reg.Servers(), "nothing from fs in s1; git untouched")
	assert.Equal(t, []string{"read"}, other.ToolNames("fs"))
	assert.Equal(t, pool.StateReady, bad.Entry().State(), "the transport is untouched")

	// A snapshot update while failing: s2 gets it, s1 stays closed.
	fs.AddTool("write")
	require.Eventually(t, func() bool { return len(other.ToolNames("fs")) == 2 }, 5*time.Second, 5*time.Millisecond)
	settle(t, good)
	assert.Equal(t, []string{"git"}, reg.Servers())

	fail.Store(false)
	changed, err := bad.RefreshMetadata(ctx, json.RawMessage(`{"trust":true}`))
	require.NoError(t, err)
	assert.True(t, changed)
	assert.NoError(t, view.Of(bad).Err())
	requireProjection(t, reg, "fs", `{"trust":true}`, bad.Entry().Snapshot())
	requireProjection(t, reg, "git", `{}`, gitH.Entry().Snapshot())
	assert.Equal(t, 1, fs.Dials())
}

func TestAcquireErrors(t *testing.T) {
	ctx := context.Background()
	up := newUpstream(t, "fs", "read")
	e := newEnv(t, pool.Options{}, up)

	// A connect failure fails every waiter and leaves nothing behind.
	fail := func(context.Context, pool.Spec) error { return errors.New("no route") }
	e.beforeDial.Store(&fail)
	_, err := e.pool.Acquire(ctx, stdioSpec("fs"), e.newView("s1", "fs", `{}`, viewtest.NewRegistry(), nil))
	require.ErrorIs(t, err, pool.ErrTerminal)
	require.ErrorContains(t, err, "no route")
	assert.Empty(t, e.pool.Entries())
	e.beforeDial.Store(nil)

	// The view of a failed acquire is detached and can be used again.
	v := e.newView("s1", "fs", `{}`, viewtest.NewRegistry(), nil)
	h, err := e.pool.Acquire(ctx, stdioSpec("fs"), v)
	require.NoError(t, err)
	_, err = e.pool.Acquire(ctx, stdioSpec("fs"), v)
	require.ErrorIs(t, err, view.ErrAttached)
	assert.Equal(t, 1, h.Entry().Info().Refs)

	// A caller giving up while connecting does not fail the connection.
	g := newGate(0)
	hook := g.hook
	e.beforeDial.Store(&hook)
	short, cancel := context.WithCancel(ctx)
	spec := stdioSpec("fs")
	spec.Pooled = false
	done := make(chan error, 1)
	go func() {
		_, err := e.pool.Acquire(short, spec, e.newView("s2", "fs", `{}`, viewtest.NewRegistry(), nil))
		done <- err
	}()
	<-g.entered
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	close(g.release)
	require.Eventually(t, func() bool { return len(e.pool.Entries()) == 1 }, 5*time.Second, 5*time.Millisecond, "the abandoned entry closes")

	require.NoError(t, e.pool.Close(ctx))
	_, err = e.pool.Acquire(ctx, stdioSpec("fs"), e.newView("s3", "fs", `{}`, viewtest.NewRegistry(), nil))
	require.ErrorIs(t, err, pool.ErrClosed)
}

func TestPoolClose(t *testing.T) {
	ctx := context.Background()
	up := newUpstream(t, "fs", "read")
	e := newEnv(t, pool.Options{}, up)
	reg := viewtest.NewRegistry()
	h := e.acquire(stdioSpec("fs"), "s1", `{}`, reg)
	require.NoError(t, e.pool.Close(ctx))
	assert.Empty(t, reg.Servers())
	assert.Empty(t, e.pool.Entries())
	assert.Equal(t, pool.StateClosed, h.Entry().State())
	_, err := h.RefreshMetadata(ctx, json.RawMessage(`{"trust":true}`))
	require.ErrorIs(t, err, pool.ErrTerminal)
	require.NoError(t, h.Release(ctx))
	c := e.counters.Snapshot()
	assert.Equal(t, c.Connects, c.Disconnects)
	assert.Equal(t, c.Acquires, c.Releases)
}

// TestPoolCloseWaitsForBackgroundCloses: a release whose context has ended
// leaves the close of the upstream session to finish in the background;
// Close waits for it.
func TestPoolCloseWaitsForBackgroundCloses(t *testing.T) {
	up := newUpstream(t, "fs", "read")
	gate := make(chan struct{})
	p := pool.New(pool.Options{Logger: quiet, Dialer: func(ctx context.Context, _ pool.Spec) (mcp.Transport, error) {
		tr, err := up.Transport(ctx)
		if err != nil {
			return nil, err
		}
		return slowClose{tr, gate}, nil
	}})
	v := view.New(view.Config{Session: "s1", Server: "fs", Registry: viewtest.NewRegistry(), Counters: &opcount.Counters{}, Policy: metakey.Reference{}, Logger: quiet})
	h, err := p.Acquire(context.Background(), stdioSpec("fs"), v)
	require.NoError(t, err)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, h.Release(gone), "the last release starts the close and does not wait for it")

	closed := make(chan error, 1)
	go func() { closed <- p.Close(context.Background()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while an upstream session was still closing", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	require.NoError(t, <-closed)
}

// TestPoolCloseCutsShortAttempts: Close ends the connection attempts under
// way, a first connect and a restart, each stuck in a dial that only its
// context can end, and returns after they have: nothing connects after
// Close returned nil.
func TestPoolCloseCutsShortAttempts(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "connect", true: "restart"}[restart], func(t *testing.T) {
			ctx := context.Background()
			up := newUpstream(t, "fs", "read")
			e := newEnv(t, pool.Options{}, up)
			var h *pool.Handle
			if restart {
				h = e.acquire(stdioSpec("fs"), "s1", `{}`, viewtest.NewRegistry())
			}
			entered, ended := make(chan struct{}, 1), make(chan error, 1)
			hang := func(ctx context.Context, _ pool.Spec) error {
				entered <- struct{}{}
				<-ctx.Done() // a dial to an upstream that never answers
				ended <- ctx.Err()
				return ctx.Err()
			}
			e.beforeDial.Store(&hang)
			attempt := make(chan error, 1)
			go func() {
				if restart {
					attempt <- h.Entry().Restart(ctx)
					return
				}
				_, err := e.pool.Acquire(ctx, stdioSpec("fs"), e.newView("s2", "fs", `{}`, viewtest.NewRegistry(), nil))
				attempt <- err
			}()
			<-entered

			short, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			require.NoError(t, e.pool.Close(short), "Close ends the attempt instead of waiting out its timeout")
			select {
			case err := <-ended:
				require.ErrorIs(t, err, context.Canceled, "the dial's context was cancelled by Close")
			default:
				t.Fatal("Close returned before the attempt under way ended")
			}
			require.ErrorIs(t, <-attempt, pool.ErrTerminal)
			closedAt := e.counters.Snapshot()
			require.Never(t, func() bool { return e.counters.Snapshot().Connects > closedAt.Connects },
				100*time.Millisecond, 5*time.Millisecond, "nothing connects after Close returned")
			assert.Empty(t, e.pool.Entries())
		})
	}
}

// slowClose is a transport whose connections' Close waits for gate.
type slowClose struct {
	mcp.Transport
	gate chan struct{}
}

func (t slowClose) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return slowConn{c, t.gate}, nil
}

type slowConn struct {
	mcp.Connection
	gate chan struct{}
}

func (c slowConn) Close() error {
	<-c.gate
	return c.Connection.Close()
}

// TestSessionForwarding: Session returns the live upstream session, and a
// tool call through it reaches the upstream.
func TestSessionForwarding(t *testing.T) {
	ctx := context.Background()
	up := newUpstream(t, "fs", "read")
	e := newEnv(t, pool.Options{}, up)
	h := e.acquire(stdioSpec("fs"), "s1", `{}`, viewtest.NewRegistry())
	res, err := h.Conn().CallTool(ctx, &mcp.CallToolParams{Name: "read", Arguments: map[string]any{"path": "x"}})
	require.NoError(t, err)
	require.Len(t, res.Content, 1)
	assert.Equal(t, "fs/read says hi", res.Content[0].(*mcp.TextContent).Text)
}

// TestPaginatedDiscovery: listings are followed page by page (the upstream
// serves two items per page).
func TestPaginatedDiscovery(t *testing.T) {
	up := newUpstream(t, "fs", "a", "b", "c", "d", "e")
	e := newEnv(t, pool.Options{}, up)
	reg := viewtest.NewRegistry()
	h := e.acquire(stdioSpec("fs"), "s1", `{}`, reg)
	assert.Equal(t, []string{"a", "b", "c", "d", "e"}, snapshotToolNames(h.Entry().Snapshot()))
	assert.Equal(t, []string{"a", "b", "c", "d", "e"}, reg.ToolNames("fs"))
	assert.Equal(t, []string{"greet"}, reg.PromptNames("fs"))
	assert.Equal(t, []string{"file:///readme"}, reg.ResourceURIs("fs"))
}

// TestHammer runs acquire, release, refresh, restart and upstream changes
// from many goroutines, then checks the invariants: refcounts equal live
// handles, no view on a closed entry, and every live session's registry
// holds the projection of its last settings on the final snapshot.
func TestHammer(t *testing.T) {
	ctx := context.Background()
	up := newUpstream(t, "fs", "t0", "t1", "t2")
	e := newEnv(t, pool.Options{CrashRestarts: 1 << 20}, up)
	pooled := stdioSpec("fs")
	unpooled := pooled.Clone()
	unpooled.Pooled = false
	settings := []string{
		`{}`, `{"trust":true}`, `{"includeTools":["t1","t3(x)"]}`, `{"excludeTools":["t0","t2"]}`,
		`{"alwaysLoadTools":true,"includeTools":[]}`, `{"excludeTools":[]}`, `{"trust":false,"excludeTools":["t4"]}`,
	}

	type session struct {
		name     string
		reg      *viewtest.Registry
		view     *view.View
		handle   *pool.Handle
		settings string
	}
	const nSessions = 8
	sessions := make([]*session, nSessions)
	for i := range sessions {
		s := &session{name: fmt.Sprint("s", i), reg: viewtest.NewRegistry(), settings: settings[i%len(settings)]}
		s.view = e.newView(s.name, "fs", s.settings, s.reg, nil)
		sessions[i] = s
	}

	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() { // upstream churn
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			name := fmt.Sprint("t", i%6)
			if i%3 == 2 {
				up.RemoveTool(name)
			} else {
				up.AddTool(name)
			}
		}
	})
	var liveMu sync.Mutex
	liveSet := map[*pool.Handle]bool{}
	bg.Go(func() { // occasional explicit restarts of a live entry
		for {
			select {
			case <-stop:
				return
			case <-time.After(15 * time.Millisecond):
			}
			up.Kill() // the newest connection crashes and restarts itself
			var entry *pool.Entry
			liveMu.Lock()
			for h := range liveSet {
				entry = h.Entry()
				break
			}
			liveMu.Unlock()
			if entry != nil {
				// ErrTerminal when its last handle went meanwhile.
				if err := entry.Restart(ctx); err != nil {
					assert.ErrorIs(t, err, pool.ErrTerminal)
				}
			}
		}
	})

	release := func(s *session) {
		liveMu.Lock()
		delete(liveSet, s.handle)
		liveMu.Unlock()
		assert.NoError(t, s.handle.Release(ctx))
		s.handle = nil
	}
	var wg sync.WaitGroup
	for i, s := range sessions {
		wg.Go(func() {
			spec := pooled
			if i%4 == 3 {
				spec = unpooled
			}
			for j := range 60 {
				// A hammer: the pause (0 to 2 ms) varies the interleaving of
				// acquires, releases and kills; nothing is waited for.
				time.Sleep(time.Duration(j%3) * time.Millisecond)
				switch {
				case s.handle == nil:
					h, err := e.pool.Acquire(ctx, spec, s.view)
					if err != nil {
						// A kill hit the connect: the reconciler would retry.
						assert.ErrorIs(t, err, pool.ErrTerminal)
						assert.False(t, s.view.Attached())
						continue
					}
					s.handle = h
					liveMu.Lock()
					liveSet[h] = true
					liveMu.Unlock()
				case j%7 == 6:
					release(s)
				default:
					next := settings[(i*3+j)%len(settings)]
					_, err := s.handle.RefreshMetadata(ctx, json.RawMessage(next))
					if err != nil {
						// The entry failed (a kill during its restart): the
						// refresh changed nothing; the reconciler releases.
						assert.ErrorIs(t, err, pool.ErrTerminal)
						release(s)
						continue
					}
					s.settings = next
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	bg.Wait()

	// As a reconcile pass would: replace handles of failed entries.
	for i, s := range sessions {
		if s.handle != nil && s.handle.Entry().State().Terminal() {
			release(s)
			spec := pooled
			if i%4 == 3 {
				spec = unpooled
			}
			h, err := e.pool.Acquire(ctx, spec, s.view)
			require.NoError(t, err)
			s.handle = h
		}
	}

	// Let the last upstream changes arrive, then check.
	live := map[*pool.Entry]int{}
	for _, s := range sessions {
		if s.handle != nil {
			live[s.handle.Entry()]++
		}
	}
	for entry := range live {
		require.Eventually(t, func() bool {
			return cmp.Equal(up.ToolNames(), snapshotToolNames(entry.Snapshot()))
		}, 5*time.Second, 5*time.Millisecond)
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		require.NoError(t, entry.Settle(sctx))
		cancel()
	}
	infos := e.pool.Entries()
	for _, info := range infos {
		assert.NotEqual(t, pool.StateClosed, info.State, "closed entries are not listed")
	}
	for entry, n := range live {
		info := entry.Info()
		assert.Equal(t, pool.StateReady, info.State, info.ID)
		assert.Equal(t, n, info.Refs, "refcount of %s equals live handles", info.ID)
		assert.Equal(t, n, info.Views, info.ID)
	}
	assert.Len(t, infos, len(live), "no entry without a live handle")
	for _, s := range sessions {
		if s.handle == nil {
			assert.Empty(t, s.reg.Servers(), "%s released: nothing registered", s.name)
			assert.False(t, s.view.Attached())
			continue
		}
		assert.Equal(t, s.settings, string(s.view.Settings()), s.name)
		requireProjection(t, s.reg, "fs", s.settings, s.handle.Entry().Snapshot())
	}
	c := e.counters.Snapshot()
	t.Logf("hammer churn: %+v", c)
	nLive := 0
	for _, n := range live {
		nLive += n
	}
	assert.Equal(t, int64(nLive), c.Acquires-c.Releases)

	for _, s := range sessions {
		if s.handle != nil {
			require.NoError(t, s.handle.Release(ctx))
		}
	}
	assert.Empty(t, e.pool.Entries())
	c = e.counters.Snapshot()
	assert.Equal(t, c.Connects, c.Disconnects, "every connection closed")
}

// TestDiscoverWithoutPool: a caller running its own connection (the legacy
// single-session mode) discovers with Discover and drives a view itself.
func TestDiscoverWithoutPool(t *testing.T) {
	ctx := context.Background()
	up := newUpstream(t, "fs", "a", "b", "c")
	tr, err := up.Transport(ctx)
	require.NoError(t, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "legacy"}, nil).Connect(ctx, tr, nil)
	require.NoError(t, err)
	defer func() { _ = cs.Close() }()
	snap, err := pool.Discover(ctx, cs)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "c"}, snapshotToolNames(snap))
	require.Len(t, snap.Prompts, 1)
	require.Len(t, snap.Resources, 1)

	reg := viewtest.NewRegistry()
	v := view.New(view.Config{Session: "solo", Server: "fs", Registry: reg, Counters: &opcount.Counters{}, Policy: metakey.Reference{}, Settings: json.RawMessage(`{"excludeTools":["b"]}`), Logger: quiet})
	att, err := v.Attach(nil)
	require.NoError(t, err)
	require.NoError(t, att.Apply(ctx, snap))
	assert.Equal(t, []string{"a", "c"}, reg.ToolNames("fs"))
}

// TestRestartFailure: a restart that cannot reconnect leaves the entry
// failed with its views withdrawn, and says so.
func TestRestartFailure(t *testing.T) {
	ctx := context.Background()
	up := newUpstream(t, "fs", "read")
	e := newEnv(t, pool.Options{}, up)
	reg := viewtest.NewRegistry()
	h := e.acquire(stdioSpec("fs"), "s1", `{}`, reg)
	errDown := errors.New("upstream binary missing")
	fail := func(context.Context, pool.Spec) error { return errDown }
	e.beforeDial.Store(&fail)
	err := h.Entry().Restart(ctx)
	require.ErrorIs(t, err, pool.ErrTerminal)
	require.ErrorIs(t, err, errDown)
	assert.Equal(t, pool.StateFailed, h.Entry().State())
	assert.ErrorIs(t, h.Entry().Info().Err, errDown)
	assert.Empty(t, reg.Servers())
	assert.ErrorIs(t, view.Of(h).Err(), errDown)
	_, err = h.RefreshMetadata(ctx, json.RawMessage(`{}`))
	require.ErrorIs(t, err, pool.ErrTerminal)
	require.NoError(t, h.Release(ctx))
	assert.Empty(t, e.pool.Entries())
}

// TestRestartDoesNotWaitForHungCalls: an explicit restart of an upstream
// that never answers a call under way replaces the connection at once, and
// the call fails, instead of the restart waiting for an answer that never
// comes (mcp.ClientSession.Close waits for the requests under way).
func TestRestartDoesNotWaitForHungCalls(t *testing.T) {
	up := newUpstream(t, "fs", "read")
	hung := make(chan struct{})
	up.Server.AddTool(&mcp.Tool{Name: "hang", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		close(hung)
		<-t.Context().Done() // never answers, not even when cancelled
		return nil, ctx.Err()
	})
	e := newEnv(t, pool.Options{}, up)
	h := e.acquire(stdioSpec("fs"), "s1", `{}`, viewtest.NewRegistry())
	called := make(chan error, 1)
	go func() {
		_, err := h.Conn().CallTool(context.Background(), &mcp.CallToolParams{Name: "hang", Arguments: map[string]any{}})
		called <- err
	}()
	<-hung

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, h.Entry().Restart(ctx), "the restart waited for the hung call")
	assert.Equal(t, pool.StateReady, h.Entry().State())
	select {
	case err := <-called:
		require.Error(t, err, "the call on the closed connection")
	case <-ctx.Done():
		t.Fatal("the call under way on the old connection did not end")
	}
	assert.Equal(t, 2, up.Dials())
}

// projectGate is the reference policy whose Project, while armed, reports
// that it was entered and waits to be let go.
type projectGate struct {
	metakey.Reference
	armed   *atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (p projectGate) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	if p.armed.CompareAndSwap(true, false) {
		p.entered <- struct{}{}
		<-p.release
	}
	return p.Reference.Project(ctx, req)
}

// signalHandler is a slog handler sending each record's message to msgs
// (dropped when nobody listens).
type signalHandler struct{ msgs chan string }

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.msgs <- r.Message:
	default:
	}
	return nil
}

func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h signalHandler) WithGroup(string) slog.Handler { return h }

// TestCrashRightAfterRestartIsRestarted: an upstream that goes away again
// just after a restart published its new connection, while that restart
// is still fanning its snapshot out, is restarted once more. It must not
// join the restart that is finishing (which made the connection that just
// went away): the entry would stay ready on a dead connection, with no
// watch left to notice it, every call and rediscovery failing and no
// reconciling call replacing it (a ready entry is healthy to them).
func TestCrashRightAfterRestartIsRestarted(t *testing.T) {
	up := newUpstream(t, "fs", "read")
	msgs := make(chan string, 64)
	e := newEnv(t, pool.Options{CrashRestarts: 5, Logger: slog.New(signalHandler{msgs})}, up)
	p := projectGate{armed: new(atomic.Bool), entered: make(chan struct{}), release: make(chan struct{})}
	reg := viewtest.NewRegistry()
	h, err := e.pool.Acquire(context.Background(), stdioSpec("fs"), e.newView("s1", "fs", `{}`, reg, p))
	require.NoError(t, err)
	wentAway := func() {
		t.Helper()
		for {
			select {
			case m := <-msgs:
				if m == "upstream went away, restarting" {
					return
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the entry did not notice its upstream going away")
			}
		}
	}

	p.armed.Store(true)
	up.Kill()
	wentAway()
	<-p.entered // the restart published its connection and fans it out
	require.Equal(t, pool.StateReady, h.Entry().State())
	up.Kill() // the new connection goes away at once
	wentAway()
	// The crash's restart begins (its own, not the one fanning out, which
	// would leave the entry ready on the dead connection).
	require.Eventually(t, func() bool { return h.Entry().State() == pool.StateRestarting }, mcptest.EventWithin, 5*time.Millisecond,
		"the second crash did not start a restart of its own")
	close(p.release)

	require.Eventually(t, func() bool { return up.Dials() == 3 }, mcptest.EventWithin, 5*time.Millisecond,
		"the second crash was not restarted")
	settle(t, h)
	require.Equal(t, pool.StateReady, h.Entry().State())
	cs := h.Conn()
	require.NotNil(t, cs)
	_, err = cs.ListTools(context.Background(), nil)
	require.NoError(t, err, "the entry serves a live connection")
	assert.Equal(t, []string{"read"}, reg.ToolNames("fs"))
}
