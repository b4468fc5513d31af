//go:build unix

package daemon_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/procgroup"
)

// TestClosedUpstreamLeavesNoChildren runs a stdio upstream that is a shell
// script starting a child that ignores stdin EOF, then the demo server:
// removing the server by a reload, and stopping the daemon, end the child
// too, not just the server.
func TestClosedUpstreamLeavesNoChildren(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	dir := t.TempDir()
	script, pidFile := wrapperScript(t, dir)
	cfg := baseConfig()
	set(cfg, "mcpServers.wrapped", map[string]any{"command": script, "env": map[string]any{demoserver.ChildEnv: "1"}})
	r := start(t, cfg)

	// Removing the server by a reload.
	child := waitChildPID(t, pidFile)
	delete(cfg["mcpServers"].(map[string]any), "wrapped")
	writeConfig(t, r.path, cfg)
	code, body := r.do("POST", "/v1/reload", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "transports 1 reused, 0 started, 1 stopped")
	waitGone(t, child)

	// Stopping the daemon.
	require.NoError(t, os.Remove(pidFile))
	set(cfg, "mcpServers.wrapped", map[string]any{"command": script, "env": map[string]any{demoserver.ChildEnv: "1"}})
	writeConfig(t, r.path, cfg)
	code, body = r.do("POST", "/v1/reload", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, code, body)
	child = waitChildPID(t, pidFile)
	r.stop()
	waitGone(t, child)
}

// wrapperScript writes a shell script that starts `sleep 300` in the
// background, writes its pid to the returned pid file and then runs this
// test binary (the demo server when demoserver.ChildEnv is set).
func wrapperScript(t *testing.T, dir string) (script, pidFile string) {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	for _, p := range []string{self, dir} {
		if strings.Contains(p, "'") {
			t.Skipf("skipped: path %q has a quote", p)
		}
	}
	pidFile = filepath.Join(dir, "child.pid")
	script = filepath.Join(dir, "wrapper.sh")
	body := "#!/bin/sh\n" +
		"sleep 300 &\n" +
		"echo $! > '" + pidFile + ".tmp' && mv '" + pidFile + ".tmp' '" + pidFile + "'\n" +
		"exec '" + self + "'\n"
	require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
	return script, pidFile
}

// waitChildPID waits for the wrapper script's pid file and returns the pid
// in it; the test's cleanup kills that process if it is still there.
func waitChildPID(t *testing.T, pidFile string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, eventWithin, 20*time.Millisecond, "the wrapper script did not start")
	t.Cleanup(func() {
		if !procgroup.Ended(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pid
}

// waitGone waits a few seconds for process pid to end.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	require.Eventually(t, func() bool { return procgroup.Ended(pid) }, 10*time.Second, 20*time.Millisecond,
		"the upstream's child %d outlived it", pid)
}
