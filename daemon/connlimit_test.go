package daemon_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/daemon"
)

// dialFrom opens a connection to addr from the local IP address from, or
// skips the test where the loopback network has no such address.
func dialFrom(t *testing.T, from, addr string) *rawConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: sockWait}
	conn, err := d.Dial("tcp", addr)
	if err != nil && from != "127.0.0.1" {
		t.Skipf("cannot connect from %s: %v", from, err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return &rawConn{t: t, conn: conn, br: bufio.NewReader(conn)}
}

// refused reports whether the daemon answered c 503 and closed it without
// waiting for a request.
func (c *rawConn) refused() bool {
	c.t.Helper()
	require.NoError(c.t, c.conn.SetReadDeadline(time.Now().Add(sockWait)))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return false
	}
	_, _ = io.ReadAll(resp.Body)
	closed, _ := c.closed()
	return resp.StatusCode == http.StatusServiceUnavailable && closed
}

// TestConnectionLimits: the daemon holds at most MaxConns connections,
// and MaxConnsPerIP from one client address; a connection beyond either is
// answered 503 and closed at once, counted by reason in
// wasmhost_http_conns_refused_total and logged. Connections that send
// nothing count: before, one client needing no token could hold every
// socket the process could open.
func TestConnectionLimits(t *testing.T) {
	t.Parallel()
	r := start(t, baseConfig(), func(o *daemon.Options) {
		o.MaxConns = 3
		o.MaxConnsPerIP = 2
	})
	addr := r.d.Addr()
	a1 := dialFrom(t, "127.0.0.1", addr)
	dialFrom(t, "127.0.0.1", addr) // a2: sends nothing either
	// The daemon accepts connections in the order they were made.
	require.True(t, dialFrom(t, "127.0.0.1", addr).refused(), "a third connection from 127.0.0.1")

	b1 := dialFrom(t, "127.0.0.2", addr)
	b1.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	resp, _ := b1.answer()
	require.Equal(t, http.StatusOK, resp.StatusCode, "another address has its own count")
	require.True(t, dialFrom(t, "127.0.0.2", addr).refused(), "a fourth connection in all")

	// A connection closed frees its place.
	a1.conn.Close()
	metrics := ""
	require.Eventually(t, func() bool {
		c := dialFrom(t, "127.0.0.1", addr)
		c.send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + adminToken + "\r\nConnection: close\r\n\r\n")
		require.NoError(t, c.conn.SetReadDeadline(time.Now().Add(sockWait)))
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		metrics = string(b)
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, 50*time.Millisecond, "the place of a closed connection is not freed")
	// The retries above may themselves be refused until the daemon sees
	// a1 close, so max_conns counts at least the one refusal made above.
	assert.Regexp(t, `wasmhost_http_conns_refused_total\{reason="max_conns"\} [1-9][0-9]*\n`, metrics)
	assert.Contains(t, metrics, `wasmhost_http_conns_refused_total{reason="max_conns_per_ip"} 1`+"\n")
	assert.Contains(t, metrics, "wasmhost_http_conns 3\n")
	assert.True(t, r.logs.HasLine("level=WARN", "refused connection: as many open from its address as --max-conns-per-ip allows", "limit=2", "remote=127.0.0.1"), r.logs.String())
	assert.True(t, r.logs.HasLine("level=WARN", "refused connection: as many open as --max-conns allows", "limit=3", "remote=127.0.0.2"), r.logs.String())
	assert.False(t, r.logs.HasLine("refused connection:", "remote=127.0.0.1:"), "the remote is the address, not the port")
}

// TestNoConnectionLimits: negative limits mean none.
func TestNoConnectionLimits(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	r := start(t, baseConfig(), func(o *daemon.Options) {
		o.MaxConns = -1
		o.MaxConnsPerIP = -1
	})
	for range 20 {
		dialFrom(t, "127.0.0.1", r.d.Addr())
	}
	c := dialFrom(t, "127.0.0.1", r.d.Addr())
	c.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	resp, _ := c.answer()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}
