package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
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
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/view"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

// hammerSeed returns the seed of the hammer (HAMMER_SEED overrides it).
func hammerSeed(t *testing.T, def uint64) uint64 {
	if s := os.Getenv("HAMMER_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		def = n
	}
	t.Logf("seed %d (HAMMER_SEED=%d to replay)", def, def)
	return def
}

// upstreamSnapshot lists the upstream directly, through a connection of its
// own (not the pool's), as the oracle of what it offers now.
func upstreamSnapshot(t *testing.T, u *mcptest.Upstream) *pool.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), mcptest.Within(t, mcptest.EventWithin))
	defer cancel()
	ct, sc, err := mcptest.Connect(ctx, u.Server)
	require.NoError(t, err)
	defer sc.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "oracle", Version: "1"}, nil).Connect(ctx, ct, nil)
	require.NoError(t, err)
	defer cs.Close()
	snap, err := pool.Discover(ctx, cs)
	require.NoError(t, err)
	return snap
}

// randomOverlay is a random runtime overlay for server.
func randomOverlay(rng *rand.Rand, server string) *config.Server {
	srv := &config.Server{
		Name: server, Command: "/usr/bin/" + server + "-server",
		Args:   []string{"--variant", string(rune('0' + rng.IntN(3)))},
		Pooled: rng.IntN(3) > 0, Disabled: rng.IntN(8) == 0,
	}
	s := randomSettings(rng)
	get := func(k string) json.RawMessage {
		if v, ok := s[k]; ok {
			return v.(json.RawMessage)
		}
		return nil
	}
	srv.Settings = config.Settings{
		Trust: get("trust"), AlwaysLoadTools: get("alwaysLoadTools"),
		IncludeTools: get("includeTools"), ExcludeTools: get("excludeTools"),
	}
	return srv
}

// requireFinal checks the invariants of a quiescent reconciler whose
// desired state is c under policy (no overlays): registries, view keys,
// refcounts, connection counts.
func (e *env) requireFinal(c *config.Config, policy abi.Policy) {
	t := e.t
	t.Helper()
	ctx := context.Background()
	e.settleAll()
	// The upstreams as they are now, listed independently of the pool.
	snaps := make(map[string]*pool.Snapshot)
	for name, u := range e.ups {
		snaps[name] = upstreamSnapshot(t, u)
	}
	for _, s := range hammerSessions {
		reg := e.reg(s)
		sess := c.Sessions[s]
		if sess == nil {
			require.Empty(t, reg.Servers(), "session %q was removed but keeps registrations", s)
			require.Empty(t, e.rec.Bindings(s), "session %q was removed but keeps bindings", s)
			continue
		}
		var want []string
		for _, server := range hammerServers {
			_, settings, enabled := sess.Effective(server)
			h := e.rec.Handle(s, server)
			if !enabled {
				require.Nil(t, h, "session %q holds disabled/unused server %q", s, server)
				continue
			}
			require.NotNil(t, h, "session %q has no handle for %q (bindings %+v)", s, server, e.rec.Bindings(s))
			want = append(want, server)
			// Registry: the reference projection of what the upstream
			// offers now, under the effective settings.
			p, err := view.Project(ctx, policy, settings, snaps[server])
			require.NoError(t, err)
			if diff := cmp.Diff(viewtest.StateOf(p), reg.State(server)); diff != "" {
				t.Fatalf("session %q, server %q (settings %s, entry %s v%d): registry (-want +got):\n%s",
					s, server, settings, h.ID(), h.Entry().Info().Version, diff)
			}
			// The view's cached key is the policy's key of the desired
			// settings.
			wantKey, err := view.CanonicalKey(ctx, policy, settings)
			require.NoError(t, err)
			v := view.Of(h)
			require.NoError(t, v.Err(), "session %q server %q", s, server)
			require.Equal(t, wantKey, v.Key(), "session %q server %q: view key (view settings %s, desired %s)", s, server, v.Settings(), settings)
			viewKey, err := view.CanonicalKey(ctx, policy, v.Settings())
			require.NoError(t, err)
			require.Equal(t, wantKey, viewKey, "session %q server %q: view settings %s mean other than desired %s", s, server, v.Settings(), settings)
			require.Equal(t, pool.StateReady, h.Entry().State())
		}
		slices.Sort(want)
		require.Equal(t, want, nilIfEmpty(reg.Servers()), "servers registered in session %q", s)
		for _, b := range e.rec.Bindings(s) {
			require.False(t, b.Overlay)
			require.Empty(t, b.Error, "session %q server %q", s, b.Server)
			require.Equal(t, b.Desired, b.Identity)
		}
	}
	e.requireRefsMatch()
	// No leaked connection: every live entry holds exactly one upstream
	// session, every other one was closed.
	entries := e.pool.Entries()
	for _, info := range entries {
		require.Equal(t, pool.StateReady, info.State, "entry %s", info.ID)
	}
	v := e.snap()
	require.Equal(t, int64(len(entries)), v.Connects-v.Disconnects, "connects %d - disconnects %d vs %d live entries", v.Connects, v.Disconnects, len(entries))
}

