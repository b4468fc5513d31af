package pool_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/pool"
)

// httpServer serves one MCP server with a tool "echo" over streamable HTTP
// or, with sse set, over the HTTP+SSE transport of protocol 2024-11-05.
func httpServer(t *testing.T, sse bool) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "web", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "echo", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hi"}}}, nil
	})
	get := func(*http.Request) *mcp.Server { return srv }
	var h http.Handler = mcp.NewStreamableHTTPHandler(get, nil)
	if sse {
		h = mcp.NewSSEHandler(get, nil)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL
}

// TestDialURLFallsBackToSSE: a "url" entry reaches a streamable HTTP server
// and, through the fallback, an HTTP+SSE one (gemini-cli's meaning of
// "url"); the SSE stream outlives the context the connection was made
// under. An "httpUrl" entry is streamable HTTP only.
func TestDialURLFallsBackToSSE(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sse      bool
		httpURL  bool
		wantFail bool
	}{
		{name: "url/streamable"},
		{name: "url/sse", sse: true},
		{name: "httpUrl/streamable", httpURL: true},
		{name: "httpUrl/sse", sse: true, httpURL: true, wantFail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := pool.Spec{Name: "web", Pooled: true}
			if tc.httpURL {
				spec.HTTPURL = httpServer(t, tc.sse)
			} else {
				spec.URL = httpServer(t, tc.sse)
			}
			connectCtx, cancel := context.WithCancel(context.Background())
			tr, err := pool.DefaultDialer(connectCtx, spec)
			require.NoError(t, err)
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(connectCtx, tr, nil)
			cancel() // the connection must outlive its connect context
			if tc.wantFail {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			defer cs.Close()
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo"})
			require.NoError(t, err)
			require.Equal(t, "hi", res.Content[0].(*mcp.TextContent).Text)
			require.NoError(t, cs.Close())
		})
	}
}
