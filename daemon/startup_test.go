package daemon_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/daemon"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/pool"
)

// TestWhileStarting: while the first config is still being applied (here
// an upstream's dial is held), an admin reload is answered 503 with a JSON
// error instead of failing the request, and a SIGHUP neither ends the
// daemon (its default action) nor is lost: it reloads once the daemon
// serves.
func TestWhileStarting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	path := filepath.Join(t.TempDir(), "wasmhost.json")
	writeConfig(t, path, baseConfig())
	logs := &mcptest.LogBuffer{}
	entered, release := make(chan struct{}), make(chan struct{})
	var hold sync.Once
	d, err := daemon.New(daemon.Options{
		ConfigPath: path,
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Listen:     addr,
		CacheDir:   cacheDir(),
		Debounce:   50 * time.Millisecond,
		Dialer: func(ctx context.Context, spec pool.Spec) (mcp.Transport, error) {
			hold.Do(func() {
				close(entered)
				<-release
			})
			return pool.DefaultDialer(ctx, spec)
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(within(t, readyWithin)):
			t.Errorf("daemon did not stop within %v; logs:\n%s", readyWithin, logs)
		}
	}()
	select {
	case <-entered:
	case err := <-done:
		t.Fatalf("Run: %v\n%s", err, logs)
	case <-time.After(within(t, readyWithin)):
		t.Fatalf("the upstream's dial not reached within %v; logs:\n%s\ngoroutines:\n%s", readyWithin, logs, stacks())
	}

	req, err := http.NewRequest("POST", "http://"+addr+"/v1/reload", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "the request is answered")
	var body map[string]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Contains(t, body["error"], "still starting")

	// The test's own channel says when the signal has arrived: the
	// runtime delivers it to every channel notified of it at once. The
	// test's channel keeps the process alive whatever the daemon does,
	// so a daemon that missed it is caught by its not reloading below.
	arrived := make(chan os.Signal, 1)
	signal.Notify(arrived, syscall.SIGHUP)
	defer signal.Stop(arrived)
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGHUP))
	select {
	case <-arrived:
	case <-time.After(within(t, eventWithin)):
		t.Fatal("the SIGHUP did not arrive")
	}
	close(release)
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("Run: %v\n%s", err, logs)
	case <-time.After(within(t, readyWithin)):
		t.Fatalf("daemon not ready within %v; logs:\n%s\ngoroutines:\n%s", readyWithin, logs, stacks())
	}
	waitFor(t, eventWithin, func() bool { return strings.Contains(logs.String(), "reload (SIGHUP)") },
		logs.String, "the SIGHUP reloading once the daemon serves")
}