func TestHammerInvariants(t *testing.T) { hammerInvariants(t, 0, false) }

// With crash restarts, slow dials and failing dials.
func TestHammerInvariantsCrashRestart(t *testing.T) { hammerInvariants(t, 2, true) }

// newEnvWith is newEnv with crash restarts and a dial that may be slowed
// down.
func newEnvWith(t *testing.T, crashes int, slow func() time.Duration, ups ...*mcptest.Upstream) *env {
	e := newEnv(t, ups...)
	// Replace the pool and reconciler newEnv made (they hold nothing yet).
	ctx := context.Background()
	require.NoError(t, e.rec.Close(ctx))
	require.NoError(t, e.pool.Close(ctx))
	dial := e.dial
	e.pool = pool.New(pool.Options{Counters: e.counters, Logger: quiet, CrashRestarts: crashes, Dialer: func(ctx context.Context, spec pool.Spec) (mcp.Transport, error) {
		if slow != nil {
			time.Sleep(slow()) // the slowed-down dial is the chaos under test
		}
		return dial(ctx, spec)
	}})
	e.rec = reconcile.New(reconcile.Options{
		Pool: e.pool, Policy: ref, Counters: e.counters, Logger: quiet, Registry: e.registry,
	})
	return e
}

func hammerInvariants(t *testing.T, crashes int, chaos bool) {
	seed := hammerSeed(t, 1)
	baseG := runtime.NumGoroutine()
	fs := newUpstream("fs", "read", "write", "list")
	git := newUpstream("git", "log", "diff")
	demo := newUpstream("demo")
	var slow func() time.Duration
	var slowMu sync.Mutex
	srng := rand.New(rand.NewPCG(seed, 70))
	if chaos {
		slow = func() time.Duration {
			slowMu.Lock()
			defer slowMu.Unlock()
			return time.Duration(srng.IntN(3)) * time.Millisecond
		}
	}
	e := newEnvWith(t, crashes, slow, fs, git, demo)
	ctx := context.Background()
	var wg sync.WaitGroup
	var stop atomic.Bool

	e.apply(randomCfg(rand.New(rand.NewPCG(seed, 1))).build(t))

	for g := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(g)+10))
			for range hammerN(25) {
				_, err := e.rec.Apply(ctx, randomCfg(rng).build(t))
				_ = err // crashes make acquires fail; errors are expected
			}
		})
	}
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(seed, 20))
		for range hammerN(50) {
			session := hammerSessions[rng.IntN(len(hammerSessions))]
			server := hammerServers[rng.IntN(len(hammerServers))]
			if rng.IntN(2) == 0 {
				_, err := e.rec.DeleteOverlay(ctx, session, server)
				if err != nil && !errors.Is(err, reconcile.ErrNoOverlay) {
					assert.ErrorIs(t, err, pool.ErrTerminal)
				}
				continue
			}
			_, _ = e.rec.PutOverlay(ctx, session, randomOverlay(rng, server))
		}
	})
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(seed, 40))
		policies := []abi.Policy{ref, altPolicy{}, bytesPolicy{}}
		for range hammerN(12) {
			_, _ = e.rec.SetPolicy(ctx, policies[rng.IntN(len(policies))])
		}
	})
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(seed, 30))
		for range hammerN(12) {
			server := hammerServers[rng.IntN(len(hammerServers))]
			if rng.IntN(2) == 0 {
				_ = e.rec.Restart(ctx, server)
				continue
			}
			session := hammerSessions[rng.IntN(len(hammerSessions))]
			_ = e.rec.Teardown(ctx, session, server)
		}
	})
	// list_changed: tools come and go on fs and git.
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(seed, 50))
		on := map[string]bool{}
		for range hammerN(40) {
			u, tool := fs, "dyn"
			if rng.IntN(2) == 0 {
				u, tool = git, "wdyn"
			}
			key := u.Name + "/" + tool
			if on[key] {
				u.Server.RemoveTools(tool)
			} else {
				u.AddTool(tool)
			}
			on[key] = !on[key]
			time.Sleep(time.Duration(rng.IntN(25)) * time.Millisecond) // go-sdk coalesces within 10ms; pacing, not synchronisation
		}
	})
	if chaos {
		// Dials failing now and then.
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, 80))
			for range hammerN(10) {
				server := hammerServers[rng.IntN(len(hammerServers))]
				e.setFailing(server, errDial)
				time.Sleep(time.Duration(2+rng.IntN(10)) * time.Millisecond) // pacing, not synchronisation
				e.setFailing(server, nil)
				time.Sleep(time.Duration(2+rng.IntN(10)) * time.Millisecond)
			}
		})
	}
	// Crashes.
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(seed, 60))
		ups := []*mcptest.Upstream{fs, git, demo}
		for range hammerN(8) {
			time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond) // pacing, not synchronisation
			ups[rng.IntN(len(ups))].KillAll()
		}
	})
	var readers sync.WaitGroup
	readers.Go(func() {
		for !stop.Load() {
			for _, s := range e.rec.State().Sessions {
				for _, b := range s.Servers {
					if h := e.rec.Handle(s.Name, b.Server); h != nil {
						_ = h.Conn()
						_ = view.Of(h).Applied()
					}
				}
			}
		}
	})
	wg.Wait()
	stop.Store(true)
	readers.Wait()
	t.Logf("hammer churn: %+v, failures %d", e.snap(), e.counters.Failures.Load())
	e.waitCaughtUp() // the last crashes and list changes reach their entries
	e.settleAll()

	_, err := e.rec.SetPolicy(ctx, ref)
	require.NoError(t, err)
	for _, s := range hammerSessions {
		for _, server := range hammerServers {
			_, _ = e.rec.DeleteOverlay(ctx, s, server)
		}
	}
	final := randomCfg(rand.New(rand.NewPCG(seed, 99)))
	final.session("a")
	c := final.build(t)
	e.apply(c)
	e.requireFinal(c, ref)

	// A second Apply of the same config changes nothing at all.
	before := e.snap()
	sum := e.apply(c)
	require.Zero(t, sum.Acquired+sum.Released+sum.RegistryOps, "%+v", sum)
	d := e.delta(before)
	require.Zero(t, d.Connects+d.Disconnects+d.RegistryOps+d.Acquires+d.Releases, "%+v", d)

	// Close: no entry, no connection, no goroutine left.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, e.rec.Close(cctx))
	require.NoError(t, e.pool.Close(cctx))
	require.Empty(t, e.pool.Entries())
	v := e.snap()
	require.Equal(t, v.Connects, v.Disconnects, "connections leaked after Close")
	require.Equal(t, v.Acquires, v.Releases, "handles leaked after Close")
	for _, s := range hammerSessions {
		require.Empty(t, e.reg(s).Servers(), "session %q keeps registrations after Close", s)
	}
	mcptest.WaitFor(t, mcptest.EventWithin, func() bool { return runtime.NumGoroutine() <= baseG }, mcptest.Stacks,
		"goroutines after Close back to the %d before", baseG)
}

