package daemon_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/daemon"
)

// sockWait bounds how long a test waits for the daemon to close a
// socket it must close at once: generous, for a loaded machine. Without
// the limits under test the daemon would hold the socket for ever (or for
// minutes).
const sockWait = 30 * time.Second

// rawConn is a hostile HTTP client: it writes what it is told and reads
// the answer, nothing more.
type rawConn struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return &rawConn{t: t, conn: conn, br: bufio.NewReader(conn)}
}

func (c *rawConn) send(s string) {
	c.t.Helper()
	_, err := io.WriteString(c.conn, s)
	require.NoError(c.t, err)
}

// answer reads one response and its body.
func (c *rawConn) answer() (*http.Response, string) {
	c.t.Helper()
	require.NoError(c.t, c.conn.SetReadDeadline(time.Now().Add(sockWait)))
	resp, err := http.ReadResponse(c.br, nil)
	require.NoError(c.t, err, "no answer")
	body, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err, "answer's body")
	return resp, string(body)
}

// closed reports whether the daemon closed the connection (the next read
// ends) within sockWait, and what it read meanwhile.
func (c *rawConn) closed() (bool, string) {
	c.t.Helper()
	require.NoError(c.t, c.conn.SetReadDeadline(time.Now().Add(sockWait)))
	rest, err := io.ReadAll(c.br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false, string(rest)
	}
	return true, string(rest) // io.EOF, or a reset
}

// TestUnreadBodyClosesConnection: a request answered without reading the
// body it announces, and never sends, gets its answer at once and its
// connection closed at once, on every route: refusals (token, Host,
// Origin, unknown session, 404, 405) and answers that need no body
// (/healthz, /metrics, /v1/state, MCP requests that carry none). Before,
// net/http waited, without any deadline, for up to 256 KiB of the body
// after the answer, so that one client needing no token could hold every
// socket it opened.
func TestUnreadBodyClosesConnection(t *testing.T) {
	r := start(t, baseConfig())
	admin := "Authorization: Bearer " + adminToken + "\r\n"
	alice := "Authorization: Bearer " + aliceToken + "\r\n"
	for _, c := range []struct {
		name, method, path, headers string
		status                      int
	}{
		{"healthz", "GET", "/healthz", "", http.StatusOK},
		{"healthz chunked", "GET", "/healthz", "Transfer-Encoding: chunked\r\n", http.StatusOK},
		{"metrics", "GET", "/metrics", admin, http.StatusOK},
		{"metrics without token", "GET", "/metrics", "", http.StatusUnauthorized},
		{"metrics POST", "POST", "/metrics", admin, http.StatusMethodNotAllowed},
		{"state", "GET", "/v1/state", admin, http.StatusOK},
		{"reload without token", "POST", "/v1/reload", "", http.StatusUnauthorized},
		{"reload wrong token", "POST", "/v1/reload", alice, http.StatusUnauthorized},
		{"overlay without token", "PUT", "/v1/sessions/alice/servers/x", "", http.StatusUnauthorized},
		{"mcp without token", "POST", "/mcp/alice", "", http.StatusUnauthorized},
		{"mcp wrong token", "POST", "/mcp/alice", "Authorization: Bearer nope\r\n", http.StatusUnauthorized},
		{"mcp expect continue", "POST", "/mcp/alice", "Expect: 100-continue\r\n", http.StatusUnauthorized},
		{"mcp no such session", "POST", "/mcp/nobody", alice, http.StatusUnauthorized},
		{"mcp GET without session id", "GET", "/mcp/alice", alice + "Accept: text/event-stream\r\n", http.StatusBadRequest},
		{"mcp DELETE without session id", "DELETE", "/mcp/alice", alice, http.StatusBadRequest},
		{"404", "POST", "/no/such/path", "", http.StatusNotFound},
		{"Host refused", "POST", "/mcp/alice", "Host: rebind.example\r\n", http.StatusForbidden},
		{"Origin refused", "GET", "/healthz", "Origin: http://rebind.example\r\n", http.StatusForbidden},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			conn := dialRaw(t, r.d.Addr())
			headers := c.headers
			if !strings.Contains(headers, "Host:") {
				headers += "Host: 127.0.0.1\r\n"
			}
			if !strings.Contains(headers, "Transfer-Encoding") {
				headers += "Content-Length: 1000\r\n"
			}
			conn.send(c.method + " " + c.path + " HTTP/1.1\r\n" + headers + "Content-Type: application/json\r\n\r\n")
			resp, body := conn.answer()
			require.Equal(t, c.status, resp.StatusCode, body)
			assert.True(t, resp.Close, "the answer says Connection: close")
			closed, _ := conn.closed()
			require.True(t, closed, "the daemon holds the connection of a request whose body it does not read")
		})
	}
}

