package daemon_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refusedGet sends one request that is refused, on a connection of its
// own, and returns the status.
func refusedGet(t *testing.T, addr, path, headers string) (int, string, http.Header) {
	t.Helper()
	c := dialRaw(t, addr)
	c.send("GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + "\r\n")
	resp, body := c.answer()
	c.conn.Close()
	return resp.StatusCode, body, resp.Header
}

// TestRefusalLogBounded: a client needing no token cannot fill the log.
// A refused request's header is logged cut to a few hundred bytes, with
// its length; refusals of one kind are logged ten at once, then one every
// few seconds, and the first line logged after a pause says how many were
// not. Before, each refusal was logged with the whole header: a 900 KB
// Origin on /healthz wrote 374 MiB of log in 10 s. (Headers over 64 KiB
// are now refused by net/http, 431, before any handler or log line.)
func TestRefusalLogBounded(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	r := start(t, baseConfig())
	origin := "http://" + strings.Repeat("a", 50_000) + ".example"
	before := len(r.logs.String())
	const sent = 50
	for range sent {
		code, body, _ := refusedGet(t, r.d.Addr(), "/healthz", "Origin: "+origin+"\r\n")
		require.Equal(t, http.StatusForbidden, code)
		require.Less(t, len(body), 1000, "the answer quotes the header cut too")
	}
	logs := r.logs.String()[before:]
	lines := strings.Count(logs, "refused request: Origin not allowed")
	assert.GreaterOrEqual(t, lines, 1)
	assert.Less(t, lines, sent/2, "refusals are rate-limited")
	for line := range strings.SplitSeq(logs, "\n") {
		require.Less(t, len(line), 1500, "a log line of a refusal is short: %.300s", line)
	}
	assert.True(t, r.logs.HasLine("refused request: Origin not allowed", "(50015 bytes)"), "the length of the header cut")

	// Once the rate allows a line again, the first says how many were not
	// logged. Refusals every 50 ms until then.
	require.Eventually(t, func() bool {
		refusedGet(t, r.d.Addr(), "/healthz", "Origin: "+origin+"\r\n")
		return r.logs.HasLine("level=INFO", "refusals suppressed", "reason=origin")
	}, 60*time.Second, 50*time.Millisecond, "no line says how many refusals were not logged")
	assert.Less(t, len(r.logs.String())-before, 50_000, "all the lines of this test")

	code, body := r.do("GET", "/metrics", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, code)
	assert.Regexp(t, `wasmhost_http_requests_refused_total\{reason="origin"\} (5\d|[6-9]\d|\d{3,})\n`, body, "every refusal is counted")
}

// TestRefusalReasonsLogged: every refused request is logged at info with
// why (rate-limited), while the client learns no more than 401 (403 for
// Host and Origin). A token is never logged.
func TestRefusalReasonsLogged(t *testing.T) {
	t.Parallel()
	r := start(t, baseConfig())
	addr := r.d.Addr()
	const wrong = "wrong-secret-0123456789"
	for _, c := range []struct {
		path, headers string
		status        int
		line          []string
	}{
		{"/mcp/alice", "", 401, []string{"refused MCP request: no Authorization header", "session=alice"}},
		{"/mcp/alice", "Authorization: " + wrong + "\r\n", 401, []string{"refused MCP request: Authorization is not a Bearer token", "session=alice"}},
		{"/mcp/alice", "Authorization: Basic " + wrong + "\r\n", 401, []string{"refused MCP request: Authorization is not a Bearer token", "session=alice"}},
		{"/mcp/alice", "Authorization: Bearer \r\n", 401, []string{"refused MCP request: Authorization is not a Bearer token", "session=alice"}},
		{"/mcp/alice", "Authorization: Bearer " + wrong + "\r\n", 401, []string{"refused MCP request: wrong token", "session=alice"}},
		{"/mcp/alice", "Authorization: Bearer " + bobToken + "\r\n", 401, []string{"refused MCP request: wrong token: the token of session bob", "session=alice"}},
		{"/mcp/alice", "Authorization: Bearer " + adminToken + "\r\n", 401, []string{"refused MCP request: wrong token: the admin token", "session=alice"}},
		{"/mcp/nobody", "Authorization: Bearer " + aliceToken + "\r\n", 401, []string{"refused MCP request: no such session", "session=nobody"}},
		{"/mcp/" + strings.Repeat("n", 5000), "", 401, []string{"refused MCP request: no such session", "(5000 bytes)"}},
		{"/v1/state", "", 401, []string{"refused admin request: no Authorization header", "path=/v1/state"}},
		{"/v1/state", "Authorization: Bearer " + wrong + "\r\n", 401, []string{"refused admin request: wrong token", "path=/v1/state"}},
		{"/v1/state", "Authorization: Bearer " + aliceToken + "\r\n", 401, []string{"refused admin request: wrong token: the token of session alice"}},
		{"/v1/state", "Authorization: " + adminToken + "\r\n", 401, []string{"refused admin request: Authorization is not a Bearer token"}},
		{"/healthz", "Origin: http://evil.example\r\n", 403, []string{"refused request: Origin not allowed", "origin=http://evil.example", "path=/healthz"}},
	} {
		code, body, header := refusedGet(t, addr, c.path, c.headers)
		require.Equal(t, c.status, code, "%s %s", c.path, c.headers)
		if code == http.StatusUnauthorized {
			assert.Equal(t, "Unauthorized\n", body, "a 401 tells nothing more")
			assert.Contains(t, header.Get("WWW-Authenticate"), `Bearer realm="wasmhost`)
		}
		assert.True(t, r.logs.HasLine(append([]string{"level=INFO"}, c.line...)...), "%s %s: no line %q in\n%s", c.path, c.headers, c.line, r.logs.String())
	}
	c := dialRaw(t, addr)
	c.send("GET /healthz HTTP/1.1\r\nHost: evil.example\r\n\r\n")
	resp, _ := c.answer()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.True(t, r.logs.HasLine("level=INFO", "refused request: Host not allowed", "host=evil.example"), r.logs.String())

	assert.NotContains(t, r.logs.String(), wrong, "a token is never logged")
	assert.False(t, r.logs.HasLine("wrong token", "session=bob"), "the session is the one asked for")
}
