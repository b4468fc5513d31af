package daemon_test

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSpansClipClientText: with traces on, a span's name and attributes
// carry the client's tool name; a client sending megabyte names must not
// make every span (and the exporter's queue of up to 2048) that large, so
// they are clipped.
func TestSpansClipClientText(t *testing.T) {
	exp := startTraces(t, "replica-r2")
	r := start(t, baseConfig())
	alice := r.connect("alice", aliceToken)
	long := strings.Repeat("x", 1<<20)
	_, err := alice.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: long})
	require.Error(t, err)
	var biggest int
	for _, s := range exp.GetSpans() {
		n := len(s.Name)
		for _, kv := range s.Attributes {
			n += len(kv.Value.String())
		}
		biggest = max(biggest, n)
	}
	assert.Less(t, biggest, 64<<10, "a span holds %d bytes of client-chosen text", biggest)
}
