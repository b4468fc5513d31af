package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/session"
	"github.com/wasmhost/wasmhost/view"
)

// variants is the number of distinct metadata variants the reconcile
// benchmarks spread over their sessions: session s uses variant s%variants
// for every server.
const variants = 20

// metadataTopology is the daemon of the reconcile benchmark: 100 sessions
// using 100 servers of 10 tools each, 10,000 views.
var metadataTopology = Topology{Sessions: 100, Servers: 100, ToolsPerServer: 10}

// variantConfig returns t's config in which session s overrides every
// server with Variant(s%variants, gen, form).
func variantConfig(tb testing.TB, t Topology, gen, form int) *config.Config {
	tb.Helper()
	vs := make([]json.RawMessage, variants)
	for v := range vs {
		vs[v] = Variant(v, gen, form, t.ToolsPerServer)
	}
	cfg, err := t.Config(nil, func(s int) json.RawMessage { return vs[s%variants] })
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

func mustApply(tb testing.TB, w *World, cfg *config.Config) {
	tb.Helper()
	if _, err := w.Apply(context.Background(), cfg); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkReconcileMetadata reconciles 10,000 views (100 sessions x 100
// servers, 20 metadata variants) after a metadata-only change that touches
// every view: each iteration moves every variant to a new generation (new
// keys, and every visible tool's trust flag flips), so each view re-keys,
// re-projects and replays. The config for the next generation is built and
// parsed with the timer stopped. The same reconcile runs with the wasm
// plugin (target) and the native reference (baseline).
func BenchmarkReconcileMetadata(b *testing.B) {
	for _, np := range policies(b) {
		b.Run(np.name, func(b *testing.B) {
			counting := Count(np.p)
			w := NewWorld(metadataTopology, counting, WorldOptions{})
			defer w.Close()
			mustApply(b, w, variantConfig(b, metadataTopology, nextGeneration(), 0))
			var calls, ops int64
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				cfg := variantConfig(b, metadataTopology, nextGeneration(), 0)
				runtime.GC()
				c0, o0 := counting.Calls(), w.RegistryOps()
				b.StartTimer()
				mustApply(b, w, cfg)
				b.StopTimer()
				calls += counting.Calls().Sub(c0).Total()
				ops += w.RegistryOps() - o0
				b.StartTimer()
			}
			b.ReportMetric(float64(calls)/float64(b.N), "plugin-calls/op")
			b.ReportMetric(float64(ops)/float64(b.N), "registry-ops/op")
		})
	}
}

// TestReconcileMetadataPluginCalls checks what BenchmarkReconcileMetadata
// relies on, on a smaller daemon: a metadata change touching every view
// calls the policy at most once per distinct settings object plus once per
// distinct (key, snapshot) pair, whatever the number of views (in fact once
// to canonicalize and a few times to project every pair in batches); and
// every view ends up with the new projection.
func TestReconcileMetadataPluginCalls(t *testing.T) {
	topo := Topology{Sessions: 60, Servers: 8, ToolsPerServer: 10}
	for _, np := range policies(t) {
		t.Run(np.name, func(t *testing.T) {
			counting := Count(np.p)
			w := NewWorld(topo, counting, WorldOptions{})
			defer func() { require.NoError(t, w.Close()) }()
			mustApply(t, w, variantConfig(t, topo, nextGeneration(), 0))
			for range 2 {
				gen := nextGeneration()
				before := counting.Calls()
				ops := w.RegistryOps()
				mustApply(t, w, variantConfig(t, topo, gen, 0))
				calls := counting.Calls().Sub(before)
				distinctSettings := int64(variants)
				pairs := int64(variants * topo.Servers)
				t.Logf("generation %d: %+v, registry ops %d", gen, calls, w.RegistryOps()-ops)
				require.LessOrEqual(t, calls.Total(), distinctSettings+pairs,
					"plugin calls for %d views, %d distinct settings, %d (key, snapshot) pairs", topo.Views(), distinctSettings, pairs)
				// Both policies batch: the pairs are projected in at most
				// one batch call per worker, none one by one.
				require.Zero(t, calls.Project, "projections made one by one")
				require.Positive(t, calls.ProjectBatch)
				require.LessOrEqual(t, calls.ProjectBatch, int64(runtime.GOMAXPROCS(0)))
				require.Positive(t, w.RegistryOps()-ops)
				for s := range topo.Sessions {
					reg := w.Registry(SessionName(s)).(*Registry)
					for i := range topo.Servers {
						tools := reg.Tools(ServerName(i))
						require.NotEmpty(t, tools, "session %d, server %d", s, i)
						for _, tool := range tools {
							require.Equal(t, gen%2 == 0, tool.Meta[view.MetaTrust], "session %d, server %d, tool %s", s, i, tool.Name)
						}
					}
				}
			}
		})
	}
}

// BenchmarkReconcileEquivalent reconciles the 10,000 views of
// BenchmarkReconcileMetadata, with the wasm plugin, after a change to
// canonical-equivalent settings (target: new bytes every iteration, same
// keys) and after no change at all (baseline: the identical config again).
// TestEquivalentReloadNoChurn checks that the equivalent change makes no
// connection, registry operation or notification.
func BenchmarkReconcileEquivalent(b *testing.B) {
	for _, mode := range []string{"equivalent", "identical"} {
		b.Run(mode, func(b *testing.B) {
			counting := Count(wasmPolicy(b))
			w := NewWorld(metadataTopology, counting, WorldOptions{})
			defer w.Close()
			gen := nextGeneration()
			cfg := variantConfig(b, metadataTopology, gen, 0)
			mustApply(b, w, cfg)
			form := 0
			var calls int64
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				if mode == "equivalent" {
					form++
					cfg = variantConfig(b, metadataTopology, gen, form)
				}
				runtime.GC()
				c0, v0 := counting.Calls(), w.Counters.Snapshot()
				b.StartTimer()
				mustApply(b, w, cfg)
				b.StopTimer()
				d := w.Counters.Snapshot().Sub(v0)
				if d.Connects != 0 || d.RegistryOps != 0 || d.Notifications != 0 || d.Replays != 0 {
					b.Fatalf("an equivalent reload caused churn: %+v", d)
				}
				calls += counting.Calls().Sub(c0).Total()
				b.StartTimer()
			}
			b.ReportMetric(float64(calls)/float64(b.N), "plugin-calls/op")
		})
	}
	// The pair in one loop: each iteration applies the identical config to
	// one world and an equivalent one to another, timed apart, in an order
	// that alternates. A slow moment of the machine then falls on both
	// sides of a pair or on neither, and the median of the pairs' ratios
	// ("ratio") is what target e reads; run one after the other, the two
	// sub-benchmarks above see different minutes of a shared machine.
	b.Run("paired", func(b *testing.B) {
		counting := Count(wasmPolicy(b))
		eqW := NewWorld(metadataTopology, counting, WorldOptions{})
		defer eqW.Close()
		idW := NewWorld(metadataTopology, counting, WorldOptions{})
		defer idW.Close()
		gen := nextGeneration()
		idCfg := variantConfig(b, metadataTopology, gen, 0)
		mustApply(b, eqW, idCfg)
		mustApply(b, idW, idCfg)
		form := 0
		var eqs, ids, ratios []float64
		timed := func(w *World, cfg *config.Config) float64 {
			runtime.GC()
			v0 := w.Counters.Snapshot()
			start := time.Now()
			mustApply(b, w, cfg)
			took := time.Since(start)
			if d := w.Counters.Snapshot().Sub(v0); d.Connects != 0 || d.RegistryOps != 0 || d.Notifications != 0 || d.Replays != 0 {
				b.Fatalf("a reload caused churn: %+v", d)
			}
			return float64(took.Nanoseconds())
		}
		for b.Loop() {
			form++
			eqCfg := variantConfig(b, metadataTopology, gen, form)
			var eq, id float64
			if form%2 == 0 {
				eq, id = timed(eqW, eqCfg), timed(idW, idCfg)
			} else {
				id, eq = timed(idW, idCfg), timed(eqW, eqCfg)
			}
			eqs, ids, ratios = append(eqs, eq), append(ids, id), append(ratios, eq/id)
		}
		b.ReportMetric(medianOf(eqs), "equivalent-ns")
		b.ReportMetric(medianOf(ids), "identical-ns")
		b.ReportMetric(medianOf(ratios), "ratio")
	})
	// The one plugin call an equivalent reload cannot avoid: canonicalizing
	// the distinct settings it has not seen (new bytes every iteration, so
	// neither the plugin's memo nor the reconciler's answers).
	b.Run("canonicalize", func(b *testing.B) {
		p := wasmPolicy(b)
		gen := nextGeneration()
		form := 0
		next := func() *abi.CanonicalizeRequest {
			form++
			return &abi.CanonicalizeRequest{Settings: distinctSettings(variantConfig(b, metadataTopology, gen, form))}
		}
		req := next()
		n := len(req.Settings)
		for b.Loop() {
			if _, err := p.Canonicalize(context.Background(), req); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			req = next()
			b.StartTimer()
		}
		b.ReportMetric(float64(n), "settings/op")
	})
}

// medianOf returns the median of xs (sorting it).
func medianOf(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// distinctSettings lists the distinct settings objects (by bytes) of every
// (session, server) binding of cfg, as a reload canonicalizes them.
func distinctSettings(cfg *config.Config) []json.RawMessage {
	seen := make(map[string]bool)
	var out []json.RawMessage
	for _, sess := range cfg.Sessions {
		for server := range cfg.Servers {
			if raw, ok := sess.EffectiveSettings(server); ok && !seen[string(raw)] {
				seen[string(raw)] = true
				out = append(out, raw)
			}
		}
	}
	return out
}

// TestEquivalentReloadNoChurn reloads canonical-equivalent settings into
// sessions served by real endpoints (session.Endpoint, the daemon's
// registry): no connection is made or closed, no registry operation
// happens, no endpoint changes (so no client gets a list_changed), and no
// upstream notification is involved.
func TestEquivalentReloadNoChurn(t *testing.T) {
	topo := Topology{Sessions: 40, Servers: 5, ToolsPerServer: 10}
	eps := make(map[string]*session.Endpoint)
	endpoint := registryOf("endpoint")
	newEndpoint := func(name string) view.Registry {
		ep := endpoint(name)
		eps[name] = ep.(*session.Endpoint) // called with the world's lock held
		return ep
	}
	counting := Count(wasmPolicy(t))
	w := NewWorld(topo, counting, WorldOptions{Registry: newEndpoint})
	defer func() { require.NoError(t, w.Close()) }()
	gen := nextGeneration()
	mustApply(t, w, variantConfig(t, topo, gen, 0))
	require.NoError(t, w.Settle(context.Background()))
	require.Len(t, eps, topo.Sessions)
	changes := func() map[string]uint64 {
		m := make(map[string]uint64)
		for name, ep := range eps {
			m[name] = ep.Changes()
		}
		return m
	}
	before := changes()
	for form := 1; form <= 3; form++ {
		v0, c0 := w.Counters.Snapshot(), counting.Calls()
		sum, err := w.Apply(context.Background(), variantConfig(t, topo, gen, form))
		require.NoError(t, err)
		d := w.Counters.Snapshot().Sub(v0)
		require.Zero(t, d.Connects, "connects")
		require.Zero(t, d.Disconnects, "disconnects")
		require.Zero(t, d.RegistryOps, "registry ops")
		require.Zero(t, d.Replays, "replays")
		require.Zero(t, d.Notifications, "upstream notifications")
		require.Empty(t, sum.Changed, "sessions whose clients are notified")
		require.Equal(t, before, changes(), "endpoint registrations (each change is a list_changed)")
		calls := counting.Calls().Sub(c0)
		t.Logf("form %d: policy calls %+v", form, calls)
		// Each new settings object is canonicalized once, in calls made
		// while the reload compares overrides (reconcile's ahead): how
		// many depends on how fast the objects turn up.
		require.Equal(t, int64(variants), calls.Settings, "each new settings object sent once")
		require.Equal(t, PolicyCalls{Canonicalize: calls.Canonicalize, Settings: variants}, calls, "only canonicalize calls")
		require.GreaterOrEqual(t, calls.Canonicalize, int64(1))
	}
}

// TestSetPolicyPluginCalls: swapping the policy re-keys and re-projects
// every view with the new one in one canonicalize call and a few batched
// project calls, not one call per view or per (key, snapshot) pair.
func TestSetPolicyPluginCalls(t *testing.T) {
	topo := Topology{Sessions: 30, Servers: 8, ToolsPerServer: 10}
	w := NewWorld(topo, Count(metakey.Reference{}), WorldOptions{})
	defer func() { require.NoError(t, w.Close()) }()
	mustApply(t, w, variantConfig(t, topo, nextGeneration(), 0))
	next := Count(wasmPolicy(t))
	ops := w.RegistryOps()
	sum, err := w.Rec.SetPolicy(context.Background(), next)
	require.NoError(t, err)
	require.Equal(t, topo.Views(), sum.Refreshed)
	calls := next.Calls()
	t.Logf("policy swap over %d views: %+v", topo.Views(), calls)
	require.Equal(t, int64(1), calls.Canonicalize)
	require.Zero(t, calls.Project, "projections made one by one")
	require.LessOrEqual(t, calls.ProjectBatch, int64(runtime.GOMAXPROCS(0)))
	// The wasm plugin has the native reference's rules: every view is
	// re-projected under the new policy, to the same tools, so no registry
	// operation is needed.
	require.Equal(t, ops, w.RegistryOps(), "registry operations")
	require.Same(t, next, w.Rec.Policy())
	for s := range topo.Sessions {
		for i := range topo.Servers {
			v := view.Of(w.Rec.Handle(SessionName(s), ServerName(i)))
			require.NoError(t, v.Err(), "session %d, server %d", s, i)
			require.NotEmpty(t, v.Applied().Tools, "session %d, server %d", s, i)
		}
	}
}

// scalingSizes are the session counts of BenchmarkReconcileScaling: with
// 100 servers, 1,000, 10,000 and 100,000 views.
var scalingSizes = []int{10, 100, 1000}

// scalingChanged is the number of sessions BenchmarkReconcileScaling
// changes each iteration: 10 sessions x 100 servers = 1,000 views.
const scalingChanged = 10

// BenchmarkReconcileScaling reconciles 1,000, 10,000 and 100,000 views
// (10, 100 and 1,000 sessions over 100 servers of 5 tools) with the wasm
// plugin after a change of the same 1,000 views each time: the first ten
// sessions override every server with a new generation of settings, the
// others keep the servers' own settings.
func BenchmarkReconcileScaling(b *testing.B) {
	for _, sessions := range scalingSizes {
		topo := Topology{Sessions: sessions, Servers: 100, ToolsPerServer: 5}
		b.Run(fmt.Sprintf("views=%d", topo.Views()), func(b *testing.B) {
			w := NewWorld(topo, wasmPolicy(b), WorldOptions{})
			defer w.Close()
			base := Variant(1, 0, 0, topo.ToolsPerServer)
			build := func(gen int) *config.Config {
				changed := Variant(2, gen, 0, topo.ToolsPerServer)
				cfg, err := topo.Config(base, func(s int) json.RawMessage {
					if s < scalingChanged {
						return changed
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				return cfg
			}
			mustApply(b, w, build(nextGeneration()))
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				cfg := build(nextGeneration())
				runtime.GC()
				b.StartTimer()
				mustApply(b, w, cfg)
			}
			b.ReportMetric(float64(topo.Views()), "views")
			b.ReportMetric(float64(scalingChanged*topo.Servers), "changed-views")
		})
	}
}

// BenchmarkViewMemory measures the heap each session view costs beyond the
// shared snapshots: the live heap (after GC) with 10,000 more views (100
// sessions x 100 servers, 20 metadata variants, 10 tools a server) minus the
// live heap with one session holding every server, whose snapshots are
// therefore loaded, divided by 10,000. It counts everything a view brings:
// the view, its handle and binding, its settings, its share of the
// projections (one per variant and server) and the registrations in its
// session's registry. registry=map is wasmhost's own state, with a minimal
// registry; registry=endpoint uses the daemon's session.Endpoint, whose
// go-sdk server keeps its own copy of each registered tool.
func BenchmarkViewMemory(b *testing.B) {
	const extra = 100 // sessions added
	for _, reg := range []string{"map", "endpoint"} {
		b.Run("registry="+reg, func(b *testing.B) {
			newRegistry := registryOf(reg)
			small := Topology{Sessions: 1, Servers: 100, ToolsPerServer: 10}
			big := small
			big.Sessions += extra
			w := NewWorld(big, wasmPolicy(b), WorldOptions{Registry: newRegistry})
			defer w.Close()
			// A first round trip grows what does not depend on the number
			// of views to its steady size: the plugin instances and their
			// linear memories (which live in the Go heap), pool buffers.
			warm := nextGeneration()
			mustApply(b, w, variantConfig(b, small, warm, 0))
			mustApply(b, w, variantConfig(b, big, warm, 0))
			var perView float64
			for b.Loop() {
				// A new generation: the views' projections are new ones,
				// not those the entries' memos kept from earlier rounds.
				gen := nextGeneration()
				baseline, full := variantConfig(b, small, gen, 0), variantConfig(b, big, gen, 0)
				mustApply(b, w, baseline)
				h0 := liveHeap()
				mustApply(b, w, full)
				h1 := liveHeap()
				perView = float64(int64(h1)-int64(h0)) / float64(extra*big.Servers)
			}
			b.ReportMetric(perView, "bytes/view")
		})
	}
}

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// registryOf returns the registries of the views of a benchmark run with
// registry=reg: nil (the World's minimal one) for "map", the daemon's
// session.Endpoint, with no upstream, for "endpoint".
func registryOf(reg string) func(string) view.Registry {
	if reg != "endpoint" {
		return nil
	}
	return func(name string) view.Registry {
		return session.New(session.Options{Name: name, Upstream: func(string) session.Target { return session.Target{} }, Logger: quiet})
	}
}
