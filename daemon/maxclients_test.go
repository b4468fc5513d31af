package daemon_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/daemon"
)

// TestMaxClientsPerSession: a session endpoint holds at most MaxClients
// client sessions; one more is refused (503, saying why) while the others
// keep working, and taken once one of them has ended. Other sessions have
// their own count.
func TestMaxClientsPerSession(t *testing.T) {
	t.Parallel()
	r := start(t, baseConfig(), func(o *daemon.Options) { o.MaxClients = 2 })
	first := r.connect("alice", aliceToken)
	second := r.connect("alice", aliceToken)

	_, err := r.dial("alice", aliceToken)
	require.Error(t, err, "a third client of alice")
	assert.Contains(t, err.Error(), "Service Unavailable")
	code, body := r.do("POST", "/mcp/alice", aliceToken, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`),
		map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, `session "alice" has 2 clients, the most it takes`)
	r.waitLog("refused MCP client: the session has as many clients as it takes")
	assert.NotEmpty(t, first.tools(t), "the clients it has keep working")
	assert.NotEmpty(t, r.connect("bob", bobToken).tools(t), "bob counts his own")

	require.NoError(t, second.cs.Close()) // ends its session (DELETE)
	require.Eventually(t, func() bool {
		c, err := r.dial("alice", aliceToken)
		if err == nil {
			_ = c.cs.Close()
		}
		return err == nil
	}, eventWithin, 50*time.Millisecond, "a place freed is taken")
}
