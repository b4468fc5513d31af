package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/session"
	"github.com/wasmhost/wasmhost/view"
)

// BenchmarkReloadAllServers reloads a config that changes the settings of
// every server (every server's trust flips and its exclude list names a
// new tool, so each view re-keys, re-projects and replays), as the
// upstream-scale benchmark's reload of all 200 servers does, at two shapes
// of the same 200 views: 8 sessions of 25 servers and 2 sessions of 100.
// registry=endpoint registers into the daemon's session.Endpoint with its
// default naming (auto) and tools named alike on every server (as copies
// of one upstream are), registry=map into the minimal registry.
//
// It reports the reload's cost per view (ns/view) and that cost against
// one projection of one server's snapshot through the same plugin,
// measured in the same iteration (view/project-call): the per-view cost
// of a reload should stay a small multiple of one plugin call, and be the
// same at both shapes (a view's registration must not cost more in a
// session with more servers).
func BenchmarkReloadAllServers(b *testing.B) {
	const tools = 6 // the demo server's
	for _, topo := range []Topology{{Sessions: 8, Servers: 25, ToolsPerServer: tools}, {Sessions: 2, Servers: 100, ToolsPerServer: tools}} {
		for _, reg := range []string{"map", "endpoint"} {
			b.Run(fmt.Sprintf("servers=%d/registry=%s", topo.Servers, reg), func(b *testing.B) {
				ctx := context.Background()
				policy := wasmPolicy(b)
				counting := Count(policy)
				var newRegistry func(string) view.Registry
				if reg == "endpoint" {
					newRegistry = func(name string) view.Registry {
						return session.New(session.Options{
							Name: name, Upstream: func(string) session.Target { return session.Target{} }, Logger: quiet,
							Naming: session.Naming{Mode: session.NamesAuto},
						})
					}
				}
				w := NewWorld(topo, counting, WorldOptions{Registry: newRegistry})
				defer w.Close()
				mustApply(b, w, allServersConfig(b, topo, nextGeneration()))
				snap := Snapshot("bench", tools)
				var reloads, calls time.Duration
				var plugin int64
				for b.Loop() {
					b.StopTimer()
					gen := nextGeneration()
					cfg := allServersConfig(b, topo, gen)
					settings := allServersSettings(nextGeneration())
					runtime.GC()
					c0 := counting.Calls()
					start := time.Now()
					b.StartTimer()
					mustApply(b, w, cfg)
					b.StopTimer()
					reloads += time.Since(start)
					plugin += counting.Calls().Sub(c0).Total()
					start = time.Now()
					if _, err := view.Project(ctx, policy, settings, snap); err != nil {
						b.Fatal(err)
					}
					calls += time.Since(start)
					b.StartTimer()
				}
				perView := float64(reloads.Nanoseconds()) / float64(b.N*topo.Views())
				b.ReportMetric(perView, "ns/view")
				b.ReportMetric(perView/(float64(calls.Nanoseconds())/float64(b.N)), "view/project-call")
				b.ReportMetric(float64(plugin)/float64(b.N), "plugin-calls/op")
			})
		}
	}
}

// allServersSettings is the settings of every server in generation gen:
// trust flips from one generation to the next, and the exclude list names
// a tool of the generation, so that each generation has a key of its own.
func allServersSettings(gen int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"trust":%t,"excludeTools":["retired_%d"]}`, gen%2 == 0, gen))
}

// allServersConfig is t's config with allServersSettings(gen) on every
// server.
func allServersConfig(tb testing.TB, t Topology, gen int) *config.Config {
	tb.Helper()
	cfg, err := t.Config(allServersSettings(gen), nil)
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}
