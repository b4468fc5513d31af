//go:build linux

package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/internal/procgroup"
)

// The environment of a test binary started as `wasmhost stdio` (see
// TestHelperStdioProcess): stdioHelperEnv "1", the command line's arguments
// as a JSON array in stdioHelperArgs, and the drain's grace in
// stdioHelperGrace.
const (
	stdioHelperEnv   = "WASMHOST_CLI_STDIO_HELPER"
	stdioHelperArgs  = "WASMHOST_CLI_STDIO_ARGS"
	stdioHelperGrace = "WASMHOST_CLI_STDIO_GRACE"
)

// TestHelperStdioProcess is not a test: run with stdioHelperEnv=1 it is
// the wasmhost command as main runs it (its own process, its real
// standard streams and signals), for the tests below.
func TestHelperStdioProcess(t *testing.T) {
	if os.Getenv(stdioHelperEnv) != "1" {
		t.Skip("helper process for the stdio process tests")
	}
	var args []string
	if err := json.Unmarshal([]byte(os.Getenv(stdioHelperArgs)), &args); err != nil {
		panic(err)
	}
	if g, err := time.ParseDuration(os.Getenv(stdioHelperGrace)); err == nil {
		stdioDrainGrace = g
	}
	// What main does.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	context.AfterFunc(ctx, stop)
	code := run(ctx, args, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// A stdioProcess is `wasmhost stdio` running as a process of its own, with
// a go-sdk client on its standard input and output.
type stdioProcess struct {
	t      *testing.T
	cmd    *exec.Cmd
	cs     *mcp.ClientSession
	inW    *os.File // its standard input
	outR   *os.File // its standard output
	errR   *os.File // its standard error
	stderr mcptest.LogBuffer
	copied chan struct{} // closed once standard error is read to its end
	exited chan struct{} // closed once the process has exited
}

// wrappedUpstream writes a shell script that starts `sleep 300` in the
// background (its pid in the returned child file), writes its own pid to
// the returned upstream file and then becomes the slow upstream (this test
// binary, see mcptest.RunSlowIfChild). It returns the config entry that
// runs the script.
func wrappedUpstream(t *testing.T) (entry map[string]any, upstreamFile, childFile string) {
	t.Helper()
	dir := t.TempDir()
	self, err := os.Executable()
	require.NoError(t, err)
	for _, p := range []string{self, dir} {
		if strings.Contains(p, "'") {
			t.Skipf("skipped: path %q has a quote", p)
		}
	}
	upstreamFile = filepath.Join(dir, "upstream.pid")
	childFile = filepath.Join(dir, "child.pid")
	script := filepath.Join(dir, "wrapper.sh")
	body := "#!/bin/sh\n" +
		"sleep 300 &\n" +
		"echo $! > '" + childFile + ".tmp' && mv '" + childFile + ".tmp' '" + childFile + "'\n" +
		"echo $$ > '" + upstreamFile + ".tmp' && mv '" + upstreamFile + ".tmp' '" + upstreamFile + "'\n" +
		"exec '" + self + "'\n"
	require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
	entry = map[string]any{"command": script, "env": map[string]any{mcptest.SlowEnv: "1", "GORACE": "atexit_sleep_ms=0"}}
	return entry, upstreamFile, childFile
}

// readPID waits for a pid file and returns its pid; the test's cleanup
// kills that process if it is still there.
func readPID(t *testing.T, file string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(file)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, within(t, eventWithin), 10*time.Millisecond, "no pid in %s", file)
	t.Cleanup(func() {
		if !procgroup.Ended(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pid
}

// startStdioProcess starts `wasmhost stdio --config FILE --session alice`
// on a config whose one server "slow" is entry, and connects a client to it
// once the slow tool is listed.
func startStdioProcess(t *testing.T, entry map[string]any, grace time.Duration, extra ...string) *stdioProcess {
	t.Helper()
	path := aliceConfig(t, "slow", entry)
	args, err := json.Marshal(append([]string{"stdio", "--config", path, "--session", "alice"}, extra...))
	require.NoError(t, err)

	p := &stdioProcess{t: t, copied: make(chan struct{}), exited: make(chan struct{})}
	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	errR, errW, err := os.Pipe()
	require.NoError(t, err)
	p.inW, p.outR, p.errR = inW, outR, errR
	p.cmd = exec.Command(os.Args[0], "-test.run=^TestHelperStdioProcess$")
	// WASMHOST_CLI_DEMO_HELPER makes its TestMain run the tests at once,
	// with this one's cache (WASMHOST_CACHE_DIR).
	p.cmd.Env = append(os.Environ(), stdioHelperEnv+"=1", stdioHelperArgs+"="+string(args),
		stdioHelperGrace+"="+grace.String(), "WASMHOST_CLI_DEMO_HELPER=1", "GORACE=atexit_sleep_ms=0")
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = inR, outW, errW
	require.NoError(t, p.cmd.Start())
	for _, f := range []*os.File{inR, outW, errW} {
		require.NoError(t, f.Close())
	}
	go func() {
		defer close(p.copied)
		_, _ = io.Copy(&p.stderr, errR)
	}()
	go func() {
		defer close(p.exited)
		_ = p.cmd.Wait()
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		for _, f := range []*os.File{p.inW, p.outR, p.errR} {
			_ = f.Close()
		}
	})

	cl := mcp.NewClient(&mcp.Implementation{Name: "process-test", Version: "1"}, &mcp.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithTimeout(t.Context(), within(t, readyWithin))
	defer cancel()
	p.cs, err = cl.Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	require.NoError(t, err, "stderr:\n%s", p.stderr.String())
	waitFor(t, eventWithin, func() bool {
		names, err := mcptest.ToolNames(t.Context(), p.cs)
		return err == nil && slices.Contains(names, "slow")
	}, p.stderr.String, "the slow tool listed")
	return p
}

// call starts a call of the slow tool that sleeps ms and returns once the
// upstream has it; its answer (nil with the error when it got none) comes
// on the channel.
func (p *stdioProcess) call(ms int) <-chan *mcp.CallToolResult {
	p.t.Helper()
	mark := filepath.Join(p.t.TempDir(), "started")
	answered := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := p.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"mark": mark, "ms": ms}})
		answered <- res
	}()
	waitFor(p.t, eventWithin, func() bool {
		_, err := os.Stat(mark)
		return err == nil
	}, p.stderr.String, "the call reaching the upstream")
	return answered
}

