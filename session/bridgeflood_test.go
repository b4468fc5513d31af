package session_test

//lint:file-ignore SA1019 the test uses sampling, deprecated (SEP-2577) but still used during its deprecation window

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/session"
)

// TestBridgeQuestionFloodIsBounded: an upstream that, during one call,
// sends its client many more sampling requests at once than
// session.MaxInputRequests (a client whose user has not answered yet
// holds each) gets the ones beyond that bound refused at once, with an
// error saying why, and the client is asked no more than the bound at a
// time. Before, every request was passed on, each holding a goroutine of
// the daemon's and an entry of the calling client's connection for as long
// as the client took: an upstream could pin as many as it liked. Over a
// pooled stdio link (inference) and streamable HTTP (the call's stream).
func TestBridgeQuestionFloodIsBounded(t *testing.T) {
	t.Parallel()
	for name, mk := range pooledRigs() {
		t.Run(name, func(t *testing.T) {
			const n = 4 * session.MaxInputRequests
			up := newBridgeUpstream()
			var refused, asked atomic.Int32
			var refusal atomic.Value
			mcp.AddTool(up.server, &mcp.Tool{Name: "flood"}, func(ctx context.Context, req *mcp.CallToolRequest, in askIn) (*mcp.CallToolResult, any, error) {
				var wg sync.WaitGroup
				for range n {
					wg.Go(func() {
						_, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 1, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "who:flood"}}}})
						if err != nil {
							refusal.Store(err.Error())
							refused.Add(1)
						}
					})
				}
				wg.Wait()
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
			})
			r := mk(t, up)
			a := r.connect("alice", "")
			a.block = make(chan struct{})
			stop := make(chan struct{})
			drained := make(chan struct{})
			go func() { // the client's handler reports each question on a.asked
				defer close(drained)
				for {
					select {
					case <-a.asked:
						asked.Add(1)
					case <-stop:
						return
					}
				}
			}()
			res := make(chan error, 1)
			go func() {
				_, err := a.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__flood", Arguments: askIn{Who: "alice"}})
				res <- err
			}()
			mcptest.WaitFor(t, mcptest.EventWithin, func() bool { return asked.Load()+refused.Load() >= n }, func() string { return "" },
				"every question asked (%d) or refused (%d), of %d", asked.Load(), refused.Load(), n)
			assert.Equal(t, int32(session.MaxInputRequests), asked.Load(), "questions the client holds at once")
			assert.Equal(t, int32(n-session.MaxInputRequests), refused.Load())
			if msg, _ := refusal.Load().(string); assert.NotEmpty(t, msg) {
				assert.True(t, strings.Contains(msg, `server "up"`) && strings.Contains(msg, "questions"), msg)
			}
			close(a.block) // the user answers
			require.NoError(t, <-res)
			close(stop)
			<-drained
		})
	}
}