// equivalentSettings returns a canonical-equivalent rewriting of s (as
// made by randomSettings): other bytes, the same canonical form.
// With keep (an override's settings, where a present value replaces the
// base's and an absent one inherits it), present and absent keys stay so.
func equivalentSettings(rng *rand.Rand, s map[string]any, keep bool) map[string]any {
	out := map[string]any{}
	for k, v := range s {
		out[k] = v
	}
	str := func(k string) string {
		if v, ok := out[k]; ok {
			return string(v.(json.RawMessage))
		}
		return ""
	}
	// excludeTools: missing, null and [] are one; lists reorder and repeat.
	switch str("excludeTools") {
	case "", "null", "[]":
		opts := []string{"", "null", "[]"}
		if keep {
			opts = []string{"null", "[]"}
			if str("excludeTools") == "" {
				opts = []string{""}
			}
		}
		if v := opts[rng.IntN(len(opts))]; v == "" {
			delete(out, "excludeTools")
		} else {
			out["excludeTools"] = raw(v)
		}
	case `["write"]`:
		out["excludeTools"] = raw(`["write","write"]`)
	case `["echo","read"]`:
		out["excludeTools"] = raw(`["read","echo","read"]`)
	}
	switch str("includeTools") {
	case "", "null":
		if keep {
			break
		}
		if rng.IntN(2) == 0 {
			delete(out, "includeTools")
		} else {
			out["includeTools"] = raw("null")
		}
	case `["read"]`:
		out["includeTools"] = raw(`["read(path)","read"]`)
	case `["read","log(x)","echo","echo"]`:
		out["includeTools"] = raw(`["echo(a)(b)","log","read"]`)
	case `["list","diff","pid","dyn"]`:
		out["includeTools"] = raw(`["dyn","pid(1)","diff","list","list"]`)
	}
	switch str("alwaysLoadTools") {
	case "", "null", "false":
		opts := []string{"", "null", "false"}
		if keep {
			opts = []string{"null", "false"}
			if str("alwaysLoadTools") == "" {
				opts = []string{""}
			}
		}
		if v := opts[rng.IntN(len(opts))]; v == "" {
			delete(out, "alwaysLoadTools")
		} else {
			out["alwaysLoadTools"] = raw(v)
		}
	}
	switch str("trust") {
	case "", "null":
		if keep {
			break
		}
		if rng.IntN(2) == 0 {
			delete(out, "trust")
		} else {
			out["trust"] = raw("null")
		}
	}
	return out
}