// wait waits up to within for the process to exit and returns how it
// ended.
func (p *stdioProcess) wait(within time.Duration) *os.ProcessState {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState
	case <-time.After(within):
		p.t.Fatalf("wasmhost stdio did not exit in %v; stderr:\n%s", within, p.stderr.String())
		return nil
	}
}

// requireEnded waits a few seconds for each process to have ended.
func requireEnded(t *testing.T, what string, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		assert.Eventually(t, func() bool { return procgroup.Ended(pid) }, 10*time.Second, 20*time.Millisecond,
			"%s: process %d outlived wasmhost stdio", what, pid)
	}
}

// TestStdioProcessEndsUpstreamsOnEveryStop: however `wasmhost stdio` is
// stopped with a call under way to an upstream that would answer only
// after a minute (its client closes standard input, or dies and so closes
// all three of its streams; SIGTERM, SIGINT or SIGHUP), it exits within
// seconds and the upstream's whole process group ends with it: the
// upstream and the child it started, which ignores standard input's end.
func TestStdioProcessEndsUpstreamsOnEveryStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and stops wasmhost processes and their upstreams")
	}
	for _, tc := range []struct {
		name string
		stop func(p *stdioProcess)
		// answered: the call under way gets an answer.
		answered bool
	}{
		{"stdin closed", func(p *stdioProcess) { require.NoError(t, p.inW.Close()) }, false},
		{"client died", func(p *stdioProcess) {
			for _, f := range []*os.File{p.inW, p.outR, p.errR} {
				require.NoError(t, f.Close())
			}
		}, false},
		{"SIGTERM", func(p *stdioProcess) { require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM)) }, true},
		{"SIGINT", func(p *stdioProcess) { require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT)) }, true},
		{"SIGHUP", func(p *stdioProcess) { require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP)) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entry, upstreamFile, childFile := wrappedUpstream(t)
			p := startStdioProcess(t, entry, 300*time.Millisecond, "--log-level", "info")
			upstream, child := readPID(t, upstreamFile), readPID(t, childFile)
			answered := p.call(60_000)

			start := time.Now()
			tc.stop(p)
			st := p.wait(20 * time.Second)
			if tc.answered {
				select {
				case res := <-answered:
					if assert.NotNil(t, res, "the call under way got no answer; stderr:\n%s", p.stderr.String()) {
						assert.True(t, res.IsError, "cut short by the drain: %s", mcptest.Text(res))
					}
				case <-time.After(5 * time.Second):
					t.Errorf("the call under way got no answer; stderr:\n%s", p.stderr.String())
				}
			}
			took := time.Since(start)
			t.Logf("exited %v after the stop", took.Round(time.Millisecond))
			assert.Less(t, took, 5*time.Second, "exited promptly")
			ws := st.Sys().(syscall.WaitStatus)
			assert.False(t, ws.Signaled(), "ended by signal %v rather than stopping; stderr:\n%s", ws.Signal(), p.stderr.String())
			requireEnded(t, "the upstream", upstream)
			requireEnded(t, "the upstream's child", child)
		})
	}
}
