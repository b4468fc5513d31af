package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
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
	require.Eventually(t, func() bool { return len(reg.ToolNames("fs")) == 1 }, eventWithin, 20*time.Millisecond,
		"the supervisor retried the server whose view failed closed")
	assert.Same(t, conn, leg.Session("fs"), "repaired on the same connection, not reconnected")
}

// TestAnswerLedger: the ledger follows calls through the client's bytes,
// however they are cut into reads and whether batched or not, leaves other
// requests alone, forgets a call its client cancels, and settles a call
// once the go-sdk has written its response; input it cannot follow makes
// it wait for nothing.
func TestAnswerLedger(t *testing.T) {
	l := newAnswerLedger()
	in := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"big":"` + strings.Repeat("y", 100_000) + `"}}}
{"jsonrpc":"2.0","id":2,"method":"tools/list"}` + "\n\t " + `{"jsonrpc":"2.0","id":"a","method":"prompts/get","params":{"name":"p"}}
[{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"x://y"}},{"jsonrpc":"2.0","method":"notifications/initialized"}]
{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"a"}}
{"jsonrpc":"2.0","id":4,"method":"subscriptions/listen","params":{}}
{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"last"}}
`
	r := l.Reader(mcptest.ChunkedReader(in, 7))
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Equal(t, in, string(got), "the go-sdk reads the bytes unchanged")
	open := func() []string {
		l.mu.Lock()
		defer l.mu.Unlock()
		var ids []string
		for id := range l.open {
			ids = append(ids, fmt.Sprint(id.Raw()))
		}
		slices.Sort(ids)
		return ids
	}
	// Once 5, the last message, is noted, everything before it was read.
	require.Eventually(t, func() bool { return slices.Contains(open(), "5") }, 5*time.Second, time.Millisecond, "open: %v", open())
	require.Equal(t, []string{"1", "3", "5"}, open())

	var out bytes.Buffer
	w := l.Writer(&out)
	for _, msg := range []string{
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`, // the server's own request, id 1
		`{"jsonrpc":"2.0","id":2,"result":{}}`,
	} {
		_, err := w.Write([]byte(msg + "\n"))
		require.NoError(t, err)
	}
	assert.Equal(t, []string{"1", "3", "5"}, open())
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, l.wait(ctx), context.DeadlineExceeded)

	waited := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		waited <- l.wait(ctx)
	}()
	_, err = w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"` + strings.Repeat("z", 1<<20) + `"}]}}` + "\n"))
	require.NoError(t, err)
	_, err = w.Write([]byte(`[{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"no"}},{"jsonrpc":"2.0","id":5,"result":{}}]` + "\n"))
	require.NoError(t, err)
	assert.Empty(t, open())
	require.NoError(t, <-waited, "a wait under way wakes when the last answer is written")

	lost := newAnswerLedger()
	_, err = io.ReadAll(lost.Reader(strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call"} }{ not json`)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { lost.mu.Lock(); defer lost.mu.Unlock(); return lost.lost }, 5*time.Second, time.Millisecond)
	ctx, cancel = context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	require.NoError(t, lost.wait(ctx), "input it cannot follow: nothing to wait for")
}
