package daemon

//lint:file-ignore SA1019 the bridging test uses sampling, deprecated (SEP-2577) but still used during its deprecation window

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/pool"
)

// stdioWithin bounds the waits of the stdio mode tests on events.
const stdioWithin = 30 * time.Second

// A stdioRun is a daemon in stdio mode serving session alice of a config
// with one server, fs, reached in memory (Options.Dialer), and a client of
// it over a pair of pipes.
type stdioRun struct {
	d    *Daemon
	cs   *mcp.ClientSession
	log  *mcptest.LogBuffer
	done chan error
	stop context.CancelFunc
}

// startStdio starts it; opts adjusts the options, copts the client's.
func startStdio(t *testing.T, dial pool.Dialer, opts func(*Options), copts *mcp.ClientOptions) *stdioRun {
	t.Helper()
	return startStdioWith(t, `{"command":"fs-server"}`, dial, opts, copts, "")
}

// startStdioWith is startStdio with fs's config entry and the protocol
// version the client asks for ("": the go-sdk's).
func startStdioWith(t *testing.T, entry string, dial pool.Dialer, opts func(*Options), copts *mcp.ClientOptions, version string) *stdioRun {
	t.Helper()
	path := filepath.Join(t.TempDir(), "wasmhost.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"mcpServers":{"fs":`+entry+`},
		"sessions":{"alice":{"token":"alice-token-0123456789abcdef"},"bob":{"token":"bob-token-0123456789abcdef"}}}`), 0o600))
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	r := &stdioRun{log: &mcptest.LogBuffer{}, done: make(chan error, 1)}
	o := Options{
		ConfigPath: path,
		Logger:     slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		CacheDir:   host.DefaultCacheDir(),
		Dialer:     dial,
		Stdio:      &Stdio{Session: "alice", In: inR, Out: outW},
	}
	if opts != nil {
		opts(&o)
	}
	d, err := New(o)
	require.NoError(t, err)
	r.d = d
	ctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	go func() {
		r.done <- d.Run(ctx)
		outW.Close()
	}()
	t.Cleanup(func() {
		stop()
		_ = inW.Close()
		select {
		case err := <-r.done:
			assert.NoError(t, err, "log:\n%s", r.log.String())
		case <-time.After(stdioWithin):
			t.Errorf("stdio mode did not stop; log:\n%s", r.log.String())
		}
	})
	if copts == nil {
		copts = &mcp.ClientOptions{}
	}
	copts.Logger = slog.New(slog.DiscardHandler)
	cl := mcp.NewClient(&mcp.Implementation{Name: "stdio-test", Version: "1"}, copts)
	cctx, cancel := context.WithTimeout(t.Context(), stdioWithin)
	defer cancel()
	var sopts *mcp.ClientSessionOptions
	if version != "" {
		sopts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	r.cs, err = cl.Connect(cctx, &mcp.IOTransport{Reader: outR, Writer: inW}, sopts)
	require.NoError(t, err, "log:\n%s", r.log.String())
	t.Cleanup(func() { _ = r.cs.Close() })
	return r
}

// tools returns the client's tool names, nil when listing fails.
func (r *stdioRun) tools(t *testing.T) []string {
	names, err := mcptest.ToolNames(t.Context(), r.cs)
	if err != nil {
		return nil
	}
	return names
}

// inMemory dials srv in memory; each dial is counted in dials.
func inMemory(srv *mcp.Server, dials *atomic.Int32) pool.Dialer {
	return func(ctx context.Context, _ pool.Spec) (mcp.Transport, error) {
		tr, _, err := mcptest.Connect(ctx, srv)
		if err == nil && dials != nil {
			dials.Add(1)
		}
		return tr, err
	}
}

func fsServer() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "fs", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "read", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	})
	return srv
}

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

func (p flakyPolicy) ProjectBatch(ctx context.Context, req *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error) {
	if p.down.Load() {
		return nil, errors.New("policy down")
	}
	return p.Reference.ProjectBatch(ctx, req)
}

// TestSuperviseLegacyRepairsFailedView: in stdio mode, a server whose
// connection stayed up but whose view failed closed on a passing policy
// failure is retried by the supervisor like a lost one, on the same
// connection, without a reload.
func TestSuperviseLegacyRepairsFailedView(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end to end (a daemon, an upstream process, the default plugin); -short keeps a faster test of this area; run without -short")
	}
	r := startStdio(t, inMemory(fsServer(), nil), func(o *Options) { o.RetryMin = 100 * time.Millisecond }, nil)
	mcptest.WaitFor(t, stdioWithin, func() bool { return slices.Equal(r.tools(t), []string{"read"}) }, r.log.String, "fs's tool listed")
	conn := r.d.rec.Handle("alice", "fs").Conn()
	require.NotNil(t, conn)

	down := new(atomic.Bool)
	down.Store(true)
	r.d.reloadMu.Lock()
	_, err := r.d.rec.SetPolicy(t.Context(), flakyPolicy{down: down})
	r.d.reloadMu.Unlock()
	require.ErrorContains(t, err, "policy down")
	mcptest.WaitFor(t, stdioWithin, func() bool { return len(r.tools(t)) == 0 }, r.log.String, "the view failed closed")
	require.Same(t, conn, r.d.rec.Handle("alice", "fs").Conn(), "the connection stayed up")

	down.Store(false)
	mcptest.WaitFor(t, stdioWithin, func() bool { return slices.Equal(r.tools(t), []string{"read"}) }, r.log.String,
		"the supervisor retried the server whose view failed closed")
	assert.Same(t, conn, r.d.rec.Handle("alice", "fs").Conn(), "repaired on the same connection, not reconnected")
}

// TestSuperviseLegacyCrashLoopBacksOff: in stdio mode (no crash restarts,
// as `wasmhost stdio` runs), an upstream that crashes again soon after
// each reconnect is retried with a growing delay (a binding a retry
// brought back must stay up a while before its backoff starts over), not
// every tick for ever.
func TestSuperviseLegacyCrashLoopBacksOff(t *testing.T) {
	if testing.Short() {
		t.Skip("watches an upstream crash for 6 s")
	}
	srv := fsServer()
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
	r := startStdio(t, dial, func(o *Options) { o.CrashRestarts = -1 }, nil)
	mcptest.WaitFor(t, stdioWithin, func() bool { return dials.Load() >= 1 }, r.log.String, "the first dial")
	// With the delay doubling from RetryMin (1 s, 2 s, 4 s, ...),
	// reconnects come about 1.5 s and 3.5 s in; without, every tick.
	// The sleep is the window the dials are counted in (a load can only
	// make them fewer); that it was retried, and said so, is waited for.
	const watch = 6 * time.Second
	time.Sleep(watch)
	assert.LessOrEqual(t, dials.Load(), int32(4), "dials in %v of an upstream that crashes 200 ms after each connect; log:\n%s", watch, r.log.String())
	mcptest.WaitFor(t, stdioWithin, func() bool { return dials.Load() >= 2 && strings.Contains(r.log.String(), "in=2s") },
		r.log.String, "a retry, and the log saying the next delay (in=2s)")
}

// TestStdioBridgesSampling: stdio mode passes a sampling request an
// upstream sends during a call to its client, and the client's answer back
// to the upstream, which the call's result then carries; the client's
// roots reach the upstream too.
func TestStdioBridgesSampling(t *testing.T) {
	t.Parallel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "fs", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "ask", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10,
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "who are you?"}}}})
		if err != nil {
			return nil, fmt.Errorf("sampling: %w", err)
		}
		eres, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "name?",
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}})
		if err != nil {
			return nil, fmt.Errorf("elicitation: %w", err)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{
			Text: res.Content.(*mcp.TextContent).Text + "; " + eres.Action + " " + fmt.Sprint(eres.Content["name"])}}}, nil
	})
	asked := make(chan string, 1)
	// Protocol 2025-11-25 on both sides: from 2026-07-28 on, a server
	// asks its questions in its result instead (multi round-trip
	// requests), which wasmhost does not bridge yet.
	r := startStdioWith(t, `{"command":"fs-server","protocolVersion":"2025-11-25"}`, inMemory(srv, nil), nil, &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			asked <- req.Params.Messages[0].Content.(*mcp.TextContent).Text
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "the stdio client"}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "alice"}}, nil
		},
	}, "2025-11-25")
	mcptest.WaitFor(t, stdioWithin, func() bool { return slices.Contains(r.tools(t), "ask") }, r.log.String, "the ask tool listed")
	res, err := r.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "ask"})
	require.NoError(t, err, "log:\n%s", r.log.String())
	require.False(t, res.IsError, "%s; log:\n%s", mcptest.Text(res), r.log.String())
	assert.Equal(t, "the stdio client; accept alice", mcptest.Text(res))
	select {
	case q := <-asked:
		assert.Equal(t, "who are you?", q)
	default:
		t.Fatal("the client was not asked")
	}
}

// TestStdioRefusesAReloadWithoutItsSession: a reload of a config that no
// longer has the session stdio mode serves is refused; the session keeps
// serving.
func TestStdioRefusesAReloadWithoutItsSession(t *testing.T) {
	t.Parallel()
	r := startStdio(t, inMemory(fsServer(), nil), nil, nil)
	mcptest.WaitFor(t, stdioWithin, func() bool { return slices.Equal(r.tools(t), []string{"read"}) }, r.log.String, "fs's tool listed")
	require.NoError(t, os.WriteFile(r.d.opts.ConfigPath, []byte(`{"mcpServers":{"fs":{"command":"fs-server"}},
		"sessions":{"bob":{"token":"bob-token-0123456789abcdef"}}}`), 0o600))
	_, err := r.d.Reload(t.Context(), "test")
	require.ErrorIs(t, err, ErrConfigInvalid)
	assert.ErrorContains(t, err, `no session named "alice" (sessions: [bob])`)
	assert.Equal(t, []string{"read"}, r.tools(t))
}

// TestAnswerLedger: the ledger follows calls through the client's bytes,
// however they are cut into reads and whether batched or not, leaves other
// requests alone, forgets a call its client cancels, and settles a call
// once the go-sdk has written its response; input it cannot follow makes
// it wait for nothing.
func TestAnswerLedger(t *testing.T) {
	t.Parallel()
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
