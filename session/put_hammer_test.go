package session_test

import (
	"context"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/bench"
	"github.com/wasmhost/wasmhost/session"
)

// TestPutPausesHammer: batches of two servers registered and deleted
// concurrently (each Put letting go of the endpoint's lock between chunks)
// while a client calls and lists tools end with both servers' tools all
// registered.
func TestPutPausesHammer(t *testing.T) {
	t.Parallel()
	ep := session.New(session.Options{Name: "h", Upstream: func(string) session.Target { return session.Target{} }, Logger: quiet})
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := ep.Server().Connect(ctx, st, nil)
	require.NoError(t, err)
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "h", Version: "1"}, &mcp.ClientOptions{Logger: quiet}).Connect(ctx, ct, nil)
	require.NoError(t, err)
	defer cs.Close()
	const n = 200
	var wg sync.WaitGroup
	for _, server := range []string{"a", "b"} {
		tools := bench.Tools(server, n)
		wg.Go(func() {
			for range 20 {
				ep.PutTools(server, tools)
				ep.DeleteTools(server, []string{bench.ToolName(0), bench.ToolName(n - 1)})
			}
			ep.PutTools(server, tools)
		})
	}
	wg.Go(func() {
		for range 50 {
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: session.ExposedName("a", bench.ToolName(n-1))})
			_ = err // unknown or unavailable, both fine
		}
	})
	wg.Wait()
	count := 0
	for _, err := range cs.Tools(ctx, nil) {
		require.NoError(t, err)
		count++
	}
	require.Equal(t, 2*n, count)
}
