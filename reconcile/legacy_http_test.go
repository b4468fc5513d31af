package reconcile_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

// TestLegacyHTTPStreamThatNeverOpens: an HTTP upstream that answers its
// other requests but never the one opening its event stream (the
// standalone GET) fails stdio mode's connection within a few multiples of
// the server's timeout, as it fails a pool entry, instead of holding Apply
// (and stdio mode's start) for ever: the go-sdk opens that stream inside
// Connect under a context the connect deadline does not reach.
func TestLegacyHTTPStreamThatNeverOpens(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits on a legacy HTTP stream's connect bound or reconnect; run without -short")
	}
	up := mcptest.NewHTTPUpstream(t, mcptest.HTTPUpstreamConfig{
		NewServer: func() *mcp.Server {
			srv := mcp.NewServer(&mcp.Implementation{Name: "web", Version: "1"}, &mcp.ServerOptions{Logger: quiet})
			srv.AddTool(&mcp.Tool{Name: "read", InputSchema: raw(`{"type":"object"}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{}, nil
			})
			return srv
		},
		Options: mcp.StreamableHTTPOptions{Logger: quiet},
	})
	// The stream never opens.
	release := up.Hang(func(r *http.Request, _ string) bool { return r.Method == http.MethodGet })

	leg := newOneSession(t, "s", pool.DefaultDialer, viewtest.NewRegistry())
	t.Cleanup(release) // before the Close above: lets a failing test end
	c := newCfg()
	c.Servers["web"] = map[string]any{"httpUrl": up.URL(), "protocolVersion": "2025-11-25", "timeout": 300}
	c.session("s")

	done := make(chan reconcile.Summary, 1)
	go func() {
		sum, _ := leg.Apply(context.Background(), c.build(t), "s")
		done <- sum
	}()
	select {
	case sum := <-done:
		require.Len(t, sum.Errors, 1, "%+v", sum)
		assert.Contains(t, sum.Errors[0].Error(), "event stream")
	case <-time.After(15 * time.Second):
		t.Fatal("Apply is still connecting to an upstream whose event stream never opens")
	}
}
