package daemon_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/daemon"
)

// oneShot is a client as the MCP Inspector CLI is one: it initializes,
// opens its event stream, and returns the session id and a func that
// closes the stream (the client leaves, without a DELETE).
func oneShot(t *testing.T, r *running) (id string, leave func()) {
	t.Helper()
	post := func(body, id string) *http.Response {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, r.d.URL()+"/mcp/alice", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+aliceToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if id != "" {
			req.Header.Set("Mcp-Session-Id", id)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := r.http.Do(req)
		require.NoError(t, err)
		return resp
	}
	resp := post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"one-shot","version":"1"}}}`, "")
	id = resp.Header.Get("Mcp-Session-Id")
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotEmpty(t, id)
	resp = post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, id)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)

	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.d.URL()+"/mcp/alice", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	tr := &http.Transport{}
	resp, err = (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return id, func() {
		cancel()
		resp.Body.Close()
		tr.CloseIdleConnections()
	}
}

// aliceClients is how many clients /v1/state counts for alice.
func aliceClients(r *running) int {
	for _, s := range r.state().Sessions {
		if s.Name == "alice" {
			return s.Clients
		}
	}
	return -1
}

// TestOneShotClientsAreGoneAtOnce: a client that closes its event stream
// and leaves without a DELETE (as each MCP Inspector CLI call does) is no
// longer counted, nor notified, a few seconds later, not after the idle
// timeout (an hour here); one that sends DELETE is gone at once; one that
// keeps its stream stays.
func TestOneShotClientsAreGoneAtOnce(t *testing.T) {
	skipEndToEndIfShort(t)
	r := start(t, baseConfig(), func(o *daemon.Options) { o.ClientIdleTimeout = time.Hour; o.ClientGoneAfter = 5 * time.Second })
	stays := r.connect("alice", aliceToken)
	var leaves []func()
	for range 3 {
		_, leave := oneShot(t, r)
		leaves = append(leaves, leave)
	}
	deleted, leaveDeleted := oneShot(t, r)
	defer leaveDeleted()
	require.Equal(t, 5, aliceClients(r))

	code, body := r.do("DELETE", "/mcp/alice", aliceToken, nil, map[string]string{"Mcp-Session-Id": deleted})
	require.Equal(t, http.StatusNoContent, code, body)
	require.Equal(t, 4, aliceClients(r), "a client that sent DELETE is gone at once")

	began := time.Now()
	for _, leave := range leaves {
		leave()
	}
	require.Eventually(t, func() bool { return aliceClients(r) == 1 }, 60*time.Second, 50*time.Millisecond, "the clients that left are still counted")
	t.Logf("gone after %v", time.Since(began))
	assert.NotEmpty(t, stays.tools(t), "the client that stays is served")
	assert.Equal(t, 1, aliceClients(r))
}
