package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/session"
	"github.com/wasmhost/wasmhost/view"
)

// A dataPath is a connected MCP client and the tool call to make through
// it.
type dataPath struct {
	cs    *mcp.ClientSession
	tool  string
	args  map[string]any
	want  string // the text the tool answers
	close func()
}

// An upstreamKind is how the data path benchmark reaches its upstream:
// "memory" is a go-sdk server in this process behind in-memory transports
// (each hop is pure MCP overhead); "stdio" is the repository's demo server
// as a real subprocess (this test binary, see TestMain) spoken to over
// stdin and stdout, as wasmhost reaches most servers; "node" is the MCP
// project's test server in Node.js (mcptest.ServerEverything), a
// third-party npm server over stdin and stdout.
type upstreamKind string

// upstreamKinds lists every upstreamKind.
var upstreamKinds = []upstreamKind{"memory", "stdio", "node"}

// nodeCommand returns the command line of the node upstream, installing
// its package first (tb is skipped without npm, see mcptest.NPMInstall).
func nodeCommand(tb testing.TB) (name string, args []string) {
	tb.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		tb.Skip("skipped: node is not installed")
	}
	return node, []string{mcptest.ServerEverythingScript(tb), "stdio"}
}

// pinnedProtocol is the protocol version of BenchmarkToolCall's pinned path:
// the newest one without the per-request _meta block.
const pinnedProtocol = "2025-11-25"

// serverEntry is the config entry of an upstream of kind (not "memory");
// protocol, when not empty, is its "protocolVersion".
func serverEntry(tb testing.TB, kind upstreamKind, protocol string) string {
	tb.Helper()
	entry := map[string]any{"command": os.Args[0], "env": map[string]string{demoserver.ChildEnv: "1"}}
	if kind == "node" {
		name, args := nodeCommand(tb)
		entry = map[string]any{"command": name, "args": args}
	}
	if protocol != "" {
		entry["protocolVersion"] = protocol
	}
	b, err := json.Marshal(entry)
	require.NoError(tb, err)
	return string(b)
}

// call returns the tool call the data path makes to an upstream of kind k
// and the text the tool answers.
func (k upstreamKind) call() (tool string, args map[string]any, want string) {
	switch k {
	case "node":
		return "echo", map[string]any{"message": "hello through the data path"}, "Echo: hello through the data path"
	case "stdio":
		return "echo", map[string]any{"text": "hello through the data path"}, "hello through the data path"
	}
	return ToolName(1), map[string]any{"path": "/srv/data/notes.txt", "limit": 10}, ServerName(0) + "/" + ToolName(1)
}

// wasmhostPath serves one session through a session.Endpoint (the daemon's
// registry and MCP server for a session, resolving each call through the
// session's own pool handle, with the pool and reconciler in between) and
// connects a client to it over in-memory transports. The session uses one
// server, reached as kind says; protocol, when not empty, is the server
// entry's "protocolVersion" (the version the pool's client asks the
// upstream for).
func wasmhostPath(tb testing.TB, kind upstreamKind, policy *CountingPolicy, protocol string) *dataPath {
	tb.Helper()
	ctx := context.Background()
	var w *World
	// What the daemon's metrics do per call (daemon/metrics.go, observeCall).
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "calls"}, []string{"server", "method", "outcome"})
	callTime := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "call_seconds"}, []string{"server", "method"})
	opts := WorldOptions{Registry: func(name string) view.Registry {
		return session.New(session.Options{
			Name:   name,
			Logger: quiet,
			OnCall: func(c session.Call) {
				calls.WithLabelValues(c.Server, c.Method, c.Outcome).Inc()
				if c.Took > 0 {
					callTime.WithLabelValues(c.Server, c.Method).Observe(c.Took.Seconds())
				}
			},
			Upstream: func(server string) session.Target {
				h := w.Rec.Handle(name, server)
				if h == nil {
					return session.Target{}
				}
				return session.Target{Conn: h.Conn()}
			},
		})
	}}
	topo := Topology{Sessions: 1, Servers: 1, ToolsPerServer: 10}
	var cfg *config.Config
	var err error
	if kind != "memory" {
		opts.Dialer = pool.DefaultDialer
		data := fmt.Sprintf(`{"mcpServers":{%q:%s},"sessions":{%q:{"token":"token-for-the-data-path-0123"}}}`, ServerName(0), serverEntry(tb, kind, protocol), SessionName(0))
		cfg, _, err = config.Parse("bench.json", []byte(data), func(string) (string, bool) { return "", false }, nil)
	} else {
		var extra json.RawMessage // keys added to the server entry
		if protocol != "" {
			extra = json.RawMessage(fmt.Sprintf(`{"protocolVersion":%q}`, protocol))
		}
		cfg, err = topo.Config(extra, nil)
	}
	require.NoError(tb, err)
	w = NewWorld(topo, policy, opts)
	mustApply(tb, w, cfg)
	ep := w.Registry(SessionName(0)).(*session.Endpoint)
	ct, st := mcp.NewInMemoryTransports()
	ss, err := ep.Server().Connect(ctx, st, nil)
	require.NoError(tb, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench-client", Version: "1"}, nil).Connect(ctx, ct, nil)
	require.NoError(tb, err)
	tool, args, want := kind.call()
	return &dataPath{cs: cs, tool: session.ExposedName(ServerName(0), tool), args: args, want: want, close: func() {
		_ = cs.Close()
		_ = ss.Wait()
		require.NoError(tb, w.Close())
	}}
}

