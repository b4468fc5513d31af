package daemon_test

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/demoserver"
)

// TestHTTPURLSecretsNeverLeak: the query of an "httpUrl" (where API keys
// often go), its password and header values stay out of the log, GET
// /v1/state and the overlay PUT answer, although the go-sdk's errors quote
// the URL whole (`Post "http://…/mcp?api_key=…"`).
func TestHTTPURLSecretsNeverLeak(t *testing.T) {
	t.Parallel()
	const secret = "qu3ry-s3cret-0123456789"
	addr := closedPort(t)
	cfg := baseConfig()
	set(cfg, "mcpServers.demo", map[string]any{
		"httpUrl": "http://user:pa55word@" + addr + "/mcp?api_key=" + secret,
		"headers": map[string]any{"Authorization": "Bearer h34der-s3cret"},
	})
	r := start(t, cfg)
	r.waitLog("acquire failed")

	_, state := r.do("GET", "/v1/state", adminToken, nil, nil)
	entry := mustJSON(t, map[string]any{"httpUrl": "http://" + addr + "/other?api_key=" + secret})
	_, put := r.do("PUT", "/v1/sessions/alice/servers/demo", adminToken, strings.NewReader(entry), nil)
	assertNoSecrets(t, map[string]string{"the log": r.logs.String(), "/v1/state": state, "the overlay answer": put},
		secret, "pa55word", "h34der-s3cret")
}

// TestCallFailureDoesNotLeakUpstreamURL: a call forwarded to an "httpUrl"
// upstream that has gone away is answered to the MCP client (and so to its
// model) without the API key in the URL the go-sdk's error names.
func TestCallFailureDoesNotLeakUpstreamURL(t *testing.T) {
	t.Parallel()
	const secret = "qu3ry-s3cret-abcdef012345"
	demo := demoserver.New()
	t.Cleanup(func() { // last: the server's half of the daemon's session
		for ss := range demo.MCP().Sessions() {
			_ = ss.Close()
		}
	})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return demo.MCP() },
		&mcp.StreamableHTTPOptions{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(ts.Close) // after the daemon's stop (cleanups run last in, first out)
	cfg := baseConfig()
	set(cfg, "mcpServers.demo", map[string]any{"httpUrl": ts.URL + "/mcp?api_key=" + secret})
	r := start(t, cfg)
	alice := r.connect("alice", aliceToken)
	require.Eventually(t, func() bool { return len(alice.tools(t)) == 3 }, eventWithin, 20*time.Millisecond)

	ts.Listener.Close()
	ts.CloseClientConnections()
	var texts []string
	for range 3 {
		res, err := alice.call(t, "demo__echo", map[string]any{"text": "hi"})
		switch {
		case err != nil:
			texts = append(texts, err.Error())
		case res.IsError:
			texts = append(texts, resultText(res))
		}
	}
	require.NotEmpty(t, texts, "the calls fail once the upstream is gone")
	for _, text := range texts {
		assert.NotContains(t, text, secret, "the client is told the upstream's API key")
	}
	assertNoSecrets(t, map[string]string{"the log": r.logs.String()}, secret)
}

// assertNoSecrets checks that none of secrets is in any of texts (by where
// the text comes from), showing the surroundings of a leak.
func assertNoSecrets(t *testing.T, texts map[string]string, secrets ...string) {
	t.Helper()
	for where, text := range texts {
		for _, s := range secrets {
			assert.False(t, strings.Contains(text, s), "%s leaks %q: …%s…", where, s, around(text, s))
		}
	}
}

// around returns the first s in text with up to 150 bytes before it and
// 50 after, or "" when text lacks s.
func around(text, s string) string {
	i := strings.Index(text, s)
	if i < 0 {
		return ""
	}
	return text[max(0, i-150):min(len(text), i+len(s)+50)]
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}
