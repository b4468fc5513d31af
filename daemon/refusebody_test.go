package daemon_test

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRefusedRequestBodyNotAwaited: a request refused for its
// token gets its answer at once, whatever body it announced but does not
// send, and the connection is closed: the daemon does not wait (forever,
// as it has no read timeout) for a body it will not use.
func TestRefusedRequestBodyNotAwaited(t *testing.T) {
	r := start(t, baseConfig())
	for _, c := range []struct {
		path, host string
		status     int
	}{
		{"/mcp/alice", "127.0.0.1", http.StatusUnauthorized},
		{"/v1/reload", "127.0.0.1", http.StatusUnauthorized},
		{"/no/such/path", "127.0.0.1", http.StatusNotFound},
		{"/metrics", "127.0.0.1", http.StatusMethodNotAllowed},
		{"/mcp/alice", "rebind.example", http.StatusForbidden},
	} {
		path := c.path
		conn, err := net.Dial("tcp", r.d.Addr())
		require.NoError(t, err)
		defer conn.Close()
		_, err = conn.Write([]byte("POST " + path + " HTTP/1.1\r\nHost: " + c.host + "\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"))
		require.NoError(t, err)
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(3*time.Second)))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err, "%s: no answer while the daemon waits for the body", path)
		resp.Body.Close()
		require.Equal(t, c.status, resp.StatusCode, path)
		require.True(t, resp.Close || strings.EqualFold(resp.Header.Get("Connection"), "close"), "%s: connection kept open", path)
	}
}
