package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/daemon"
	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/pool"
)

// scaleConfig is the config of BenchmarkUpstreamScale (internal/bench):
// servers pooled servers behind sessions sessions that each use all of
// them; the servers trusted says have "trust": true.
func scaleConfig(servers, sessions int, trusted func(int) bool) map[string]any {
	srvs := make(map[string]any, servers)
	for i := range servers {
		srvs[fmt.Sprintf("srv%03d", i)] = map[string]any{"command": os.Args[0], "trust": trusted(i)}
	}
	sess := make(map[string]any, sessions)
	for i := range sessions {
		sess[fmt.Sprintf("s%02d", i)] = map[string]any{"token": fmt.Sprintf("token-for-the-reload-scale-s%02d", i)}
	}
	return map[string]any{"admin": map[string]any{"token": adminToken}, "mcpServers": srvs, "sessions": sess}
}

// startScale runs a daemon on scaleConfig(servers, sessions, none), every
// server the demo server reached in memory, and returns it with its config
// file. The file watcher is left out (its debounce outlasts the run), so
// that the reloads measured are the ones the caller makes.
func startScale(tb testing.TB, servers, sessions int) (*daemon.Daemon, string) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "wasmhost.json")
	writeScale(tb, path, scaleConfig(servers, sessions, func(int) bool { return false }))
	demo := demoserver.New().MCP()
	d, err := daemon.New(daemon.Options{
		ConfigPath: path,
		Logger:     slog.New(slog.DiscardHandler),
		Listen:     "127.0.0.1:0",
		CacheDir:   cacheDir(),
		Debounce:   time.Hour,
		Dialer: func(ctx context.Context, _ pool.Spec) (mcp.Transport, error) {
			tr, _, err := mcptest.Connect(ctx, demo)
			return tr, err
		},
	})
	require.NoError(tb, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		require.NoError(tb, <-done)
	})
	select {
	case <-d.Ready():
	case err := <-done:
		tb.Fatalf("daemon did not start: %v", err)
	}
	return d, path
}

func writeScale(tb testing.TB, path string, cfg map[string]any) {
	tb.Helper()
	data, err := json.Marshal(cfg)
	require.NoError(tb, err)
	require.NoError(tb, os.WriteFile(path, data, 0o600))
}

// BenchmarkReloadUnchanged reloads, through Daemon.Reload, a config of 200
// pooled servers behind 50 sessions (10,000 views; BenchmarkUpstreamScale's
// shape, in one process with in-memory upstreams) that changed nothing:
// what a reload costs whatever it changes.
func BenchmarkReloadUnchanged(b *testing.B) {
	d, _ := startScale(b, 200, 50)
	ctx := context.Background()
	for b.Loop() {
		res, err := d.Reload(ctx, "bench")
		require.NoError(b, err)
		require.Empty(b, res.Changed)
	}
}
