//go:build linux

package leakcheck_test

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/leakcheck"
)

// TestSettleFindsLeaks: Settle fails for a goroutine, a file descriptor and
// a child process left behind, naming each, and passes once they are gone.
func TestSettleFindsLeaks(t *testing.T) {
	base := leakcheck.Quiet(t, 5*time.Second)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-stop
	}()
	f, err := os.Open(os.DevNull)
	require.NoError(t, err)
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())

	err = leakcheck.Settle(base, 0, len(base.Children), 200*time.Millisecond)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "TestSettleFindsLeaks.func1")
	assert.Contains(t, err.Error(), "-> "+os.DevNull)
	assert.Contains(t, err.Error(), fmt.Sprintf("pid %d (state S: sleep 30)", cmd.Process.Pid))

	close(stop)
	<-done
	require.NoError(t, f.Close())
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.NoError(t, leakcheck.Settle(base, 0, len(base.Children), 5*time.Second))
}
