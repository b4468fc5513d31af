package daemon_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/demoserver"
)

// An httpUpstream is the demo server over streamable HTTP at a fixed
// address, which a test restarts (a new process: its sessions are gone),
// takes down (connection refused), brings back, or makes hang.
type httpUpstream struct {
	t    *testing.T
	addr string

	mu      sync.Mutex
	ts      *httptest.Server
	demo    *demoserver.Server
	handler http.Handler
	hang    func(r *http.Request, method string) bool
	headers []string // the X-Api-Key of each request
	stop    chan struct{}
}

func newHTTPUpstream(t *testing.T) *httpUpstream {
	t.Helper()
	u := &httpUpstream{t: t, stop: make(chan struct{})}
	u.replace()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	u.addr = ln.Addr().String()
	u.serve(ln)
	t.Cleanup(func() { // after the daemon stops (cleanups run last in, first out)
		close(u.stop)
		u.down()
	})
	return u
}

func (u *httpUpstream) url() string { return "http://" + u.addr + "/mcp" }

// replace starts a new demo server process (in memory) and closes the old
// one's sessions.
func (u *httpUpstream) replace() {
	demo := demoserver.New()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return demo.MCP() },
		&mcp.StreamableHTTPOptions{Logger: slog.New(slog.DiscardHandler)})
	u.mu.Lock()
	old := u.demo
	u.demo, u.handler = demo, h
	u.mu.Unlock()
	if old != nil {
		for ss := range old.MCP().Sessions() {
			_ = ss.Close()
		}
	}
}

func (u *httpUpstream) serve(ln net.Listener) {
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var method string
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var msg struct{ Method string }
			_ = json.Unmarshal(body, &msg)
			method = msg.Method
		}
		u.mu.Lock()
		u.headers = append(u.headers, r.Header.Get("X-Api-Key"))
		h, hang := u.handler, u.hang
		u.mu.Unlock()
		if hang != nil && hang(r, method) {
			select {
			case <-r.Context().Done():
			case <-u.stop:
			}
			return
		}
		h.ServeHTTP(w, r)
	}))
	ts.Listener = ln
	ts.Start()
	u.mu.Lock()
	u.ts = ts
	u.mu.Unlock()
}

// restart replaces the server process, dropping every connection.
func (u *httpUpstream) restart() {
	u.replace()
	u.mu.Lock()
	ts := u.ts
	u.mu.Unlock()
	ts.CloseClientConnections()
}

// down stops serving: connections are refused.
func (u *httpUpstream) down() {
	u.mu.Lock()
	ts, demo := u.ts, u.demo
	u.ts = nil
	u.mu.Unlock()
	if ts == nil {
		return
	}
	for ss := range demo.MCP().Sessions() {
		_ = ss.Close()
	}
	ts.Listener.Close()
	ts.CloseClientConnections()
	ts.Close()
}

// back serves again, a new process, at the same address.
func (u *httpUpstream) back() {
	u.replace()
	var ln net.Listener
	require.Eventually(u.t, func() bool {
		var err error
		ln, err = net.Listen("tcp", u.addr)
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
	u.serve(ln)
}

func (u *httpUpstream) setHang(f func(r *http.Request, method string) bool) {
	u.mu.Lock()
	u.hang = f
	u.mu.Unlock()
}

func (u *httpUpstream) apiKeys() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.headers...)
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
	const headerSecret, querySecret = "h34der-s3cret-9876543210", "qu3ry-s3cret-9876543210"
	u := newHTTPUpstream(t)
	cfg := baseConfig()
	set(cfg, "mcpServers.demo", map[string]any{
		"httpUrl": u.url() + "?api_key=" + querySecret,
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
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			text, isErr := echo()
			if !isErr && text == "hi" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not served again within 15s; last answer %q", msg, text)
			}
		}
	}
	served("before")

	u.restart()
	served("after the upstream restarted")
	assert.Equal(t, "ready", bindingState(r))

	u.down()
	require.Eventually(t, func() bool { return bindingState(r) != "ready" }, 15*time.Second, 20*time.Millisecond,
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

	u.back()
	served("after the upstream came back")
	require.Eventually(t, func() bool { return bindingState(r) == "ready" }, 10*time.Second, 20*time.Millisecond)

	for i, key := range u.apiKeys() {
		assert.Equal(t, headerSecret, key, "request %d went without the config's header", i)
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
	u := newHTTPUpstream(t)
	slow := newHTTPUpstream(t)
	slow.setHang(func(r *http.Request, _ string) bool { return r.Method == http.MethodGet })
	cfg := baseConfig()
	set(cfg, "mcpServers.demo", map[string]any{"httpUrl": u.url(), "timeout": 1000})
	r := start(t, cfg)
	alice := r.connect("alice", aliceToken)
	text, isErr := callText(t, alice, "demo__echo", map[string]any{"text": "hi"})
	require.False(t, isErr, text)

	u.setHang(func(_ *http.Request, method string) bool { return method == "tools/call" })
	start := time.Now()
	text, isErr = callText(t, alice, "demo__echo", map[string]any{"text": "hi"})
	assert.True(t, isErr)
	assert.Contains(t, text, "timed out")
	assert.Less(t, time.Since(start), 5*time.Second)
	u.setHang(nil)

	servers := cfg["mcpServers"].(map[string]any)
	servers["slow"] = map[string]any{"httpUrl": slow.url(), "timeout": 500, "protocolVersion": "2025-11-25"}
	done := make(chan struct{})
	var code int
	var body string
	go func() {
		defer close(done)
		writeConfig(t, r.path, cfg)
		req, _ := http.NewRequest("POST", r.d.URL()+"/v1/reload", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := r.http.Do(req)
		if err != nil {
			body = err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		code, body = resp.StatusCode, string(b)
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
