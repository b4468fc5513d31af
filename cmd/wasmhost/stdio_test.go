package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
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

// TestUnanswered: a request read from the client counts until its answer
// is written or the client cancels it; once the gate closes, new requests
// are not waited for.
func TestUnanswered(t *testing.T) {
	ctx := t.Context()
	ct, st := mcp.NewInMemoryTransports()
	var u unanswered
	server, err := u.wrap(st).Connect(ctx)
	require.NoError(t, err)
	client, err := ct.Connect(ctx)
	require.NoError(t, err)
	defer client.Close()
	defer server.Close()

	send := func(msg jsonrpc.Message) {
		t.Helper()
		require.NoError(t, client.Write(ctx, msg))
		_, err := server.Read(ctx)
		require.NoError(t, err)
	}
	id := func(n float64) jsonrpc.ID {
		id, err := jsonrpc.MakeID(n)
		require.NoError(t, err)
		return id
	}
	call := func(n float64) *jsonrpc.Request {
		return &jsonrpc.Request{ID: id(n), Method: "tools/call", Params: json.RawMessage(`{"name":"x"}`)}
	}
	send(call(1))
	send(call(2))
	send(call(2)) // a repeated ID counts once
	send(&jsonrpc.Request{Method: "notifications/initialized"})
	assert.Equal(t, 2, u.gate.Len())

	go func() { _, _ = client.Read(ctx) }()
	require.NoError(t, server.Write(ctx, &jsonrpc.Response{ID: id(1), Result: json.RawMessage(`{}`)}))
	assert.Equal(t, 1, u.gate.Len(), "answered")
	send(&jsonrpc.Request{Method: "notifications/cancelled", Params: json.RawMessage(`{"requestId":2}`)})
	assert.Equal(t, 0, u.gate.Len(), "cancelled")

	u.gate.Close()
	send(call(3))
	assert.Equal(t, 0, u.gate.Len(), "not admitted once closed")
	require.NoError(t, u.gate.Wait(ctx))
}
