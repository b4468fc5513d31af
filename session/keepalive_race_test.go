package session_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
)

// TestKeepAliveTicksAmidCalls: with a keep-alive interval of a millisecond
// or two, the keep-alive's timer sends headers and comments from its own
// goroutine while calls send progress, answer, are cancelled and their
// clients hang up; under -race, nothing the timer does to the response
// races the go-sdk's handler, and every call that was not cancelled gets
// its answer and its progress.
func TestKeepAliveTicksAmidCalls(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.keepAlive = time.Millisecond
	mcp.AddTool(f.up.Server, &mcp.Tool{Name: "jitter"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		N int `json:"n"`
	}) (*mcp.CallToolResult, any, error) {
		tok := req.Params.GetProgressToken()
		for i := range in.N {
			time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
			if tok != nil {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i + 1)}); err != nil {
					return nil, nil, err
				}
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	})
	c := f.connect("alice", `{}`)
	srv := httptest.NewServer(c.ep.HTTPHandler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return c.ep.Server() }, nil)))
	t.Cleanup(func() {
		c.ep.Close()
		srv.Close()
	})

	comments := make(chan struct{}, 1)
	spy := &http.Client{Transport: keepAliveSpy{base: http.DefaultTransport, seen: comments}}
	const clients, calls = 4, 25
	var wg sync.WaitGroup
	for w := range clients {
		wg.Go(func() {
			var mu sync.Mutex
			progress := map[string]int{}
			cl := mcp.NewClient(&mcp.Implementation{Name: "go", Version: "1"}, &mcp.ClientOptions{
				Logger: quiet,
				ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
					mu.Lock()
					progress[fmt.Sprint(req.Params.ProgressToken)]++
					mu.Unlock()
				},
			})
			cs, err := cl.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: spy, MaxRetries: -1}, nil)
			if !assert.NoError(t, err) {
				return
			}
			defer cs.Close()
			for i := range calls {
				n := i % 4
				tok := fmt.Sprintf("%d-%d", w, i)
				params := &mcp.CallToolParams{Name: "demo__jitter", Arguments: map[string]any{"n": n}}
				params.SetProgressToken(tok)
				ctx, cancel := context.WithCancel(t.Context())
				cancelled := i%5 == 4
				if cancelled { // the client gives up mid-call
					time.AfterFunc(time.Duration(rand.IntN(3000))*time.Microsecond, cancel)
				}
				res, err := cs.CallTool(ctx, params)
				cancel()
				if cancelled {
					continue
				}
				if !assert.NoError(t, err) {
					return
				}
				if text(res) != "done" {
					t.Errorf("call %s: %q", tok, text(res))
				}
				// The go-sdk client handles notifications on goroutines of
				// their own: they may come after the answer.
				if !assert.Eventually(t, func() bool {
					mu.Lock()
					defer mu.Unlock()
					return progress[tok] == n
				}, mcptest.EventWithin, time.Millisecond) {
					mu.Lock()
					t.Errorf("call %s: %d progress notifications, want %d", tok, progress[tok], n)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	select {
	case <-comments:
	default:
		t.Error("no keep-alive comment reached a call's stream: the test raced nothing")
	}
}

// TestClientGoneBeforeCallHeaders: a client that hangs up on a call before
// its response headers went out (they now wait for the answer or
// callHeadersAfter) still has the call cancelled upstream, and its
// session's next call is answered.
func TestClientGoneBeforeCallHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t) // the default keep-alive: headers after a second
	c := f.connect("alice", `{}`)
	hc := rawSession(t, c)
	ctx, hangUp := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hc.url, strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"demo__block","arguments":{}}}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", hc.sid)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	done := make(chan error, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
		}
		done <- err
	}()
	select {
	case <-f.up.Started:
	case <-time.After(mcptest.EventWithin):
		t.Fatal("the call did not reach the upstream")
	}
	hangUp()
	require.Error(t, <-done)
	select {
	case <-f.up.Cancelled:
	case <-time.After(mcptest.EventWithin):
		t.Fatal("the upstream call outlives its client")
	}
	res := hc.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"demo__meta","arguments":{"text":"x"}}}`, mcptest.EventWithin)
	require.Equal(t, http.StatusOK, res.StatusCode)
	l := waitLine(t, lines(res), "data: ", mcptest.EventWithin)
	require.Contains(t, l, "got x")
}
