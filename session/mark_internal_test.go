package session

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/pool"
)

// messagesConn is a connection whose messages to read are msgs, then EOF.
type messagesConn struct {
	mcp.Connection
	msgs []jsonrpc.Message
}

func (c *messagesConn) Read(context.Context) (jsonrpc.Message, error) {
	if len(c.msgs) == 0 {
		return nil, io.EOF
	}
	msg := c.msgs[0]
	c.msgs = c.msgs[1:]
	return msg, nil
}

// TestMarkNullParams: a request an upstream sends with "params": null (a
// ping, say: JSON-RPC allows params to be left out, and some servers write
// null) is marked like one without params, on a pooled stdio connection
// and on a call's HTTP stream alike, and its mark is read back. Before,
// marking it wrote into the nil map null decodes to: the panic, on the
// goroutine reading the upstream connection, took the whole daemon down,
// every session with it.
func TestMarkNullParams(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"ping", "roots/list", "sampling/createMessage"} {
		raw := `{"jsonrpc":"2.0","id":7,"method":"` + method + `","params":null}`

		r := NewProgressRelay()
		msg, err := jsonrpc.DecodeMessage([]byte(raw))
		require.NoError(t, err)
		c := &relayConn{Connection: &messagesConn{msgs: []jsonrpc.Message{msg}}, relay: r, bridging: pool.Bridging{Infer: true}, calls: make(map[jsonrpc.ID]*bridgeCall)}
		var got jsonrpc.Message
		require.NotPanics(t, func() { got, err = c.Read(t.Context()) }, "%s over stdio", method)
		require.NoError(t, err)
		req, ok := got.(*jsonrpc.Request)
		require.True(t, ok)
		p := &mcp.PingParams{}
		require.NoError(t, json.Unmarshal(req.Params, p), "%s: %s", method, req.Params)
		assert.True(t, strings.HasPrefix(r.takeMark(p), markNone), "%s over stdio: the request is marked: %s", method, req.Params)

		_, endBridge := r.beginBridge(t.Context(), &mcp.ClientSession{}, &mcp.ServerSession{})
		var call *bridgeCall
		for _, c := range r.byToken {
			call = c
		}
		stream := "data: " + raw + "\n\n"
		tap := &eventTap{ReadCloser: io.NopCloser(strings.NewReader(stream)), relay: r, call: call}
		var out []byte
		require.NotPanics(t, func() { out, err = io.ReadAll(tap) }, "%s on a call's stream", method)
		require.NoError(t, err)
		endBridge()
		data, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "data: ")
		require.True(t, ok, "%q", out)
		msg, err = jsonrpc.DecodeMessage([]byte(data))
		require.NoError(t, err)
		p = &mcp.PingParams{}
		require.NoError(t, json.Unmarshal(msg.(*jsonrpc.Request).Params, p))
		assert.Equal(t, markCall+call.token, r.takeMark(p), "%s on a call's stream: the request is marked", method)
	}
}
