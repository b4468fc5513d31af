package session_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/internal/bench"
	"github.com/wasmhost/wasmhost/session"
)

// benchTools is the size of the server the endpoint benchmarks register:
// large enough that the go-sdk pages tools/list (1,000 a page).
const benchTools = 10_000

func benchEndpoint() *session.Endpoint {
	return session.New(session.Options{Name: "bench", Upstream: func(string) session.Target { return session.Target{} }, Logger: quiet})
}

// BenchmarkEndpointPutTools registers the 10,000 tools of one server (as
// a projection hands them over, shared by every session with the same
// settings) in a new session's endpoint, as a reload or start-up does for
// each session.
func BenchmarkEndpointPutTools(b *testing.B) {
	tools := bench.Tools("srv", benchTools)
	for b.Loop() {
		benchEndpoint().PutTools("srv", tools)
	}
}

// BenchmarkEndpointListTools lists a session's 10,000 tools, every page,
// through a client connected in memory: a new client's tools/list.
func BenchmarkEndpointListTools(b *testing.B) {
	ep := benchEndpoint()
	ep.PutTools("srv", bench.Tools("srv", benchTools))
	ctx := context.Background()
	cs := benchClient(b, ep)
	for b.Loop() {
		n := 0
		for _, err := range cs.Tools(ctx, nil) {
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		if n != benchTools {
			b.Fatalf("listed %d tools, want %d", n, benchTools)
		}
	}
}

// BenchmarkEndpointCallDuringPut makes tool calls to one server of a
// session while the session registers the 10,000 tools of another, over
// and over (a reload re-registering a large server): each call looks its
// name up under the endpoint's lock, which the registration takes. It
// reports the calls' latency percentiles; the upstream answers at once (no
// upstream: the call is refused as unavailable).
func BenchmarkEndpointCallDuringPut(b *testing.B) {
	ep := benchEndpoint()
	ep.PutTools("small", bench.Tools("small", 1))
	ctx := context.Background()
	cs := benchClient(b, ep)
	tools := bench.Tools("big", benchTools)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			ep.PutTools("big", tools)
			ep.DeleteTools("big", []string{bench.ToolName(0)}) // the next put adds it again
		}
	})
	params := &mcp.CallToolParams{Name: session.ExposedName("small", bench.ToolName(0))}
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := cs.CallTool(ctx, params); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	close(stop)
	wg.Wait()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds()), "max-ns")
}

// benchClient connects a client to ep in memory, closed when b ends.
func benchClient(b *testing.B, ep *session.Endpoint) *mcp.ClientSession {
	b.Helper()
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := ep.Server().Connect(ctx, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, &mcp.ClientOptions{Logger: quiet}).Connect(ctx, ct, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cs.Close() })
	return cs
}
