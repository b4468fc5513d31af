package daemon_test

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// REVIEW2: with traces on, the SERVER span is opened (outermost middleware)
// before the name is checked, and its name and gen_ai.tool.name attribute
// are the client's tool name, unclipped; the SDK's default span limits do
// not clip attribute values, and the batch processor queues up to 2048
// spans. A client of any session sending ~4 MB unknown names pins
// 2048 x 2 x 4 MB (~16 GB) in the export queue.
func TestReview2SpanNameUnbounded(t *testing.T) {
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
			n += len(kv.Value.Emit())
		}
		biggest = max(biggest, n)
	}
	assert.Less(t, biggest, 64<<10, "a span holds %d bytes of client-chosen text", biggest)
}
