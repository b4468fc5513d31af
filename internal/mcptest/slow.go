package mcptest

import (
	"context"
	"os"
	"strings"
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
