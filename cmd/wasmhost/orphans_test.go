//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/internal/procgroup"
)

// spawningUpstream writes a shell script that starts a child ignoring
// SIGTERM and one that leaves the process group with setsid, writes their
// pids and its own to pid files, and then becomes the slow upstream (this
// test binary). It returns the config entry that runs it and the pid
// files.
func spawningUpstream(t *testing.T) (map[string]any, []string) {
	t.Helper()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("skipped: no setsid command")
	}
	dir := t.TempDir()
	self, err := os.Executable()
	require.NoError(t, err)
	for _, p := range []string{self, dir} {
		if strings.Contains(p, "'") {
			t.Skipf("skipped: path %q has a quote", p)
		}
	}
	pid := func(name string) string { return filepath.Join(dir, name+".pid") }
	write := func(name string) string {
		return "> '" + pid(name) + ".tmp' && mv '" + pid(name) + ".tmp' '" + pid(name) + "'"
	}
	body := "#!/bin/sh\n" +
		"sh -c 'trap \"\" TERM; sleep 300' &\n" +
		"echo $! " + write("child") + "\n" +
		"setsid sh -c 'echo $$ " + write("escaped") + "; exec sleep 300' &\n" +
		"echo $$ " + write("upstream") + "\n" +
		"exec '" + self + "'\n"
	script := filepath.Join(dir, "upstream.sh")
	require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
	entry := map[string]any{"command": script, "env": map[string]any{mcptest.SlowEnv: "1", "GORACE": "atexit_sleep_ms=0"}}
	return entry, []string{pid("child"), pid("escaped"), pid("upstream")}
}

// requireNoneLeft waits, generously (the machine may be loaded), until
// every process of pids has ended.
func requireNoneLeft(t *testing.T, what string, pids []int, files []string, stderr *mcptest.LogBuffer) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for i, pid := range pids {
		for !procgroup.Ended(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the upstream's %s (pid %d) still runs a minute later; wasmhost's stderr:\n%s", what, filepath.Base(files[i]), pid, stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// Before the supervisor, `wasmhost stdio` killed with SIGKILL left its
// upstreams running (7 of 8 processes in the review): its upstream, the
// child that ignores SIGTERM and the one that called setsid all end now.
func TestStdioKilledLeavesNoUpstream(t *testing.T) {
	entry, files := spawningUpstream(t)
	p := startStdioProcess(t, entry, time.Second)
	var pids []int
	for _, f := range files {
		pids = append(pids, readPID(t, f))
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	p.wait(30 * time.Second)
	requireNoneLeft(t, "wasmhost stdio killed", pids, files, &p.stderr)
}

// The same for the daemon, `wasmhost run`.
func TestDaemonKilledLeavesNoUpstream(t *testing.T) {
	entry, files := spawningUpstream(t)
	path := aliceConfig(t, "slow", entry)
	args, err := json.Marshal([]string{"run", "--config", path, "--listen", "127.0.0.1:0"})
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStdioProcess$")
	cmd.Env = append(os.Environ(), stdioHelperEnv+"=1", stdioHelperArgs+"="+string(args),
		"WASMHOST_CLI_DEMO_HELPER=1", "GORACE=atexit_sleep_ms=0")
	var stderr mcptest.LogBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	var pids []int
	for _, f := range files {
		pids = append(pids, readPID(t, f))
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	<-exited
	requireNoneLeft(t, "wasmhost run killed", pids, files, &stderr)
}