// TestUnreadBodySentAnswered: a client that sends the body the daemon
// does not read (a POST with an expired token, say) gets its answer and
// can finish sending, rather than a reset connection in the middle: the
// daemon ends the stream after its answer, then reads and drops what
// comes for a moment (lingerTime) before closing.
func TestUnreadBodySentAnswered(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	r := start(t, baseConfig())
	half := strings.Repeat("x", 100_000)
	conn := dialRaw(t, r.d.Addr())
	conn.send("POST /mcp/alice HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n" + half)
	resp, body := conn.answer()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, body)
	_, err := io.WriteString(conn.conn, half)
	require.NoError(t, err, "the rest of the body")
	require.NoError(t, conn.conn.SetReadDeadline(time.Now().Add(sockWait)))
	rest, err := io.ReadAll(conn.br)
	require.NoError(t, err, "the connection ends, not reset")
	require.Empty(t, rest)
}

// TestReadBodyKeepsConnection: a request whose body is read, or that
// announces none, keeps its kept-alive connection.
func TestReadBodyKeepsConnection(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	r := start(t, baseConfig())
	conn := dialRaw(t, r.d.Addr())
	conn.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	resp, _ := conn.answer()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.False(t, resp.Close)

	body := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	conn.send("POST /mcp/alice HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + aliceToken +
		"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	resp, text := conn.answer()
	require.False(t, resp.Close, "%d %s", resp.StatusCode, text)

	conn.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	resp, _ = conn.answer()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the same connection serves on")
}

// TestLargeHeadersRefused: a request whose headers pass 64 KiB is
// answered 431, not read into memory up to net/http's 1 MiB default.
func TestLargeHeadersRefused(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	r := start(t, baseConfig())
	conn := dialRaw(t, r.d.Addr())
	conn.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + strings.Repeat("a", 100_000) + "\r\n\r\n")
	resp, _ := conn.answer()
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)

	ok := dialRaw(t, r.d.Addr())
	ok.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + strings.Repeat("t", 16_000) + "\r\n\r\n")
	resp, _ = ok.answer()
	require.Equal(t, http.StatusOK, resp.StatusCode, "a long token fits")
}

// TestSlowAndIdleClientsClosed: a client that does not finish its
// request's headers within Options.ReadHeaderTimeout, and a kept-alive
// connection idle for Options.IdleTimeout, are closed.
func TestSlowAndIdleClientsClosed(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	r := start(t, baseConfig(), func(o *daemon.Options) {
		o.ReadHeaderTimeout = 200 * time.Millisecond
		o.IdleTimeout = 200 * time.Millisecond
	})
	slow := dialRaw(t, r.d.Addr())
	slow.send("GET /healthz HTTP/1.1\r\nHost: 127.")
	closed, _ := slow.closed()
	require.True(t, closed, "a client slow to send its headers keeps its connection")

	idle := dialRaw(t, r.d.Addr())
	idle.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	resp, _ := idle.answer()
	require.False(t, resp.Close)
	closed, _ = idle.closed()
	require.True(t, closed, "an idle kept-alive connection is kept")
}
