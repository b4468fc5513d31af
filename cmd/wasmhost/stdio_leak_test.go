//go:build linux

package main

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

	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/internal/leakcheck"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/internal/procgroup"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/session"
	"github.com/wasmhost/wasmhost/view/viewtest"
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

// TestStdioLegacyLeakSoak drives stdio mode's reconciler (reconcile.Legacy
// with stdio mode's dialer: process groups, the progress relay, standard
// error) through churn with real upstream processes, each a shell script
// that starts a background child and becomes the slow upstream: applies
// whose metadata change reconnects the server (one with a call under way),
// a second server coming and going, restarts, and upstreams killed and
// repaired (stdio mode's supervisor runs throughout). Back on the starting config, the
// goroutines, descriptors and child processes are what they were; after
// Close there are no children, and no script's child outlived its
// upstream.
func TestStdioLegacyLeakSoak(t *testing.T) {
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
	cfgOf := func(round int) *config.Config {
		servers := map[string]any{"slow": entry("slow", round%2 == 1)}
		if round%3 == 1 {
			servers["extra"] = entry("extra", false)
		}
		b, err := json.Marshal(map[string]any{"mcpServers": servers, "sessions": map[string]any{"alice": map[string]any{"token": "alice-token-0123456789abcdef"}}})
		require.NoError(t, err)
		cfg, _, err := config.Parse("leak.json", b, func(string) (string, bool) { return "", false }, nil)
		require.NoError(t, err)
		return cfg
	}
	policy, err := host.LoadEmbedded(t.Context(), policydefault.Name, policydefault.Wasm, policydefault.SHA256, host.Options{CacheDir: host.DefaultCacheDir()})
	require.NoError(t, err)
	defer policy.Close(context.Background())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	before := leakcheck.Quiet(t, stdioLeakSettle)
	relay := session.NewProgressRelay()
	reg := viewtest.NewRegistry()
	leg := reconcile.NewLegacy(reconcile.LegacyOptions{
		Dialer: stdioDialer(relay, io.Discard, nil), OnProgress: relay.Handle, Policy: policy, Registry: reg, Logger: quiet,
	})
	ctx := t.Context()
	// bounded runs one of the reconciler's calls, which must return in
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
		bounded(fmt.Sprintf("round %d: apply", round), func() error {
			_, err := leg.Apply(ctx, cfgOf(round), "alice")
			return err
		})
	}
	ready := func(server string) *mcp.ClientSession {
		t.Helper()
		var cs *mcp.ClientSession
		require.Eventually(t, func() bool {
			cs = leg.Session(server)
			return cs != nil && slices.Contains(reg.ToolNames(server), "slow")
		}, stdioLeakSettle, 10*time.Millisecond, "%s not ready", server)
		return cs
	}
	call := func(cs *mcp.ClientSession, ms int) (*mcp.CallToolResult, error) {
		return cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"mark": filepath.Join(dir, "mark"), "ms": ms}})
	}
	apply(0)
	ready("slow")
	bg, stopBG := context.WithCancel(ctx)
	supervised := make(chan struct{})
	go func() {
		defer close(supervised)
		superviseLegacy(bg, leg, quiet)
	}()
	baseline := leakcheck.Quiet(t, stdioLeakSettle)

	for round := 1; round <= stdioLeakRounds; round++ {
		cs := ready("slow")
		switch round % 4 {
		case 1:
			// A reconnect with a call under way: it ends, with an error.
			ended := make(chan error, 1)
			go func() {
				_, err := call(cs, 60_000)
				ended <- err
			}()
			require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "mark")); return err == nil }, stdioLeakSettle, 5*time.Millisecond)
			require.NoError(t, os.Remove(filepath.Join(dir, "mark")))
			apply(round)
			select {
			case err := <-ended:
				require.Error(t, err, "the call on the connection the apply closed")
			case <-time.After(stdioLeakSettle):
				t.Fatalf("round %d: the call under way on the closed connection did not end", round)
			}
		case 2:
			apply(round)
			bounded("restart", func() error { return leg.Restart(ctx, "slow") })
		case 3:
			apply(round)
			// A crash, repaired by the supervisor.
			ready("slow")
			pid := readPID(t, filepath.Join(dir, "slow.pid"))
			require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
			require.Eventually(t, func() bool { return leg.Session("slow") == nil }, stdioLeakSettle, 5*time.Millisecond, "round %d: the crash was not seen", round)
			// The supervisor repairs it too, with a growing delay (these
			// crashes come soon after one another): Repair races it.
			bounded("repair", func() error { return leg.Repair(ctx, "slow") })
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

	stopBG()
	<-supervised
	cctx, cancel := context.WithTimeout(context.Background(), procgroup.MaxClose)
	defer cancel()
	bounded("close", func() error { return leg.Close(cctx) })
	require.NoError(t, leakcheck.Settle(before, stdioLeakMargin, 0, stdioLeakSettle), "after Close")
	kids := grandchildren(t, childFile)
	require.GreaterOrEqual(t, len(kids), stdioLeakRounds, "a script ran for each connect")
	requireEnded(t, "a script's child", kids...)
}
