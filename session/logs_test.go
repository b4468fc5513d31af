package session_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/session"
)

// TestNoStreamIsNotAWarning: a client of streamable HTTP that never opened
// a GET stream (as the Inspector CLI and curl do) cannot be sent a
// list_changed; the go-sdk's warning about it is logged at debug level, and
// the endpoint's other warnings stay warnings.
func TestNoStreamIsNotAWarning(t *testing.T) {
	t.Parallel()
	var logs mcptest.LogBuffer
	ep := session.New(session.Options{
		Name:     "alice",
		Logger:   slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Upstream: func(string) session.Target { return session.Target{} },
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ep.Server() }, nil))
	defer func() {
		ep.Close()
		srv.Close()
	}()
	post := func(sid, body string) string {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		require.Less(t, res.StatusCode, 300, body)
		return res.Header.Get("Mcp-Session-Id")
	}
	sid := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`)
	require.NotEmpty(t, sid)
	post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	ep.PutTools("demo", []*mcp.Tool{{Name: "echo", InputSchema: map[string]any{"type": "object"}}})
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "notifications/tools/list_changed") },
		mcptest.EventWithin, 5*time.Millisecond, "the go-sdk tried to notify the client")
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "notifications/tools/list_changed") {
			assert.Contains(t, line, "level=DEBUG", line)
		}
	}
	assert.NotContains(t, logs.String(), "level=WARN")
}
