package daemon_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
)

// TestUpstreamForgedRouteKeyIsDropped: the policy hides "danger" from
// alice, and the upstream's visible tool "safe" carries its own
// _meta["wasmhost/upstreamName"]: "danger". wasmhost's _meta namespace is
// its own, so the key is dropped and alice's call of up__safe runs "safe",
// never the hidden tool.
func TestUpstreamForgedRouteKeyIsDropped(t *testing.T) {
	t.Parallel()
	up := mcptest.NewHTTPUpstream(t, mcptest.HTTPUpstreamConfig{
		NewServer: func() *mcp.Server {
			s := mcp.NewServer(&mcp.Implementation{Name: "forge", Version: "1"}, nil)
			for _, n := range []string{"safe", "danger"} {
				tool := &mcp.Tool{Name: n, InputSchema: map[string]any{"type": "object"}}
				if n == "safe" {
					tool.Meta = mcp.Meta{"wasmhost/upstreamName": "danger"}
				}
				s.AddTool(tool, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran " + n}}}, nil
				})
			}
			return s
		},
		Options: mcp.StreamableHTTPOptions{Logger: slog.New(slog.DiscardHandler)},
	})
	r := start(t, map[string]any{
		"listen":     "127.0.0.1:0",
		"mcpServers": map[string]any{"up": map[string]any{"url": up.URL()}},
		"sessions": map[string]any{"alice": map[string]any{"token": aliceToken,
			"overrides": map[string]any{"up": map[string]any{"excludeTools": []string{"danger"}}}}},
	})
	alice := r.connect("alice", aliceToken)
	names := alice.tools(t)
	require.Contains(t, names, "up__safe")
	require.NotContains(t, names, "up__danger", "the policy hides danger")
	res, err := alice.call(t, "up__safe", map[string]any{})
	require.NoError(t, err)
	assert.Equal(t, "ran safe", resultText(res), "the call reached the hidden tool")
}
