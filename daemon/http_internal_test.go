package daemon

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHTTPServerTimeouts: the daemon's server bounds reading request
// headers and how long a kept-alive connection may idle between requests,
// by default and as Options say, and puts no bound on a request under
// way.
func TestHTTPServerTimeouts(t *testing.T) {
	t.Parallel()
	d, err := New(Options{ConfigPath: "wasmhost.json"})
	require.NoError(t, err)
	srv := d.httpServer()
	require.Equal(t, DefaultReadHeaderTimeout, srv.ReadHeaderTimeout)
	require.Equal(t, DefaultIdleTimeout, srv.IdleTimeout, "an idle kept-alive connection would be held for ever")
	require.Zero(t, srv.ReadTimeout, "a read timeout would cut event streams and long calls")
	require.Zero(t, srv.WriteTimeout, "a write timeout would cut event streams and long calls")
	require.NotNil(t, srv.ConnContext, "closeUnread finds the connection in the request's context")
	require.Equal(t, DefaultMaxConns, d.opts.MaxConns)
	require.Equal(t, DefaultMaxConnsPerIP, d.opts.MaxConnsPerIP)

	d, err = New(Options{ConfigPath: "wasmhost.json", IdleTimeout: 3 * time.Second, ReadHeaderTimeout: 2 * time.Second, MaxConns: -1, MaxConnsPerIP: 7})
	require.NoError(t, err)
	srv = d.httpServer()
	require.Equal(t, 2*time.Second, srv.ReadHeaderTimeout)
	require.Equal(t, 3*time.Second, srv.IdleTimeout)
	require.Equal(t, -1, d.opts.MaxConns)
	require.Equal(t, 7, d.opts.MaxConnsPerIP)
}

// TestClientKey: connections are counted by IPv4 address, and by IPv6
// /64 (a host commonly has a whole /64 to pick addresses from).
func TestClientKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ addr, ip, key string }{
		{"192.0.2.7:4000", "192.0.2.7", "192.0.2.7"},
		{"[::ffff:192.0.2.7]:4000", "192.0.2.7", "192.0.2.7"},
		{"[2001:db8:1:2:aaaa::1]:4000", "2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:bbbb::9]:4000", "2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"},
		{"[::1]:4000", "::1", "::/64"},
	} {
		a, err := net.ResolveTCPAddr("tcp", c.addr)
		require.NoError(t, err)
		ip, key := clientKey(a)
		assert.Equal(t, c.ip, ip, c.addr)
		assert.Equal(t, c.key, key, c.addr)
	}
}

// TestClip: a value from a request is logged cut, on a character
// boundary, with its length.
func TestClip(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "short", clip("short"))
	long := strings.Repeat("é", 1000) // 2 bytes each
	got := clip(long)
	assert.True(t, strings.HasPrefix(got, strings.Repeat("é", maxLoggedValue/2)+"... (2000 bytes)"), got)
	odd := "a" + long
	assert.Equal(t, "a"+strings.Repeat("é", maxLoggedValue/2-1)+"... (2001 bytes)", clip(odd))
}
