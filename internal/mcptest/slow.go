package mcptest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// SlowEnv, set to "1" in a test binary's environment, makes RunSlowIfChild
// serve the slow upstream over standard input and output: a config entry
// {"command": os.Args[0], "env": {SlowEnv: "1"}} starts it, for tests of
// what happens to a call under way.
const SlowEnv = "WASMHOST_TEST_SLOW_UPSTREAM"

// RunSlowIfChild, called first in TestMain, serves the slow upstream and
// exits when SlowEnv is "1"; otherwise it returns at once. The upstream has
// one tool, "slow", that creates the file its argument "mark" names, waits
// "ms" milliseconds (or until the call is cancelled) and answers "slept",
// followed by "pad" dots.
func RunSlowIfChild() {
	if os.Getenv(SlowEnv) != "1" {
		return
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "slow", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "slow"}, func(ctx context.Context, _ *mcp.CallToolRequest, in slowIn) (*mcp.CallToolResult, any, error) {
		if err := os.WriteFile(in.Mark, nil, 0o600); err != nil {
			return nil, nil, err
		}
		select {
		case <-time.After(time.Duration(in.MS) * time.Millisecond):
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "slept" + strings.Repeat(".", in.Pad)}}}, nil, nil
	})
	_ = srv.Run(context.Background(), &mcp.StdioTransport{})
	os.Exit(0)
}

type slowIn struct {
	Mark string `json:"mark"`
	MS   int    `json:"ms"`
	Pad  int    `json:"pad,omitempty"` // bytes of padding after "slept", for a large answer
}

// StartSlow calls the slow upstream's tool, exposed to cs as name, so that
// it sleeps ms and answers with pad more bytes, and returns once the call
// has reached the upstream. The call's result arrives on the channel (nil,
// with the test failed, if the call got no answer).
func StartSlow(t *testing.T, cs *mcp.ClientSession, name string, ms, pad int) <-chan *mcp.CallToolResult {
	t.Helper()
	mark := filepath.Join(t.TempDir(), "started")
	answered := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: map[string]any{"mark": mark, "ms": ms, "pad": pad}})
		if err != nil {
			t.Errorf("the call got no answer: %v", err)
		}
		answered <- res
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(mark); err == nil {
			return answered
		}
		if time.Now().After(deadline) {
			t.Fatal("the call did not reach the upstream in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
