//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// waitPIDFiles waits, generously (under load, the policy plugin alone
// has taken 48 s to compile before wasmhost starts its upstreams), for each
// pid file and returns the pids; the test's cleanup kills those still
// running.
func waitPIDFiles(t *testing.T, files []string, stderr *mcptest.LogBuffer) []int {
	t.Helper()
	var pids []int
	for _, f := range files {
		var pid int
		mcptest.WaitFor(t, 3*time.Minute, func() bool {
			b, err := os.ReadFile(f)
			if err != nil {
				return false
			}
			pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil
		}, stderr.String, "a pid in %s (the logs are wasmhost's stderr)", f)
		pids = append(pids, pid)
		t.Cleanup(func() {
			if !procgroup.Ended(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
	}
	return pids
}

// requireNoneLeft waits, generously, until every process of pids has
// ended.
func requireNoneLeft(t *testing.T, what string, pids []int, files []string, stderr *mcptest.LogBuffer) {
	t.Helper()
	var left []string
	mcptest.WaitFor(t, 60*time.Second, func() bool {
		left = left[:0]
		for i, pid := range pids {
			if !procgroup.Ended(pid) {
				left = append(left, fmt.Sprintf("%s (pid %d)", filepath.Base(files[i]), pid))
			}
		}
		return len(left) == 0
	}, stderr.String, "%s: every upstream process ends (still running: %v; the logs are wasmhost's stderr)", what, &left)
}

// killedLeavesNoUpstream runs the wasmhost command line args (this test
// binary as main runs it) on a config whose one server is the spawning
// upstream, waits for the upstream's processes, SIGKILLs wasmhost and
// waits for all of them to end.
func killedLeavesNoUpstream(t *testing.T, args ...string) {
	entry, files := spawningUpstream(t)
	path := aliceConfig(t, "slow", entry)
	encoded, err := json.Marshal(append(args, "--config", path))
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStdioProcess$")
	cmd.Env = append(os.Environ(), stdioHelperEnv+"=1", stdioHelperArgs+"="+string(encoded),
		"WASMHOST_CLI_DEMO_HELPER=1", "GORACE=atexit_sleep_ms=0")
	// Standard input stays open (its end would stop wasmhost stdio) and
	// unread; standard output is not read either.
	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	t.Cleanup(func() { _ = inW.Close() })
	cmd.Stdin = inR
	var stderr mcptest.LogBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	require.NoError(t, inR.Close())
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	pids := waitPIDFiles(t, files, &stderr)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	<-exited
	requireNoneLeft(t, "wasmhost "+args[0]+" killed", pids, files, &stderr)
}

// Before the supervisor, `wasmhost stdio` killed with SIGKILL left its
// upstreams running (7 of 8 processes in the review): its upstream, the
// child that ignores SIGTERM and the one that called setsid all end now.
func TestStdioKilledLeavesNoUpstream(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts and kills wasmhost processes and their upstreams")
	}
	killedLeavesNoUpstream(t, "stdio", "--session", "alice")
}

// The same for the daemon, `wasmhost run`.
func TestDaemonKilledLeavesNoUpstream(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts and kills wasmhost processes and their upstreams")
	}
	killedLeavesNoUpstream(t, "run", "--listen", "127.0.0.1:0")
}