// equivalentCfg rewrites every settings object of c canonically
// equivalently (transport and lists kept).
func equivalentCfg(rng *rand.Rand, c *cfg) *cfg {
	out := c.clone()
	keys := []string{"trust", "alwaysLoadTools", "includeTools", "excludeTools"}
	split := func(m map[string]any) map[string]any {
		s := map[string]any{}
		for _, k := range keys {
			if v, ok := m[k]; ok {
				b, _ := json.Marshal(v)
				s[k] = raw(string(b))
				delete(m, k)
			}
		}
		return s
	}
	for _, m := range out.Servers {
		for k, v := range equivalentSettings(rng, split(m), false) {
			m[k] = v
		}
	}
	for _, sess := range out.Sessions {
		ovs, _ := sess["overrides"].(map[string]any)
		for _, o := range ovs {
			om := o.(map[string]any)
			for k, v := range equivalentSettings(rng, split(om), true) {
				om[k] = v
			}
		}
	}
	return out
}

// TestHammerEquivalentReload: reloads whose settings differ only in bytes
// (the same canonical forms) make no connect, no acquire or release and no
// registry operation, except the ones the racing list_changed itself
// causes (puts and deletes of its tool).
func TestHammerEquivalentReload(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long hammer of random reloads; TestHammer, TestHammerInvariants and TestHammerTrustedReloadRaces stay in -short; run without -short")
	}
	seed := hammerSeed(t, 1)
	fs := newUpstream("fs", "read", "write", "list")
	git := newUpstream("git", "log", "diff")
	e := newEnv(t, fs, git, newUpstream("demo"))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 3))
	for round := range 30 {
		base := randomCfg(rng)
		for _, s := range hammerSessions {
			if base.Sessions[s] == nil {
				base.session(s)
			}
		}
		if round%3 == 0 {
			_, err := e.rec.SetPolicy(ctx, []abi.Policy{ref, altPolicy{}}[rng.IntN(2)])
			require.NoError(t, err)
		}
		c := base.build(t)
		e.apply(c)
		e.settleAll()
		if round%2 == 1 {
			// An untrusted reload next: something failed since.
			e.counters.Failures.Add(1)
		}

		ops := map[string]int{}
		for _, s := range hammerSessions {
			ops[s] = len(e.reg(s).Ops())
		}
		before := e.snap()
		var wg sync.WaitGroup
		rng2 := rand.New(rand.NewPCG(seed, uint64(round)))
		wg.Go(func() {
			fs.AddTool("dyn")
			time.Sleep(time.Duration(rng2.IntN(20)) * time.Millisecond) // pacing, not synchronisation
			fs.Server.RemoveTools("dyn")
		})
		for i := range 3 {
			eq := equivalentCfg(rng, base)
			if os.Getenv("HAMMER_DEBUG") != "" {
				b1, _ := json.Marshal(base)
				b2, _ := json.Marshal(eq)
				t.Logf("round %d.%d\nbase %s\neq   %s", round, i, b1, b2)
			}
			sum := e.apply(eq.build(t))
			require.Zero(t, sum.Acquired+sum.Released, "round %d: %+v", round, sum)
		}
		wg.Wait()
		e.waitCaughtUp() // the list_changed reaches the views
		e.settleAll()
		d := e.delta(before)
		require.Zero(t, d.Connects+d.Disconnects+d.Acquires+d.Releases, "round %d: %+v", round, d)
		for _, s := range hammerSessions {
			for _, op := range e.reg(s).Ops()[ops[s]:] {
				if op.Server != "fs" || !slices.Equal(op.Keys, []string{"dyn"}) {
					t.Fatalf("round %d, session %q: registry op %s not caused by the list_changed; ops %v", round, s, op, e.reg(s).Ops()[ops[s]:])
				}
			}
		}
		e.requireFinal(c, e.rec.Policy())
	}
}

