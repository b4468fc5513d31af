//go:build unix

package procgroup

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	Main() // this binary is also the supervisor of the upstreams it runs
	if dir := os.Getenv(hostEnv); dir != "" {
		os.Exit(host(dir))
	}
	os.Exit(m.Run())
}

// hostEnv makes this test binary a host (see host) of the upstream script
// in the directory it names.
const hostEnv = "WASMHOST_PROCGROUP_TEST_HOST"

// host starts DIR/upstream.sh as a daemon starts a stdio upstream
// (Transport), writes DIR/host.ready and waits to be killed.
func host(dir string) int {
	ct := &mcp.CommandTransport{Command: exec.Command(filepath.Join(dir, "upstream.sh"))}
	ct.Command.Stderr = os.Stderr
	if _, err := Transport(ct, ct).Connect(context.Background()); err != nil {
		println("host:", err.Error())
		return 1
	}
	if err := os.WriteFile(filepath.Join(dir, "host.ready"), nil, 0o600); err != nil {
		return 1
	}
	select {}
}

// spawningUpstream writes DIR/upstream.sh: it starts a child that ignores
// SIGTERM, and one that leaves the group with setsid, writes the three
// pids (its own last) to pid files and then waits, ignoring standard
// input's end. It returns the pid files.
func spawningUpstream(t *testing.T, dir string) []string {
	t.Helper()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("skipped: no setsid command")
	}
	if strings.Contains(dir, "'") {
		t.Skipf("skipped: path %q has a quote", dir)
	}
	pid := func(name string) string { return filepath.Join(dir, name+".pid") }
	write := func(name string) string {
		return "> '" + pid(name) + ".tmp' && mv '" + pid(name) + ".tmp' '" + pid(name) + "'"
	}
	body := "#!/bin/sh\n" +
		"sh -c 'trap \"\" TERM; sleep 300' &\n" +
		"echo $! " + write("child") + "\n" +
		"setsid sh -c 'echo $$ " + write("escaped") + "; exec sleep 300' &\n" +
		"while [ ! -s '" + pid("escaped") + "' ]; do sleep 0.01; done\n" +
		"echo $$ " + write("upstream") + "\n" +
		"exec sleep 300\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "upstream.sh"), []byte(body), 0o755))
	return []string{pid("child"), pid("escaped"), pid("upstream")}
}

// waitPIDs waits for each pid file and returns the pids; the test's
// cleanup kills those still running.
func waitPIDs(t *testing.T, files ...string) []int {
	t.Helper()
	var pids []int
	for _, f := range files {
		var pid int
		require.Eventually(t, func() bool {
			b, err := os.ReadFile(f)
			if err != nil {
				return false
			}
			pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil
		}, 60*time.Second, 10*time.Millisecond, "no pid in %s", f)
		pids = append(pids, pid)
		t.Cleanup(func() {
			if !Ended(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
	}
	return pids
}

// requireAllEnd waits, generously, for every process of pids to end.
func requireAllEnd(t *testing.T, what string, pids []int, names []string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for i, pid := range pids {
		for !Ended(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the upstream's %s (pid %d) still runs a minute later", what, filepath.Base(names[i]), pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// Before the supervisor, a host that died by SIGKILL left its upstreams
// running (only Setpgid was set): here the upstream itself, its child
// that ignores SIGTERM and its child that left the group with setsid.
// Now the supervisor reads the lifeline's end and ends them all.
func TestHostKilledLeavesNoUpstream(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a process group and waits for its children to go; TestCloseEndsTheGroup stays in -short; run without -short")
	}
	dir := t.TempDir()
	files := spawningUpstream(t, dir)
	h := exec.Command(os.Args[0], "-test.run=^$")
	h.Env = append(os.Environ(), hostEnv+"="+dir)
	h.Stderr = os.Stderr
	require.NoError(t, h.Start())
	t.Cleanup(func() { _ = h.Process.Kill(); _ = h.Wait() })
	pids := waitPIDs(t, files...)
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, "host.ready"))
		return err == nil
	}, 60*time.Second, 10*time.Millisecond)

	require.NoError(t, h.Process.Signal(syscall.SIGKILL))
	_ = h.Wait()
	requireAllEnd(t, "after the host's SIGKILL", pids, files)
}

// Closing the connection ends the setsid child too, which Kill alone (a
// signal to the group) cannot reach.
func TestCloseEndsEscapedChild(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a process group and waits for its children to go; TestCloseEndsTheGroup stays in -short; run without -short")
	}
	dir := t.TempDir()
	files := spawningUpstream(t, dir)
	ct := &mcp.CommandTransport{Command: exec.Command(filepath.Join(dir, "upstream.sh")), TerminateDuration: time.Second}
	c, err := Transport(ct, ct).Connect(context.Background())
	require.NoError(t, err)
	pids := waitPIDs(t, files...)
	_ = c.Close()
	requireAllEnd(t, "after Close", pids, files)
}

// The supervisor reports how the server's process ended as the process
// itself would have: the transport's Exited says "exit status 3", or
// "signal: killed".
func TestSupervisedExitStatus(t *testing.T) {
	for script, want := range map[string]string{
		"read _; exit 3":     "exit status 3",
		"read _; kill -9 $$": "signal: killed",
	} {
		ct := &mcp.CommandTransport{Command: exec.Command("/bin/sh", "-c", script), TerminateDuration: 2 * time.Second}
		tr := Transport(ct, ct)
		c, err := tr.Connect(context.Background())
		require.NoError(t, err)
		require.Contains(t, ct.Command.Args, supervisorArg, "the command runs under a supervisor")
		_ = c.Close()
		exit := tr.(interface{ Exited() error }).Exited()
		require.Error(t, exit, script)
		require.Equal(t, want, exit.Error(), script)
	}
}

// ServerPID finds the program under the supervisor the host started.
func TestServerPID(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "server.pid")
	ct := &mcp.CommandTransport{Command: exec.Command("/bin/sh", "-c", "echo $$ > '"+file+".tmp' && mv '"+file+".tmp' '"+file+"'; sleep 1 & exec cat"), TerminateDuration: time.Second}
	c, err := Transport(ct, ct).Connect(context.Background())
	require.NoError(t, err)
	defer c.Close()
	pid := waitPIDs(t, file)[0]
	require.NotEqual(t, pid, ct.Command.Process.Pid)
	require.Equal(t, pid, ServerPID(ct.Command.Process.Pid))
	require.Equal(t, os.Getpid(), ServerPID(os.Getpid()), "not a supervisor")
}

// A program that cannot be started fails Connect with its own error, as
// without a supervisor, not with the supervisor's "exit status 127".
func TestMissingProgramFailsAtStart(t *testing.T) {
	ct := &mcp.CommandTransport{Command: exec.Command(filepath.Join(t.TempDir(), "missing"))}
	_, err := Transport(ct, ct).Connect(context.Background())
	require.ErrorContains(t, err, "no such file or directory")
}
