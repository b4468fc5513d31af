package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

// flakyPolicy is the reference policy whose project calls fail while down
// is set.
type flakyPolicy struct {
	metakey.Reference
	down *atomic.Bool
}

func (p flakyPolicy) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	if p.down.Load() {
		return nil, errors.New("policy down")
	}
	return p.Reference.Project(ctx, req)
}

// TestSuperviseLegacyRepairsFailedView: in stdio mode nothing reloads, so
// a server whose connection stayed up but whose view failed closed on a
// passing policy failure is retried by the supervisor like a lost one.
func TestSuperviseLegacyRepairsFailedView(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "fs", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "read", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	})
	dial := func(ctx context.Context, _ pool.Spec) (mcp.Transport, error) {
		tr, _, err := mcptest.Connect(ctx, srv)
		return tr, err
	}
	down := new(atomic.Bool)
	down.Store(true)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := viewtest.NewRegistry()
	leg := reconcile.NewLegacy(reconcile.LegacyOptions{Dialer: dial, Policy: flakyPolicy{down: down}, Registry: reg, Logger: quiet})
	defer func() { require.NoError(t, leg.Close(context.Background())) }()
	cfg, _, err := config.Parse("stdio.json", []byte(`{"mcpServers":{"fs":{"command":"fs-server"}}}`), func(string) (string, bool) { return "", false }, nil)
	require.NoError(t, err)
	_, err = leg.Apply(ctx, cfg, "")
	require.ErrorContains(t, err, "policy down")
	require.Empty(t, reg.ToolNames("fs"))
	conn := leg.Session("fs")
	require.NotNil(t, conn, "the connection stayed up")

	down.Store(false)
	go superviseLegacy(ctx, leg, quiet)
	require.Eventually(t, func() bool { return len(reg.ToolNames("fs")) == 1 }, 10*time.Second, 20*time.Millisecond,
		"the supervisor retried the server whose view failed closed")
	assert.Same(t, conn, leg.Session("fs"), "repaired on the same connection, not reconnected")
}

// TestWatchedWriterSettles: settle waits while a write is under way and
// until none has ended for the given time, and gives up when ctx ends.
func TestWatchedWriterSettles(t *testing.T) {
	pr, pw := io.Pipe()
	out := &watchedWriter{w: pw}
	wrote := make(chan struct{})
	go func() {
		_, _ = out.Write([]byte("answer\n")) // blocks until read
		close(wrote)
	}()
	require.Eventually(t, func() bool { out.mu.Lock(); defer out.mu.Unlock(); return out.writing == 1 }, 5*time.Second, time.Millisecond)

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, out.settle(ctx, time.Millisecond), context.DeadlineExceeded, "a write under way is not settled")

	buf := make([]byte, 16)
	_, err := pr.Read(buf)
	require.NoError(t, err)
	<-wrote
	start := time.Now()
	require.NoError(t, out.settle(t.Context(), 50*time.Millisecond))
	assert.GreaterOrEqual(t, time.Since(start), 40*time.Millisecond, "settled only after the idle time")
}
