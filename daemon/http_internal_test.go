package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHTTPServerTimeouts: the daemon's server bounds reading request
// headers and how long a kept-alive connection may idle between requests.
func TestHTTPServerTimeouts(t *testing.T) {
	d, err := New(Options{ConfigPath: "wasmhost.json"})
	require.NoError(t, err)
	srv := d.httpServer()
	require.NotZero(t, srv.ReadHeaderTimeout)
	require.NotZero(t, srv.IdleTimeout, "an idle kept-alive connection would be held for ever")
	require.Zero(t, srv.ReadTimeout, "a read timeout would cut event streams and long calls")
}
