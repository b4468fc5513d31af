package daemon_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStateClipsClientInfo: /v1/state, which the operator page polls,
// lists the clients' own clientInfo; a client choosing a 3 MiB name must
// not make every poll megabytes long.
func TestStateClipsClientInfo(t *testing.T) {
	t.Parallel()
	r := start(t, baseConfig())
	name := strings.Repeat("A", 3<<20)
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":%q,"version":"1"}}}`, name)
	code, resp := r.do("POST", "/mcp/alice", aliceToken, strings.NewReader(body), map[string]string{
		"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
	require.Equal(t, http.StatusOK, code, resp[:min(len(resp), 300)])
	code, st := r.do("GET", "/v1/state", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, code)
	assert.Less(t, len(st), 1<<20, "/v1/state is %d bytes after one client's initialize", len(st))
}