// inPlaceCfg is a config whose structure (sessions, their server lists
// and the servers they override) is fixed, so that reloads change
// override values in place (the reconciler's incremental path).
func inPlaceCfg(rng *rand.Rand) *cfg {
	c := newCfg()
	for _, name := range hammerServers {
		kv := []any{"args", []string{"--variant", "0"}}
		if rng.IntN(12) == 0 {
			kv = []any{"args", []string{"--variant", "1"}}
		}
		if rng.IntN(15) == 0 {
			kv = append(kv, "disabled", true)
		}
		if rng.IntN(4) == 0 {
			for k, v := range randomSettings(rng) {
				kv = append(kv, k, v)
			}
		}
		c.server(name, kv...)
	}
	return hammerOverrides(c, rng, true)
}

// hammerOverrides adds to c the hammer sessions, with fixed server lists
// and random override settings for fs and git; with mayDisable, some of
// those overrides disable their server.
func hammerOverrides(c *cfg, rng *rand.Rand, mayDisable bool) *cfg {
	lists := map[string][]string{"a": nil, "b": {"fs", "git"}, "c": {"fs", "demo", "git"}, "d": nil}
	for _, s := range hammerSessions {
		overrides := map[string]any{}
		for _, srv := range []string{"fs", "git"} {
			o := randomSettings(rng)
			if mayDisable && rng.IntN(6) == 0 {
				o["disabled"] = rng.IntN(2) == 0
			}
			overrides[srv] = o
		}
		kv := []any{"overrides", overrides}
		if lists[s] != nil {
			kv = append(kv, "servers", lists[s])
		}
		c.session(s, kv...)
	}
	return c
}

// TestHammerInPlace drives one reconciler through random value-only
// reloads, overlays, policy swaps, restarts and upstream list changes,
// checking after every step that each registry and view key is what the
// desired settings (overlay or file) give under the current policy.
func TestHammerInPlace(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a long hammer of random reloads; TestHammer, TestHammerInvariants and TestHammerTrustedReloadRaces stay in -short; run without -short")
	}
	seed := hammerSeed(t, 1)
	fs := newUpstream("fs", "read", "write", "list")
	git := newUpstream("git", "log", "diff")
	e := newEnv(t, fs, git, newUpstream("demo"))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 5))
	c := inPlaceCfg(rng).build(t)
	e.apply(c)
	overlays := map[string]map[string]*config.Server{}
	var policy abi.Policy = ref
	on := map[string]bool{}
	var last string
	for step := range 200 {
		switch k := rng.IntN(10); {
		case k < 5:
			cf := inPlaceCfg(rng)
			if rng.IntN(2) == 0 {
				cf = equivalentCfg(rng, cf)
			}
			c = cf.build(t)
			e.apply(c)
			last = "apply"
		case k == 5:
			s, server := hammerSessions[rng.IntN(4)], hammerServers[rng.IntN(3)]
			o := randomOverlay(rng, server)
			_, err := e.rec.PutOverlay(ctx, s, o)
			require.NoError(t, err)
			if overlays[s] == nil {
				overlays[s] = map[string]*config.Server{}
			}
			overlays[s][server] = o
			last = fmt.Sprintf("put overlay %s/%s %s", s, server, o.Metadata())
		case k == 6:
			s, server := hammerSessions[rng.IntN(4)], hammerServers[rng.IntN(3)]
			_, err := e.rec.DeleteOverlay(ctx, s, server)
			if overlays[s][server] == nil {
				require.ErrorIs(t, err, reconcile.ErrNoOverlay)
			} else {
				require.NoError(t, err)
				delete(overlays[s], server)
			}
			last = "delete overlay " + s + "/" + server
		case k == 7:
			policy = []abi.Policy{ref, altPolicy{}, bytesPolicy{}}[rng.IntN(3)]
			_, err := e.rec.SetPolicy(ctx, policy)
			require.NoError(t, err)
			last = "set policy " + policy.Handshake().Name
		case k == 8:
			u, tool := fs, "dyn"
			if rng.IntN(2) == 0 {
				u, tool = git, "wdyn"
			}
			if on[u.Name] {
				u.Server.RemoveTools(tool)
			} else {
				u.AddTool(tool)
			}
			on[u.Name] = !on[u.Name]
			last = "toggle " + u.Name
		default:
			server := hammerServers[rng.IntN(3)]
			if err := e.rec.Restart(ctx, server); err != nil {
				require.ErrorIs(t, err, reconcile.ErrNotBound)
			}
			last = "restart " + server
		}
		e.waitInPlace(c, overlays, policy, "step %d (%s)", step, last)
	}
}

