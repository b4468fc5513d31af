package session

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/pool"
)

// TestLogMessagesQueuedForAClientAreBoundedInBytes: the log messages an
// upstream sends during one client's call wait for that client in a queue
// bounded in bytes as well as in count: a client that takes none holds at
// most maxQueuedLogBytes of them. Before, the bound was progressBuffer
// messages of any size: 64 messages of 16 MiB, 1 GiB held for one slow
// client of one call.
func TestLogMessagesQueuedForAClientAreBoundedInBytes(t *testing.T) {
	t.Parallel()
	const size = 1 << 20
	data := strings.Repeat("x", size)
	var msgs []jsonrpc.Message
	for i := range progressBuffer {
		raw := fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"%d%s"}}`, i, data)
		msg, err := jsonrpc.DecodeMessage([]byte(raw))
		require.NoError(t, err)
		msgs = append(msgs, msg)
	}
	// A call whose client takes nothing: no goroutine drains its queue.
	call := &bridgeCall{q: make(chan func(), progressBuffer), done: make(chan struct{})}
	c := &relayConn{Connection: &messagesConn{msgs: msgs}, relay: NewProgressRelay(), bridging: pool.Bridging{Infer: true},
		calls: map[jsonrpc.ID]*bridgeCall{}}
	id, err := jsonrpc.MakeID(float64(1))
	require.NoError(t, err)
	c.calls[id] = call
	_, err = c.Read(t.Context())
	require.ErrorIs(t, err, io.EOF, "every log message is taken for the call's client, none passed on")
	assert.LessOrEqual(t, len(call.q)*size, maxQueuedLogBytes, "%d messages of %d bytes queued", len(call.q), size)
	assert.Positive(t, len(call.q), "the messages within the bound are queued")
}
