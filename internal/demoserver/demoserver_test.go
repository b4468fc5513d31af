package demoserver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/demoserver"
)

func TestMain(m *testing.M) {
	demoserver.RunIfChild()
	os.Exit(m.Run())
}

func callText(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err)
	require.False(t, res.IsError, "%v", res.Content)
	require.Len(t, res.Content, 1)
	return res.Content[0].(*mcp.TextContent).Text
}

// TestChildProcess starts this test binary as the demo server over a real
// stdio pipe, talks to it, and checks that it exits cleanly (status 0) when
// the client closes its stdin.
func TestChildProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), demoserver.ChildEnv+"=1")
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)

	assert.Equal(t, "wasmhost-demo", cs.InitializeResult().ServerInfo.Name)
	pid, err := strconv.Atoi(callText(t, cs, "pid", nil))
	require.NoError(t, err)
	assert.Equal(t, cmd.Process.Pid, pid)
	assert.NotEqual(t, os.Getpid(), pid)
	assert.Equal(t, "over a pipe", callText(t, cs, "echo", map[string]any{"text": "over a pipe"}))

	require.NoError(t, cs.Close(), "the child exits with status 0 when stdin closes")
	assert.True(t, cmd.ProcessState.Success())
}

// TestServer exercises the demo server's tools, prompts and resources over
// in-memory transports, including the list_changed sent by add_tool.
func TestServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := demoserver.New()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.MCP().Connect(ctx, st, nil)
	require.NoError(t, err)
	defer ss.Close()
	changed := make(chan struct{}, 4)
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	cs, err := client.Connect(ctx, ct, nil)
	require.NoError(t, err)
	defer cs.Close()

	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		require.NoError(t, err)
		names = append(names, tool.Name)
	}
	assert.ElementsMatch(t, []string{"echo", "add", "read_note", "write_note", "pid", "add_tool"}, names)
	assert.Equal(t, "5.5", callText(t, cs, "add", map[string]any{"a": 2, "b": 3.5}))
	assert.Equal(t, strconv.Itoa(os.Getpid()), callText(t, cs, "pid", nil))

	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "write_note", Arguments: map[string]any{"name": "todo", "text": "ship it"}})
	require.NoError(t, err)
	assert.Equal(t, []string{"todo", "welcome"}, srv.NoteNames())
	res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "demo://notes/welcome"})
	require.NoError(t, err)
	assert.Equal(t, "Hello from the wasmhost demo server.", res.Contents[0].Text)
	prompt, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "summarize", Arguments: map[string]string{"name": "todo"}})
	require.NoError(t, err)
	assert.Equal(t, "Summarize: ship it", prompt.Messages[0].Content.(*mcp.TextContent).Text)

	assert.Equal(t, "added extra_1", callText(t, cs, "add_tool", nil))
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("no tools/list_changed after add_tool")
	}
	assert.Equal(t, "via extra", callText(t, cs, "extra_1", map[string]any{"text": "via extra"}))
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{context.Canceled, 0},
		{fmt.Errorf("reading: %w", io.EOF), 0},
		{errors.New("broken pipe"), 1},
	} {
		assert.Equal(t, tc.want, demoserver.ExitCode(tc.err), "%v", tc.err)
	}
}