// waitInPlace waits until the reconciler's state is what c, the overlays
// and policy ask for (inPlaceMismatch says nothing): list_changed
// notifications arrive late, and the machine may be loaded, so the wait is
// bounded by mcptest.EventWithin, not a fixed few seconds. On failure it
// says what (format, args) was checked and the last mismatch.
func (e *env) waitInPlace(c *config.Config, overlays map[string]map[string]*config.Server, policy abi.Policy, format string, args ...any) {
	e.t.Helper()
	var msg string
	mcptest.WaitFor(e.t, mcptest.EventWithin, func() bool {
		msg = e.inPlaceMismatch(c, overlays, policy)
		return msg == ""
	}, func() string { return msg }, format, args...)
}

// inPlaceMismatch describes how the reconciler's state differs from what
// c, the overlays and policy ask for ("" if it does not).
func (e *env) inPlaceMismatch(c *config.Config, overlays map[string]map[string]*config.Server, policy abi.Policy) string {
	ctx := context.Background()
	e.settleAll()
	for _, s := range hammerSessions {
		reg := e.reg(s)
		sess := c.Sessions[s]
		var want []string
		for _, server := range hammerServers {
			_, settings, enabled := sess.Effective(server)
			if o := overlays[s][server]; o != nil {
				settings, enabled = o.Metadata(), !o.Disabled
			}
			h := e.rec.Handle(s, server)
			if !enabled {
				if h != nil {
					return fmt.Sprintf("session %q holds unwanted %q", s, server)
				}
				continue
			}
			if h == nil {
				return fmt.Sprintf("session %q has no handle for %q: %+v", s, server, e.rec.Bindings(s))
			}
			want = append(want, server)
			wantKey, err := view.CanonicalKey(ctx, policy, settings)
			if err != nil {
				return err.Error()
			}
			v := view.Of(h)
			if v.Err() != nil || v.Key() != wantKey {
				return fmt.Sprintf("session %q server %q: view key %q (err %v, settings %s), want %q of %s", s, server, v.Key(), v.Err(), v.Settings(), wantKey, settings)
			}
			p, err := view.Project(ctx, policy, settings, h.Entry().Snapshot())
			if err != nil {
				return err.Error()
			}
			if diff := cmp.Diff(viewtest.StateOf(p), reg.State(server)); diff != "" {
				return fmt.Sprintf("session %q server %q (settings %s): registry (-want +got):\n%s", s, server, settings, diff)
			}
			if s := snapTools(upstreamSnapshot(e.t, e.ups[server])); !slices.Equal(s, snapTools(h.Entry().Snapshot())) {
				return fmt.Sprintf("server %q: entry snapshot %v, upstream %v", server, snapTools(h.Entry().Snapshot()), s)
			}
		}
		got := nilIfEmpty(reg.Servers())
		slices.Sort(want)
		if !slices.Equal(want, got) {
			return fmt.Sprintf("session %q registers %v, want %v", s, got, want)
		}
	}
	return ""
}

func snapTools(snap *pool.Snapshot) []string {
	var names []string
	for _, t := range snap.Tools {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	return names
}
