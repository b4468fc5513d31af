package reconcile_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/churn"
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
	srv := mcp.NewServer(&mcp.Implementation{Name: "web", Version: "1"}, &mcp.ServerOptions{Logger: quiet})
	srv.AddTool(&mcp.Tool{Name: "read", InputSchema: raw(`{"type":"object"}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Logger: quiet})
	stop := make(chan struct{}) // lets a failing test end
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			select { // the stream never opens
			case <-r.Context().Done():
			case <-stop:
				http.Error(w, "gone", http.StatusGone)
			}
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)

	leg := reconcile.NewLegacy(reconcile.LegacyOptions{Dialer: pool.DefaultDialer, Policy: ref, Registry: viewtest.NewRegistry(), Counters: &churn.Counters{}, Logger: quiet})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, leg.Close(ctx))
	})
	t.Cleanup(func() { close(stop) })
	c := newCfg()
	c.Servers["web"] = map[string]any{"httpUrl": ts.URL, "protocolVersion": "2025-11-25", "timeout": 300}
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