// upstreamTransport returns a transport to a new upstream of the given
// kind, as the direct and proxy paths reach it.
func upstreamTransport(tb testing.TB, kind upstreamKind) mcp.Transport {
	tb.Helper()
	switch kind {
	case "node":
		name, args := nodeCommand(tb)
		return &mcp.CommandTransport{Command: exec.Command(name, args...)}
	case "stdio":
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), demoserver.ChildEnv+"=1")
		return &mcp.CommandTransport{Command: cmd}
	}
	t, err := NewUpstream(ServerName(0), 10).Transport(context.Background())
	require.NoError(tb, err)
	return t
}

// directPath connects a go-sdk client straight to an upstream of the same
// kind as wasmhostPath reaches.
func directPath(tb testing.TB, kind upstreamKind) *dataPath {
	tb.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench-client", Version: "1"}, nil).Connect(context.Background(), upstreamTransport(tb, kind), nil)
	require.NoError(tb, err)
	tool, args, want := kind.call()
	return &dataPath{cs: cs, tool: tool, args: args, want: want, close: func() { _ = cs.Close() }}
}

// proxyPath puts the thinnest proxy the go-sdk allows between a client and
// an upstream of the given kind: a go-sdk server whose one tool hands each
// call's raw arguments to a go-sdk client connected to the upstream, and
// hands back its result. It has none of wasmhost (no pool, policy, views,
// routing or _meta filtering), so it measures what the extra MCP hop costs
// by itself: the floor of any proxy built on the go-sdk.
func proxyPath(tb testing.TB, kind upstreamKind) *dataPath {
	tb.Helper()
	ctx := context.Background()
	up, err := mcp.NewClient(&mcp.Implementation{Name: "bench-proxy", Version: "1"}, nil).Connect(ctx, upstreamTransport(tb, kind), nil)
	require.NoError(tb, err)
	tool, args, want := kind.call()
	srv := mcp.NewServer(&mcp.Implementation{Name: "bench-proxy", Version: "1"}, &mcp.ServerOptions{Logger: quiet})
	srv.AddTool(&mcp.Tool{Name: tool, InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return up.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: req.Params.Arguments})
	})
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	require.NoError(tb, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench-client", Version: "1"}, nil).Connect(ctx, ct, nil)
	require.NoError(tb, err)
	return &dataPath{cs: cs, tool: tool, args: args, want: want, close: func() {
		_ = cs.Close()
		_ = ss.Wait()
		_ = up.Close()
	}}
}

// relayPath forwards every message between a client and an upstream of
// the given kind as it comes, beneath any go-sdk server or client: it reads
// each message from one go-sdk connection and writes it to the other. It
// does no MCP work at all (no routing, no ID mapping, no session), so it
// measures the least any proxy pays while it still reads and writes
// messages through the go-sdk's transports: the ceiling of the data path
// ratio for a design that takes tool calls out of the go-sdk's server and
// client.
func relayPath(tb testing.TB, kind upstreamKind) *dataPath {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	up, err := upstreamTransport(tb, kind).Connect(ctx)
	require.NoError(tb, err)
	ct, st := mcp.NewInMemoryTransports()
	down, err := st.Connect(ctx)
	require.NoError(tb, err)
	done := make(chan struct{}, 2)
	pump := func(from, to mcp.Connection) {
		defer func() { done <- struct{}{} }()
		for {
			msg, err := from.Read(ctx)
			if err != nil {
				return
			}
			if err := to.Write(ctx, msg); err != nil {
				return
			}
		}
	}
	go pump(down, up)
	go pump(up, down)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench-client", Version: "1"}, nil).Connect(ctx, ct, nil)
	require.NoError(tb, err)
	tool, args, want := kind.call()
	return &dataPath{cs: cs, tool: tool, args: args, want: want, close: func() {
		_ = cs.Close()
		cancel()
		_ = up.Close()
		_ = down.Close()
		<-done
		<-done
	}}
}

