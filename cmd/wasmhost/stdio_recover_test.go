//go:build unix

package main

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
)

// TestStdioRecoversCrashedUpstream: an upstream that crashes is withdrawn
// (its tools leave the session), reconnected by the supervisor, and its
// tools come back on a new process; standard error, at the default log
// level, says that it went away and that it is back. A resource
// subscription held across the crash is made again on the new process: a
// note written there is announced to the client.
func TestStdioRecoversCrashedUpstream(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("kills an upstream process and waits for the restart; TestStdioServesOneSession stays in -short; run without -short")
	}
	// carol sees every demo tool, write_note included.
	path := demoConfigWith(t, func(cfg map[string]any) {
		cfg["sessions"].(map[string]any)["carol"] = map[string]any{"token": "carol-token-0123456789abcdef"}
	})

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var errOut mcptest.LogBuffer
	done := make(chan int, 1)
	go func() {
		code := run(t.Context(), []string{"stdio", "--config", path, "--session", "carol"}, inR, outW, &errOut)
		outW.Close()
		done <- code
	}()
	const note = "demo://notes/welcome"
	updated := make(chan string, 16)
	cl := mcp.NewClient(&mcp.Implementation{Name: "cli-test", Version: "1"}, &mcp.ClientOptions{
		Logger: slog.New(slog.DiscardHandler),
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			updated <- req.Params.URI
		},
	})
	cs, err := cl.Connect(t.Context(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	require.NoError(t, err, "stderr:\n%s", errOut.String())
	require.Eventually(t, func() bool { return slices.Contains(toolNames(t, cs), "pid") }, eventWithin, 20*time.Millisecond)
	require.NoError(t, cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: note}))

	pid := func() (int, bool) {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "pid"})
		if err != nil || res.IsError {
			return 0, false
		}
		n, err := strconv.Atoi(mcptest.Text(res))
		return n, err == nil
	}
	first, ok := pid()
	require.True(t, ok)
	require.NoError(t, syscall.Kill(first, syscall.SIGKILL))

	require.Eventually(t, func() bool {
		names, err := mcptest.ToolNames(t.Context(), cs)
		return err == nil && !slices.Contains(names, "pid")
	}, eventWithin, 5*time.Millisecond, "the crashed upstream's tools were withdrawn")
	var second int
	require.Eventually(t, func() bool {
		second, ok = pid()
		return ok
	}, eventWithin, 20*time.Millisecond, "the upstream was reconnected")
	assert.NotEqual(t, first, second, "a new process")

	// The subscription is made again asynchronously: write until the
	// update comes.
	require.Eventually(t, func() bool {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "write_note", Arguments: map[string]any{"name": "welcome", "text": "again"}})
		if err != nil || res.IsError {
			return false
		}
		select {
		case uri := <-updated:
			return uri == note
		case <-time.After(200 * time.Millisecond):
			return false
		}
	}, eventWithin, 10*time.Millisecond, "no update from the new process")

	require.NoError(t, cs.Close())
	require.NoError(t, inW.Close())
	select {
	case code := <-done:
		assert.Equal(t, exitOK, code, errOut.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("stdio did not exit; stderr:\n%s", errOut.String())
	}
	stderr := errOut.String()
	assert.Contains(t, stderr, "upstream connection failed", "the operator is told it went away")
	assert.Contains(t, stderr, "upstream down; retrying with backoff")
	assert.Contains(t, stderr, "upstream reconnected", "the operator told it went away is told it is back")
}
