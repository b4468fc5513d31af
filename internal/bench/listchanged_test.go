package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkListChanged measures an upstream's tools/list_changed reaching
// the 1,000 sessions bound to it (one server of 100 tools, 20 metadata
// variants): the entry rediscovers its lists, every view replays the new
// snapshot through its key's projection (one plugin call per distinct
// key, shared through the entry's memo), and each session's registry gets
// what changed for it. The tool the upstream adds is one no variant
// includes, so every projection is re-made and no registration changes:
// the work is the fan-out's own. An iteration ends when every view has
// replayed; the pause the entry keeps between rediscoveries is taken with
// the timer stopped. registry=endpoint uses the daemon's session.Endpoint.
func BenchmarkListChanged(b *testing.B) {
	for _, reg := range []string{"map", "endpoint"} {
		b.Run("registry="+reg, func(b *testing.B) {
			newRegistry := registryOf(reg)
			top := Topology{Sessions: 1000, Servers: 1, ToolsPerServer: 100}
			counting := Count(wasmPolicy(b))
			w := NewWorld(top, counting, WorldOptions{Registry: newRegistry})
			defer w.Close()
			mustApply(b, w, variantConfig(b, top, nextGeneration(), 0))
			up := w.ups[ServerName(0)]
			calls0, ops0 := counting.Calls(), w.Counters.RegistryOps.Load()
			n := 0
			for b.Loop() {
				b.StopTimer()
				time.Sleep(150 * time.Millisecond) // the entry's minimum interval between rediscoveries
				want := w.Counters.Replays.Load() + int64(top.Sessions)
				b.StartTimer()
				n++
				up.Server.AddTool(&mcp.Tool{Name: fmt.Sprintf("added_%d", n), InputSchema: map[string]any{"type": "object"}},
					func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return nil, nil })
				for w.Counters.Replays.Load() < want {
					time.Sleep(50 * time.Microsecond)
				}
			}
			if ops := w.Counters.RegistryOps.Load() - ops0; ops != 0 {
				b.Fatalf("%d registry operations for a tool no session sees", ops)
			}
			b.ReportMetric(float64(counting.Calls().Sub(calls0).Total())/float64(n), "plugin-calls/op")
		})
	}
}
