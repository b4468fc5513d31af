package daemon_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/mcptest"
)

// newHTTPUpstream serves the demo server over streamable HTTP at a fixed
// address, which a test restarts (a new process: its sessions are gone),
// takes down (connection refused), brings back, or makes hang. It records
// each request's X-Api-Key.
func newHTTPUpstream(t *testing.T) *mcptest.HTTPUpstream {
	t.Helper()
	return mcptest.NewHTTPUpstream(t, mcptest.HTTPUpstreamConfig{
		NewServer: func() *mcp.Server { return demoserver.New().MCP() },
		Options:   mcp.StreamableHTTPOptions{Logger: slog.New(slog.DiscardHandler)},
		Headers:   []string{"X-Api-Key"},
	})
}

// callText calls tool through c and returns the text of its answer: the
// result's, or the error's, and whether it is an error.
func callText(t *testing.T, c *client, tool string, args any) (string, bool) {
	t.Helper()
	res, err := c.call(t, tool, args)
	if err != nil {
		return err.Error(), true
	}
	return resultText(res), res.IsError
}

// bindingState returns the entry state /v1/state shows for alice's demo
// binding.
func bindingState(r *running) string {
	for _, s := range r.state().Sessions {
		if s.Name != "alice" {
			continue
		}
		for _, b := range s.Servers {
			if b.Server == "demo" {
				if b.Identity == "" {
					return "unbound"
				}
				return b.EntryState
			}
		}
	}
	return "missing"
}

// TestHTTPUpstreamOutageEndToEnd: a session's calls to an "httpUrl"
// upstream come through the upstream's restart (new process, old session
// ids answered with 404) and its outage (connection refused) without
// anyone restarting anything. While it is down the calls fail at once,
// naming the server, its tools are withdrawn, and /v1/state shows the
// binding unhealthy. The config's header goes with every request, and neither it
// nor the URL's API key appears in the log, /v1/state or what the client
// is told.
func TestHTTPUpstreamOutageEndToEnd(t *testing.T) {
	skipEndToEndIfShort(t)
	const headerSecret, querySecret = "h34der-s3cret-9876543210", "qu3ry-s3cret-9876543210"
	u := newHTTPUpstream(t)
	cfg := baseConfig()
	set(cfg, "mcpServers.demo", map[string]any{
		"httpUrl": u.URL() + "?api_key=" + querySecret,
		"headers": map[string]any{"X-Api-Key": headerSecret},
		"timeout": 3000,
	})
	r := start(t, cfg)
	alice := r.connect("alice", aliceToken)
	var told []string // what the client was told
	echo := func() (string, bool) {
		text, isErr := callText(t, alice, "demo__echo", map[string]any{"text": "hi"})
		told = append(told, text)
		return text, isErr
	}
	served := func(msg string) {
		t.Helper()
		waitFor(t, eventWithin, func() bool {
			text, isErr := echo()
			return !isErr && text == "hi"
		}, r.logs.String, "%s: served again (last answer: %q)", msg, lazy(func() string { return told[len(told)-1] }))
	}
	served("before")

	u.Restart(true)
	served("after the upstream restarted")
	assert.Equal(t, "ready", bindingState(r))

	u.Down()
	require.Eventually(t, func() bool { return bindingState(r) != "ready" }, eventWithin, 20*time.Millisecond,
		"/v1/state still shows the binding ready")
	for range 3 {
		start := time.Now()
		text, isErr := echo()
		assert.True(t, isErr, "a call while the upstream is down: %q", text)
		assert.Less(t, time.Since(start), 2*time.Second, "a call while the upstream is down fails at once")
		// A failed entry's tools are withdrawn (the client is told of the
		// list change), as for a stdio upstream: a call to one is refused
		// as unknown; a call still on its way when the upstream went is
		// answered as unavailable.
		assert.Contains(t, text, "demo", "the error names the server")
		assert.True(t, strings.Contains(text, "unavailable") || strings.Contains(text, `unknown tool "demo__echo"`), text)
	}
	assert.Empty(t, alice.tools(t), "the tools of a server that is down are withdrawn")

	u.Back()
	served("after the upstream came back")
	require.Eventually(t, func() bool { return bindingState(r) == "ready" }, eventWithin, 20*time.Millisecond)

	for i, q := range u.Requests() {
		assert.Equal(t, headerSecret, q.Header.Get("X-Api-Key"), "request %d went without the config's header", i)
	}
	_, state := r.do("GET", "/v1/state", adminToken, nil, nil)
	texts := map[string]string{"the log": r.logs.String(), "/v1/state": state, "the client": strings.Join(told, "\n")}
	assertNoSecrets(t, texts, headerSecret, querySecret)
}

// TestHTTPUpstreamHangEndToEnd: an upstream that accepts requests and never
// answers them holds nothing up. A call to a tool it hangs on is answered
// when the server's "timeout" runs out; a reload that adds a server whose
// event stream never opens (its POSTs answered, its GET held) finishes,
// the new server reported failed, and the daemon keeps serving the others.
func TestHTTPUpstreamHangEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out an upstream that hangs")
	}
	u := newHTTPUpstream(t)
	slow := newHTTPUpstream(t)
	slow.Hang(func(r *http.Request, _ string) bool { return r.Method == http.MethodGet })
	cfg := baseConfig()
	set(cfg, "mcpServers.demo", map[string]any{"httpUrl": u.URL(), "timeout": 1000})
	r := start(t, cfg)
	alice := r.connect("alice", aliceToken)
	text, isErr := callText(t, alice, "demo__echo", map[string]any{"text": "hi"})
	require.False(t, isErr, text)

	u.Hang(func(_ *http.Request, method string) bool { return method == "tools/call" })
	start := time.Now()
	text, isErr = callText(t, alice, "demo__echo", map[string]any{"text": "hi"})
	assert.True(t, isErr)
	assert.Contains(t, text, "timed out")
	assert.Less(t, time.Since(start), 5*time.Second)
	u.SetFault(nil) // the call hung on stays so until it is given up

	servers := cfg["mcpServers"].(map[string]any)
	servers["slow"] = map[string]any{"httpUrl": slow.URL(), "timeout": 500, "protocolVersion": "2025-11-25"}
	done := make(chan struct{})
	var code int
	var body string
	writeConfig(t, r.path, cfg)
	go func() {
		defer close(done)
		code, body = r.send("POST", "/v1/reload", "")
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the reload is still waiting for the server whose stream never opens")
	}
	t.Logf("reload: %d %s", code, body)
	assert.Contains(t, body, "slow")
	text, isErr = callText(t, alice, "demo__echo", map[string]any{"text": "still"})
	assert.False(t, isErr, text)
	assert.Equal(t, "still", text)
}
