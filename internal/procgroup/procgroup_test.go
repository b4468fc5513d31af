//go:build unix

package procgroup

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

// TestCloseEndsTheGroup: closing a connection made by Transport ends what
// the server started, here a child that ignores SIGTERM and outlives the
// server's exit on stdin EOF, and never the test's own group.
func TestCloseEndsTheGroup(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", `sh -c 'trap "" TERM; sleep 300' & exec cat`)
	ct := &mcp.CommandTransport{Command: cmd, TerminateDuration: 500 * time.Millisecond}
	c, err := Transport(ct, ct).Connect(context.Background())
	require.NoError(t, err)
	pgid := cmd.Process.Pid
	require.Eventually(t, func() bool { return groupAlive(pgid) }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // the background child is running

	start := time.Now()
	require.NoError(t, c.Close())
	require.False(t, groupAlive(pgid), "the group is gone once Close returns")
	require.Less(t, time.Since(start), 10*time.Second)
}