func (d *dataPath) call(ctx context.Context) error {
	res, err := d.cs.CallTool(ctx, &mcp.CallToolParams{Name: d.tool, Arguments: d.args})
	if err != nil {
		return err
	}
	if res.IsError || len(res.Content) != 1 {
		return fmt.Errorf("tool %s: unexpected result %+v", d.tool, res)
	}
	if text, ok := res.Content[0].(*mcp.TextContent); !ok || text.Text != d.want {
		return fmt.Errorf("tool %s: answered %+v, want %q", d.tool, res.Content[0], d.want)
	}
	return nil
}

// BenchmarkToolCall makes tool calls one after another through a wasmhost
// session (client -> session endpoint -> pooled upstream connection ->
// upstream; the endpoint, pool and reconciler are the daemon's own, the
// client's leg is in memory) and, as the baseline, through a go-sdk client
// connected directly to the same kind of upstream. With upstream=memory the
// tool answers at once and both legs are in memory, so the ratio is
// wasmhost's forwarding plus one more MCP hop against one hop, the worst
// case; with upstream=stdio the upstream is a real subprocess. It reports
// the latency percentiles of single calls; the wasmhost side also checks
// that no policy call is made on the call path. The path proxy is the
// thinnest go-sdk proxy (proxyPath), the floor any proxy on the go-sdk
// starts from; the path relay (relayPath) only moves messages between
// go-sdk connections, the floor of a proxy beneath the go-sdk's server
// and client. The path wasmhost-2025-11-25 is wasmhost with the server
// entry's "protocolVersion" pinned to 2025-11-25, for context: the default
// is the go-sdk's newest protocol.
func BenchmarkToolCall(b *testing.B) {
	for _, kind := range upstreamKinds {
		for _, path := range []string{"wasmhost", "direct", "proxy", "relay", "wasmhost-" + pinnedProtocol} {
			b.Run(fmt.Sprintf("upstream=%s/%s", kind, path), func(b *testing.B) {
				ctx := context.Background()
				var d *dataPath
				var policy *CountingPolicy
				switch path {
				case "wasmhost":
					policy = Count(wasmPolicy(b))
					d = wasmhostPath(b, kind, policy, "")
				case "direct":
					d = directPath(b, kind)
				case "proxy":
					d = proxyPath(b, kind)
				case "relay":
					d = relayPath(b, kind)
				default:
					policy = Count(wasmPolicy(b))
					d = wasmhostPath(b, kind, policy, pinnedProtocol)
				}
				defer d.close()
				for range 100 { // warm up both ends
					if err := d.call(ctx); err != nil {
						b.Fatal(err)
					}
				}
				var before PolicyCalls
				if policy != nil {
					before = policy.Calls()
				}
				lat := make([]time.Duration, 0, 1<<16)
				b.ReportAllocs()
				for b.Loop() {
					start := time.Now()
					if err := d.call(ctx); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(start))
				}
				if policy != nil {
					if calls := policy.Calls().Sub(before); calls.Total() != 0 {
						b.Fatalf("policy calls on the call path: %+v", calls)
					}
				}
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
				b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
			})
		}
	}
}

// TestToolCallPaths checks the paths of BenchmarkToolCall: each reaches the
// upstream tool and gets its answer.
func TestToolCallPaths(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a benchmark harness at scale; the smaller harness tests stay in -short; run without -short")
	}
	for _, kind := range upstreamKinds {
		t.Run("upstream="+string(kind), func(t *testing.T) {
			if kind == "node" && testing.Short() {
				t.Skip("skipped in -short mode: needs npm and the npm registry")
			}
			ctx := t.Context()
			for _, d := range []*dataPath{wasmhostPath(t, kind, Count(wasmPolicy(t)), ""), wasmhostPath(t, kind, Count(wasmPolicy(t)), pinnedProtocol), directPath(t, kind), proxyPath(t, kind), relayPath(t, kind)} {
				require.NoError(t, d.call(ctx), "tool %s", d.tool)
				d.close()
			}
		})
	}
}
