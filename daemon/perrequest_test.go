package daemon_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/daemon"
)

// dialPerRequest connects a go-sdk client of protocol 2026-07-28 to a
// session: it sends server/discover, then each request on its own, with
// no client session, and opens a subscriptions/listen stream for
// list_changed.
func dialPerRequest(t *testing.T, url, token string) (*mcp.ClientSession, <-chan struct{}) {
	t.Helper()
	changed := make(chan struct{}, 100)
	cl := mcp.NewClient(&mcp.Implementation{Name: "per-request", Version: "1"}, &mcp.ClientOptions{
		Logger:                 slog.New(slog.DiscardHandler),
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	tr := &http.Transport{}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   url,
		HTTPClient: &http.Client{Transport: &bearerTransport{token: token, base: tr}},
	}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close(); tr.CloseIdleConnections() })
	return cs, changed
}

func perRequest(o *daemon.Options) { o.PerRequestHTTP = true }

// TestPerRequestProtocolOff: without Options.PerRequestHTTP, a client
// asking for 2026-07-28 falls back to a 2025-11-25 client session (the
// daemon answers server/discover with the older versions only).
func TestPerRequestProtocolOff(t *testing.T) {
	t.Parallel()
	r := start(t, baseConfig())
	cs, _ := dialPerRequest(t, r.d.URL()+"/mcp/alice", aliceToken)
	assert.Equal(t, "2025-11-25", cs.InitializeResult().ProtocolVersion)
	assert.NotEmpty(t, cs.ID(), "a client session")
}

// TestPerRequestProtocolHTTP: a client of protocol 2026-07-28 is served
// without a client session (no Mcp-Session-Id): it lists and calls the
// tools its session sees, and hears list_changed on its listen stream.
// Its requests still need the session's token.
func TestPerRequestProtocolHTTP(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	r := start(t, baseConfig(), perRequest)
	cs, changed := dialPerRequest(t, r.d.URL()+"/mcp/alice", aliceToken)
	assert.Equal(t, "2026-07-28", cs.InitializeResult().ProtocolVersion)
	assert.Empty(t, cs.ID(), "no client session")
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "demo__echo", Arguments: map[string]any{"text": "hi"}})
	require.NoError(t, err)
	assert.Equal(t, "hi", resultText(res))
	res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "demo__write_note", Arguments: map[string]any{"name": "x", "text": "x"}})
	if err == nil {
		assert.True(t, res.IsError, "alice does not see write_note: %s", resultText(res))
	}

	writeConfig(t, r.path, set(baseConfig(), "sessions.alice.overrides.demo.includeTools", []string{"echo"}))
	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		t.Fatal("no list_changed on the listen stream")
	}

	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":"x"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	code, _ := r.do("POST", "/mcp/alice", bobToken, strings.NewReader(call), map[string]string{
		"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": "2026-07-28"})
	assert.Equal(t, http.StatusUnauthorized, code, "another session's token")
}

// TestDrainEndsListenStreams: a stop does not wait the drain timeout for a
// per-request client's listen stream, which carries no call.
func TestDrainEndsListenStreams(t *testing.T) {
	skipEndToEndIfShort(t)
	const drain = 20 * time.Second
	r := start(t, baseConfig(), perRequest, func(o *daemon.Options) { o.DrainTimeout = drain })
	cs, _ := dialPerRequest(t, r.d.URL()+"/mcp/alice", aliceToken)
	_, err := cs.ListTools(t.Context(), nil) // the listen stream is open once Connect returns
	require.NoError(t, err)
	began := time.Now()
	r.stop()
	took := time.Since(began)
	t.Logf("stopped in %v", took)
	assert.Less(t, took, drain/2, "the stop waited for the listen stream")
}
