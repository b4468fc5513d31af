package daemon

import (
	"context"
	"os/exec"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPIDTableForgetsClosedConnections: a stdio upstream's pid is recorded
// while its connection is open and dropped when it closes, so the table
// holds the identities in use, not every one ever started; a close of an
// older connection leaves a newer process of the same identity recorded.
func TestPIDTableForgetsClosedConnections(t *testing.T) {
	t.Parallel()
	pids := newPIDTable()
	connect := func() (mcp.Connection, int) {
		ct := &mcp.CommandTransport{Command: exec.Command("cat")}
		c, err := (&pidTransport{Transport: ct, cmd: ct, identity: "cat", pids: pids}).Connect(context.Background())
		require.NoError(t, err)
		return c, ct.Command.Process.Pid
	}
	first, pid1 := connect()
	assert.Equal(t, pid1, pids.get("cat"))
	second, pid2 := connect()
	assert.Equal(t, pid2, pids.get("cat"))

	require.NoError(t, first.Close())
	assert.Equal(t, pid2, pids.get("cat"), "closing the older connection keeps the newer pid")
	require.NoError(t, second.Close())
	assert.Zero(t, pids.get("cat"))
	assert.Empty(t, pids.pids)
}
