//go:build linux

package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/internal/leakcheck"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/internal/procgroup"
)

const (
	stdioLeakRounds = 24
	stdioLeakMargin = 2
	stdioLeakSettle = 15 * time.Second
)

// grandchildren returns the pids the wrapper scripts wrote to file, one a
// line (each script's background child).
func grandchildren(t *testing.T, file string) []int {
	t.Helper()
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	var pids []int
	for _, line := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(line)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	return pids
}

// TestStdioLegacyLeakSoak drives stdio mode (the daemon serving one
// session over a stream, with its own dialer: process groups, the progress
// relay, standard error) through churn with real upstream processes, each
// a shell script that starts a background child and becomes the slow
// upstream: reloads whose metadata changes, a second server coming and
// going, restarts (one with a call under way, which ends with an error),
// and upstreams killed and repaired (the supervisor runs throughout). Back
// on the starting config, the goroutines, descriptors and child processes
// are what they were; after the stop there are no children, and no
// script's child outlived its upstream.
func TestStdioLegacyLeakSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("a soak of many sessions and reloads")
	}
	dir := t.TempDir()
	self, err := os.Executable()
	require.NoError(t, err)
	if strings.Contains(self+dir, "'") {
		t.Skip("a path has a quote")
	}
	childFile := filepath.Join(dir, "children")
	script := filepath.Join(dir, "wrapper.sh")
	// Each upstream writes its pid to NAME.pid, NAME its server's name. The
	// background child does not hold the upstream's standard output: if it
	// did, the upstream's crash would go unnoticed (its output never ends).
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\nsleep 300 >/dev/null 2>&1 &\necho $! >> '"+childFile+"'\n"+
		"echo $$ > '"+dir+"/'\"$LEAK_SERVER\".pid\nexec '"+self+"'\n"), 0o755))
	t.Cleanup(func() {
		for _, pid := range grandchildren(t, childFile) {
			if !procgroup.Ended(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	entry := func(name string, trust bool) map[string]any {
		return map[string]any{"command": script, "env": map[string]any{mcptest.SlowEnv: "1", "GORACE": "atexit_sleep_ms=0", "LEAK_SERVER": name}, "trust": trust, "timeout": 30_000}
	}
	path := filepath.Join(dir, "leak.json")
	write := func(round int) {
		servers := map[string]any{"slow": entry("slow", round%2 == 1)}
		if round%3 == 1 {
			servers["extra"] = entry("extra", false)
		}
		b, err := json.Marshal(map[string]any{"mcpServers": servers, "sessions": map[string]any{"alice": map[string]any{"token": "alice-token-0123456789abcdef"}}})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, b, 0o600))
	}
	write(0)

	before := leakcheck.Quiet(t, stdioLeakSettle)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	d, err := New(Options{
		ConfigPath:    path,
		Logger:        slog.New(slog.DiscardHandler),
		CacheDir:      host.DefaultCacheDir(),
		CrashRestarts: -1, // as `wasmhost stdio` runs
		Stdio:         &Stdio{Session: "alice", In: inR, Out: outW, Stderr: io.Discard},
	})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	ran := make(chan error, 1)
	go func() {
		ran <- d.Run(runCtx)
		outW.Close()
	}()
	cl := mcp.NewClient(&mcp.Implementation{Name: "soak", Version: "1"}, &mcp.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	client, err := cl.Connect(t.Context(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	require.NoError(t, err)

	ctx := t.Context()
	// bounded runs one of the daemon's calls, which must return in
	// stdioLeakSettle.
	bounded := func(what string, f func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			require.NoError(t, err, what)
		case <-time.After(stdioLeakSettle):
			var prof strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&prof, 1)
			t.Fatalf("%s did not return in %v:\n%s", what, stdioLeakSettle, prof.String())
		}
	}
	apply := func(round int) {
		t.Helper()
		write(round)
		bounded(fmt.Sprintf("round %d: reload", round), func() error {
			_, err := d.Reload(ctx, "soak")
			return err
		})
	}
	ready := func(server string) *mcp.ClientSession {
		t.Helper()
		var cs *mcp.ClientSession
		require.Eventually(t, func() bool {
			h := d.rec.Handle("alice", server)
			if h == nil || h.Conn() == nil {
				return false
			}
			cs = h.Conn()
			names, err := mcptest.ToolNames(ctx, client)
			return err == nil && slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, "slow") })
		}, stdioLeakSettle, 10*time.Millisecond, "%s not ready", server)
		return cs
	}
	call := func(cs *mcp.ClientSession, ms int) (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"mark": filepath.Join(dir, "mark"), "ms": ms}})
	}
	<-d.Ready()
	ready("slow")
	baseline := leakcheck.Quiet(t, stdioLeakSettle)

	for round := 1; round <= stdioLeakRounds; round++ {
		cs := ready("slow")
		switch round % 4 {
		case 1:
			// A reconnect with a call under way: it ends, with an error.
			ended := make(chan error, 1)
			go func() {
				res, err := call(cs, 60_000)
				if err == nil && res.IsError {
					err = errors.New(mcptest.Text(res))
				}
				ended <- err
			}()
			require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "mark")); return err == nil }, stdioLeakSettle, 5*time.Millisecond)
			require.NoError(t, os.Remove(filepath.Join(dir, "mark")))
			apply(round)
			bounded("restart", func() error { return d.rec.Restart(ctx, "slow") })
			select {
			case err := <-ended:
				require.Error(t, err, "the call on the connection the restart closed")
			case <-time.After(stdioLeakSettle):
				t.Fatalf("round %d: the call under way on the closed connection did not end", round)
			}
		case 2:
			apply(round)
			bounded("restart", func() error { return d.rec.Restart(ctx, "slow") })
		case 3:
			apply(round)
			// A crash, repaired by the supervisor.
			ready("slow")
			pid := readPID(t, filepath.Join(dir, "slow.pid"))
			require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
			require.Eventually(t, func() bool { h := d.rec.Handle("alice", "slow"); return h == nil || h.Conn() == nil },
				stdioLeakSettle, 5*time.Millisecond, "round %d: the crash was not seen", round)
			// The supervisor repairs it too, with a growing delay (these
			// crashes come soon after one another): Repair races it.
			bounded("repair", func() error { _, err := d.rec.Repair(ctx, "alice", "slow"); return err })
		default:
			apply(round)
		}
		_, err := call(ready("slow"), 0)
		require.NoError(t, err, "round %d", round)
	}
	apply(0)
	ready("slow")
	if err := leakcheck.Settle(baseline, stdioLeakMargin, len(baseline.Children), stdioLeakSettle); err != nil {
		t.Fatalf("after %d rounds, with the starting config back: %v", stdioLeakRounds, err)
	}

	require.NoError(t, client.Close())
	stop()
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(procgroup.MaxClose + stdioLeakSettle):
		t.Fatal("stdio mode did not stop")
	}
	_ = inW.Close()
	// No more child processes than before the test: with -count above 1
	// the page tests' shared browser (browserPID) is one of them.
	require.NoError(t, leakcheck.Settle(before, stdioLeakMargin, len(before.Children), stdioLeakSettle), "after the stop")
	kids := grandchildren(t, childFile)
	require.GreaterOrEqual(t, len(kids), stdioLeakRounds, "a script ran for each connect")
	for _, pid := range kids {
		assert.Eventually(t, func() bool { return procgroup.Ended(pid) }, 10*time.Second, 20*time.Millisecond,
			"a script's child: process %d outlived stdio mode", pid)
	}
}

// readPID waits for a pid file and returns its pid.
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
	}, stdioLeakSettle, 10*time.Millisecond, "no pid in %s", file)
	return pid
}
