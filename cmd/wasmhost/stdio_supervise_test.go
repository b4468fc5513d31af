package main

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

// TestSuperviseLegacyCrashLoopBacksOff: an upstream that crashes again
// soon after each reconnect is retried with a growing delay, as the
// daemon's supervisor does (a binding a retry brought back must stay up a
// while before its backoff starts over), not every tick for ever.
func TestSuperviseLegacyCrashLoopBacksOff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "fs", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "read", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	})
	var dials atomic.Int32
	dial := func(ctx context.Context, _ pool.Spec) (mcp.Transport, error) {
		tr, conn, err := mcptest.Connect(ctx, srv)
		if err != nil {
			return nil, err
		}
		dials.Add(1)
		time.AfterFunc(200*time.Millisecond, func() { _ = conn.Close() }) // the crash
		return tr, nil
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	leg := reconcile.NewLegacy(reconcile.LegacyOptions{Dialer: dial, Policy: metakey.Reference{}, Registry: viewtest.NewRegistry(), Logger: quiet})
	defer func() { require.NoError(t, leg.Close(context.Background())) }()
	cfg, _, err := config.Parse("stdio.json", []byte(`{"mcpServers":{"fs":{"command":"fs-server"}}}`), func(string) (string, bool) { return "", false }, nil)
	require.NoError(t, err)
	_, err = leg.Apply(ctx, cfg, "")
	require.NoError(t, err)

	var log mcptest.LogBuffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		superviseLegacy(ctx, leg, slog.New(slog.NewTextHandler(&log, nil)))
	}()
	// With the delay doubling from stdioRetryMin (1 s, 2 s, 4 s, ...),
	// reconnects come about 1.5 s and 3.5 s in; without, every tick.
	const watch = 6 * time.Second
	time.Sleep(watch)
	cancel()
	<-done
	assert.LessOrEqual(t, dials.Load(), int32(4), "dials in %v of an upstream that crashes 200 ms after each connect; log:\n%s", watch, log.String())
	assert.GreaterOrEqual(t, dials.Load(), int32(2), "it was retried at all")
	assert.Contains(t, log.String(), "in=2s", "the log says the next delay")
}
