package pool_test

// Tests of how the pool copes with upstream MCP servers that misbehave:
// pagination abuse, silence, slowness, crashes, notification storms,
// requests the client never announced, oversized results.
//
// The cases come from an audit; those that found a defect say what the
// pool did before.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

// A hostileHook answers one request to a hostile upstream in the go-sdk
// server's stead; handled false lets the server answer.
type hostileHook func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error, handled bool)

// A hostile is a real go-sdk MCP server whose behaviour a test bends: a
// hook answers (or never answers) requests in the server's stead, and its
// connections can write raw JSON-RPC messages the go-sdk server would
// never send. The client's responses to such injected requests are
// recorded and never reach the go-sdk server.
type hostile struct {
	name string
	srv  *mcp.Server
	hook atomic.Pointer[hostileHook]
	// stop ends when the test ends: hooks that never answer wait on it
	// too, so that no goroutine outlives the test.
	stop context.Context
	// deaf, once set, makes the server read nothing more from its
	// connections (after the read under way) until the test ends or the
	// connection closes: an upstream that stops reading its input.
	deaf atomic.Bool
	// hears, closed, ends deafness: the reads waiting go on.
	hears chan struct{}

	mu       sync.Mutex
	conns    []*hostileConn
	pipes    []net.Conn // server ends of the connections
	sessions []*mcp.ServerSession
	dials    int
	received map[string]int // requests and notifications per method
	sent     map[string]string
	answers  map[string][]*jsonrpc.Response // by method of the injected request
	seq      int
}

func newHostile(t *testing.T, name string, caps *mcp.ServerCapabilities) *hostile {
	t.Helper()
	stop, cancel := context.WithCancel(context.Background())
	h := &hostile{name: name, stop: stop, hears: make(chan struct{}), received: map[string]int{}, sent: map[string]string{}, answers: map[string][]*jsonrpc.Response{}}
	opts := &mcp.ServerOptions{Logger: quiet, Capabilities: caps}
	if caps != nil && caps.Resources != nil && caps.Resources.Subscribe {
		opts.SubscribeHandler = func(context.Context, *mcp.SubscribeRequest) error { return nil }
		opts.UnsubscribeHandler = func(context.Context, *mcp.UnsubscribeRequest) error { return nil }
	}
	h.srv = mcp.NewServer(&mcp.Implementation{Name: "hostile-" + name, Version: "1"}, opts)
	h.srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			h.mu.Lock()
			h.received[method]++
			h.mu.Unlock()
			if f := h.hook.Load(); f != nil {
				if res, err, ok := (*f)(ctx, method, req); ok {
					return res, err
				}
			}
			return next(ctx, method, req)
		}
	})
	t.Cleanup(func() {
		cancel()
		h.crash()
		h.mu.Lock()
		sessions := h.sessions
		h.mu.Unlock()
		for _, ss := range sessions {
			_ = ss.Wait()
		}
	})
	return h
}

func (h *hostile) setHook(f hostileHook) { h.hook.Store(&f) }

// block waits, as a request that is never answered, until the request is
// cancelled or the test ends.
func (h *hostile) block(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-h.stop.Done():
		return h.stop.Err()
	}
}

func (h *hostile) addTool(name string) {
	h.srv.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: h.name + "/" + name}}}, nil
	})
}

func (h *hostile) count(method string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.received[method]
}

func (h *hostile) dialCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dials
}

// answered returns the client's responses to the injected requests of
// method.
func (h *hostile) answered(method string) []*jsonrpc.Response {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*jsonrpc.Response(nil), h.answers[method]...)
}

// transport serves a new server session over an in-process pipe.
func (h *hostile) transport(ctx context.Context) (mcp.Transport, error) {
	cc, sc := net.Pipe()
	ss, err := h.srv.Connect(ctx, &hostileTransport{h: h, inner: &mcp.IOTransport{Reader: sc, Writer: sc}}, nil)
	if err != nil {
		_ = cc.Close()
		_ = sc.Close()
		return nil, err
	}
	h.mu.Lock()
	h.pipes = append(h.pipes, sc)
	h.sessions = append(h.sessions, ss)
	h.dials++
	h.mu.Unlock()
	return &mcp.IOTransport{Reader: cc, Writer: cc}, nil
}

// crash breaks every connection, as if the upstream process died.
func (h *hostile) crash() {
	h.mu.Lock()
	pipes := append([]net.Conn(nil), h.pipes...)
	h.mu.Unlock()
	for _, p := range pipes {
		_ = p.Close()
	}
}

// newest returns the server side of the newest connection.
func (h *hostile) newest() *hostileConn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conns[len(h.conns)-1]
}

type hostileTransport struct {
	h     *hostile
	inner mcp.Transport
}

func (t *hostileTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	hc := &hostileConn{Connection: c, h: t.h}
	t.h.mu.Lock()
	t.h.conns = append(t.h.conns, hc)
	t.h.mu.Unlock()
	return hc, nil
}

// A hostileConn is the server side of one connection.
type hostileConn struct {
	mcp.Connection
	h *hostile
}

// Read passes the client's messages to the go-sdk server, except the
// responses to injected requests, which it records.
func (c *hostileConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		if c.h.deaf.Load() {
			select {
			case <-c.h.stop.Done():
			case <-ctx.Done():
			case <-c.h.hears:
			}
		}
		msg, err := c.Connection.Read(ctx)
		if err != nil {
			return msg, err
		}
		if r, ok := msg.(*jsonrpc.Response); ok {
			if id, ok := r.ID.Raw().(string); ok && strings.HasPrefix(id, "hostile-") {
				c.h.mu.Lock()
				m := c.h.sent[id]
				c.h.answers[m] = append(c.h.answers[m], r)
				c.h.mu.Unlock()
				continue
			}
		}
		return msg, nil
	}
}

// notify writes a notification the go-sdk server did not mean to send.
func (c *hostileConn) notify(method string, params any) error {
	b, err := json.Marshal(params)
	if err != nil {
		return err
	}
	return c.Connection.Write(context.Background(), &jsonrpc.Request{Method: method, Params: b})
}

// request writes a request the go-sdk server would refuse to send.
func (c *hostileConn) request(method string, params any) error {
	b, err := json.Marshal(params)
	if err != nil {
		return err
	}
	c.h.mu.Lock()
	c.h.seq++
	raw := fmt.Sprintf("hostile-%d", c.h.seq)
	c.h.sent[raw] = method
	c.h.mu.Unlock()
	id, err := jsonrpc.MakeID(raw)
	if err != nil {
		return err
	}
	return c.Connection.Write(context.Background(), &jsonrpc.Request{ID: id, Method: method, Params: b})
}

// A hostileEnv is an env over hostile upstreams and well-behaved ones
// (the upstream of helpers_test.go), logging to a buffer the test reads.
type hostileEnv struct {
	*env
	logs *mcptest.LogBuffer
}

func newHostileEnv(t *testing.T, opts pool.Options, hs []*hostile, goods ...*mcptest.Upstream) *hostileEnv {
	t.Helper()
	logs := &mcptest.LogBuffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, opts, goods...)
	for _, h := range hs {
		e.others[h.name] = h
	}
	return &hostileEnv{env: e, logs: logs}
}

func hostileSpec(name string, timeout time.Duration) pool.Spec {
	return pool.Spec{Name: name, Command: "/bin/" + name, Pooled: true, Timeout: timeout}
}

func (e *hostileEnv) acquire(ctx context.Context, spec pool.Spec, session string, reg *viewtest.Registry) (*pool.Handle, error) {
	return e.pool.Acquire(ctx, spec, e.newView(session, spec.Name, "{}", reg, nil))
}

// mustAcquire acquires spec for session (within mcptest.EventWithin: the
// spec's timeout, not this bound, is what a test may be about).
func (e *hostileEnv) mustAcquire(spec pool.Spec, session string, reg *viewtest.Registry) *pool.Handle {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), mcptest.Within(e.t, mcptest.EventWithin))
	defer cancel()
	h, err := e.acquire(ctx, spec, session, reg)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = h.Release(context.Background()) })
	return h
}

// acquireOutcome runs Acquire for spec in the background and waits, within
// wait, for it to return or for overran to close, whichever comes first.
// It returns Acquire's error (nil when overran closed first, or when
// Acquire succeeded) and whether overran closed.
func (e *hostileEnv) acquireOutcome(spec pool.Spec, overran <-chan struct{}, wait time.Duration) (err error, over bool) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	type result struct {
		h   *pool.Handle
		err error
	}
	done := make(chan result, 1)
	go func() {
		h, err := e.acquire(ctx, spec, "s1", viewtest.NewRegistry())
		done <- result{h, err}
	}()
	select {
	case r := <-done:
		if r.h != nil {
			_ = r.h.Release(context.Background())
		}
		return r.err, false
	case <-overran:
		cancel()
		<-done
		return nil, true
	}
}

// requireHealthy checks that a well-behaved server's session still works:
// its registry holds the server's tools and a call through its handle is
// answered.
func requireHealthy(t *testing.T, h *pool.Handle, reg *viewtest.Registry, u *mcptest.Upstream) {
	t.Helper()
	require.Equal(t, u.ToolNames(), reg.ToolNames(u.Name))
	cs := h.Conn()
	require.NotNil(t, cs, "the well-behaved server's entry is not ready")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tool := u.ToolNames()[0]
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"path": "x"}})
	require.NoError(t, err)
	require.Equal(t, u.Name+"/"+tool+" says hi", mcptest.Text(res))
}

// listMethods are the paginated lists the pool discovers.
var listMethods = []string{"tools/list", "prompts/list", "resources/list", "resources/templates/list"}

// page returns a page of list method holding size items numbered from n
// and next as its cursor.
func page(method string, n, size int, next string) mcp.Result {
	switch method {
	case "tools/list":
		r := &mcp.ListToolsResult{NextCursor: next}
		for i := range size {
			r.Tools = append(r.Tools, &mcp.Tool{Name: fmt.Sprintf("item%d", n+i), InputSchema: map[string]any{"type": "object"}})
		}
		return r
	case "prompts/list":
		r := &mcp.ListPromptsResult{NextCursor: next}
		for i := range size {
			r.Prompts = append(r.Prompts, &mcp.Prompt{Name: fmt.Sprintf("item%d", n+i)})
		}
		return r
	case "resources/list":
		r := &mcp.ListResourcesResult{NextCursor: next}
		for i := range size {
			r.Resources = append(r.Resources, &mcp.Resource{Name: "r", URI: fmt.Sprintf("file:///item%d", n+i)})
		}
		return r
	case "resources/templates/list":
		r := &mcp.ListResourceTemplatesResult{NextCursor: next}
		for i := range size {
			r.ResourceTemplates = append(r.ResourceTemplates, &mcp.ResourceTemplate{Name: "t", URITemplate: fmt.Sprintf("file:///item%d/{x}", n+i)})
		}
		return r
	}
	panic("not a list method: " + method)
}

// allCaps announces every list (with list_changed) and subscriptions.
var allCaps = &mcp.ServerCapabilities{
	Tools:     &mcp.ToolCapabilities{ListChanged: true},
	Prompts:   &mcp.PromptCapabilities{ListChanged: true},
	Resources: &mcp.ResourceCapabilities{ListChanged: true, Subscribe: true},
}

// paginationAbuse makes h answer method with pages of size items whose
// cursors next(n) gives (n counts pages from 1). Past limit pages it
// stops answering (until the request is cancelled) and closes overran,
// so that a test sees a pool that keeps asking without waiting for its
// timeout.
func paginationAbuse(h *hostile, method string, size, limit int, next func(n int) string) (overran <-chan struct{}) {
	ch := make(chan struct{})
	var pages atomic.Int64
	var once sync.Once
	h.setHook(func(ctx context.Context, m string, _ mcp.Request) (mcp.Result, error, bool) {
		if m != method {
			return nil, nil, false
		}
		n := int(pages.Add(1))
		if n > limit {
			once.Do(func() { close(ch) })
			return nil, h.block(ctx), true
		}
		return page(method, n*size, size, next(n)), nil, true
	})
	return ch
}

// The most a listing may take before the pool gives up on it, as these
// tests hold the pool to (a fix may well choose lower bounds): pages of
// one list, and items over all its pages.
const (
	maxListPages = 1000
	maxListItems = 50_000
)

// Before the fix, an upstream whose list cursors come round again
// (page 1 says "c1", page 2 "c0", page 3 "c1", ...) is asked for pages
// for as long as the entry's timeout allows (thousands of pages a
// second, every item kept: with pages of 500 tools the heap grew by about
// 75 MB a second), and the failure, when the timeout ends it, says only
// "context deadline exceeded". The pool should notice the repeated cursor
// within a page or two and fail the entry at once, naming the server.
func TestHostilePaginationCycleIsCut(t *testing.T) {
	const bound = 20
	for _, method := range listMethods {
		t.Run(method, func(t *testing.T) {
			h := newHostile(t, "cycler", allCaps)
			overran := paginationAbuse(h, method, 1, bound, func(n int) string { return fmt.Sprintf("c%d", n%2) })
			e := newHostileEnv(t, pool.Options{}, []*hostile{h})
			err, over := e.acquireOutcome(hostileSpec("cycler", time.Minute), overran, 5*time.Second)
			require.False(t, over, "the pool asked for page %d of %s although its cursors had come round after two", bound+1, method)
			require.Error(t, err)
			require.NotErrorIs(t, err, context.DeadlineExceeded, "the pool waited for a timeout instead of noticing the cycle")
			require.ErrorIs(t, err, pool.ErrTerminal)
			require.Contains(t, err.Error(), "cycler")
		})
	}
}

// Before the fix, an upstream that answers every page with a fresh
// cursor is asked for pages until the entry's timeout (30 s by default),
// every item kept in memory; so is one whose pages are huge. The pool
// should give up on a listing past a bound of pages and of items
// (maxListPages, maxListItems) and fail the entry, naming the server,
// rather than wait for the timeout.
func TestHostileEndlessPaginationIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("pages through a hostile upstream until the bound; the other hostile-upstream tests stay in -short; run without -short")
	}
	fresh := func(n int) string { return fmt.Sprintf("page-%d", n) }
	check := func(t *testing.T, method string, size, limit int) {
		h := newHostile(t, "endless", allCaps)
		overran := paginationAbuse(h, method, size, limit, fresh)
		e := newHostileEnv(t, pool.Options{}, []*hostile{h})
		// The wait is generous: a bounded listing of a thousand pages
		// takes well under a second, but the test has failed at 10 s on
		// a machine running twenty test processes. The entry's timeout is
		// longer still, so that only the bound can end the listing.
		err, over := e.acquireOutcome(hostileSpec("endless", 2*time.Minute), overran, time.Minute)
		require.False(t, over, "the pool asked for page %d of %s (%d items so far)", limit+1, method, limit*size)
		require.Error(t, err)
		require.NotErrorIs(t, err, context.DeadlineExceeded, "the pool waited for a timeout instead of bounding the listing")
		require.ErrorIs(t, err, pool.ErrTerminal)
		require.Contains(t, err.Error(), "endless")
	}
	for _, method := range listMethods {
		t.Run(method+"/pages", func(t *testing.T) { check(t, method, 1, maxListPages) })
	}
	t.Run("tools/list/items", func(t *testing.T) { check(t, "tools/list", 1000, maxListItems/1000) })
}

// Before the fix, an upstream that sends tools/list_changed as fast
// as it can keeps its entry rediscovering back to back: notifications
// coalesce (about 9000 gave about 400 rediscoveries in a second), but
// every round trip starts another full listing, replayed through the
// policy for every view, so one upstream can keep a core of the daemon
// busy for as long as it likes. Rediscovery should be rate-limited per
// entry (a few per second at most) while the last change is still
// discovered. What the test also checks, and passes today: the entry
// stays ready, calls are answered, the tool added during the storm
// arrives, the views see no churn, another server is unaffected.
func TestHostileListChangedStormIsRateLimited(t *testing.T) {
	t.Parallel()
	h := newHostile(t, "stormy", allCaps)
	h.addTool("steady")
	good := newUpstream(t, "good", "alpha")
	e := newHostileEnv(t, pool.Options{}, []*hostile{h}, good)
	reg, goodReg := viewtest.NewRegistry(), viewtest.NewRegistry()
	hd := e.mustAcquire(hostileSpec("stormy", 5*time.Second), "s1", reg)
	gd := e.mustAcquire(stdioSpec("good"), "s2", goodReg)
	c := h.newest()
	before := e.counters.Snapshot()
	lists := h.count("tools/list")
	goodOps := goodReg.OpCount()

	sent := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); sent++ {
		require.NoError(t, c.notify("notifications/tools/list_changed", map[string]any{}))
		if sent == 100 {
			h.addTool("late")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := hd.Conn().CallTool(ctx, &mcp.CallToolParams{Name: "steady"})
	require.NoError(t, err)
	require.Equal(t, "stormy/steady", mcptest.Text(res))
	settle(t, hd)

	require.Equal(t, pool.StateReady, hd.Entry().State())
	require.Equal(t, []string{"late", "steady"}, reg.ToolNames("stormy"))
	requireHealthy(t, gd, goodReg, good)
	require.Equal(t, goodOps, goodReg.OpCount(), "the other server's view saw churn")
	d := e.counters.Snapshot().Sub(before)
	require.GreaterOrEqual(t, d.Notifications, int64(sent))
	t.Logf("%d list_changed: %d rediscoveries, %d tools/list, %d policy calls", sent, d.Discoveries, h.count("tools/list")-lists, d.PolicyCalls)
	assert.LessOrEqual(t, d.Discoveries, int64(25), "rediscoveries during a one-second storm")
}

// Before the fix (low severity, but it multiplied the cost of every
// storm). A list_changed after which the upstream lists exactly what it
// listed before still publishes a new snapshot, and every view projects
// it through the policy again (one policy call per distinct key per
// rediscovery). An unchanged listing should publish nothing.
func TestHostileUnchangedRediscoveryIsNotReplayed(t *testing.T) {
	h := newHostile(t, "repeater", allCaps)
	h.addTool("same")
	e := newHostileEnv(t, pool.Options{}, []*hostile{h})
	reg := viewtest.NewRegistry()
	hd := e.mustAcquire(hostileSpec("repeater", 5*time.Second), "s1", reg)
	before := e.counters.Snapshot()
	lists := h.count("tools/list")
	require.NoError(t, h.newest().notify("notifications/tools/list_changed", map[string]any{}))
	require.Eventually(t, func() bool { return h.count("tools/list") > lists }, 5*time.Second, 5*time.Millisecond)
	settle(t, hd)
	d := e.counters.Snapshot().Sub(before)
	require.Equal(t, int64(1), d.Discoveries)
	require.Equal(t, []string{"same"}, reg.ToolNames("repeater"))
	assert.Zero(t, d.PolicyCalls, "policy calls for a listing that did not change")
	assert.Zero(t, d.Replays, "replays of a listing that did not change")
}

// An upstream that never answers the handshake (server/discover of
// protocol 2026-07-28, or initialize, which the go-sdk falls back to when
// server/discover is refused) fails its entry once the spec's timeout
// ends, with an error naming the server, the connect step and the
// timeout, logged too; the pool does not try again by itself, and a
// well-behaved server acquired meanwhile is served at once.
func TestHostileSilentHandshake(t *testing.T) {
	t.Parallel()
	for _, silent := range []string{"server/discover", "initialize"} {
		t.Run(silent, func(t *testing.T) {
			h := newHostile(t, "mute", allCaps)
			h.setHook(func(ctx context.Context, m string, _ mcp.Request) (mcp.Result, error, bool) {
				switch m {
				case silent:
					return nil, h.block(ctx), true
				case "server/discover":
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "no such method"}, true
				}
				return nil, nil, false
			})
			good := newUpstream(t, "good", "alpha", "beta")
			e := newHostileEnv(t, pool.Options{CrashRestarts: 3}, []*hostile{h}, good)
			const timeout = 300 * time.Millisecond
			errc := make(chan error, 1)
			start := time.Now()
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				hd, err := e.acquire(ctx, hostileSpec("mute", timeout), "s1", viewtest.NewRegistry())
				if hd != nil {
					_ = hd.Release(context.Background())
				}
				errc <- err
			}()
			goodReg := viewtest.NewRegistry()
			gd := e.mustAcquire(stdioSpec("good"), "s2", goodReg)
			requireHealthy(t, gd, goodReg, good)

			var err error
			select {
			case err = <-errc:
			case <-time.After(10 * time.Second):
				t.Fatal("Acquire of a silent upstream did not return")
			}
			require.GreaterOrEqual(t, time.Since(start), timeout)
			require.Equal(t, 1, h.count(silent))
			require.ErrorIs(t, err, pool.ErrTerminal)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Contains(t, err.Error(), `server "mute"`)
			require.Contains(t, err.Error(), "connect")
			require.Contains(t, err.Error(), "no answer within the server's timeout, 300ms", "the error says which limit ended the handshake")
			require.True(t, e.logs.HasLine("upstream connection failed", "server=mute"), e.logs.String())
			require.Equal(t, 1, h.dialCount())
			requireHealthy(t, gd, goodReg, good)
		})
	}
	t.Run("pool close", func(t *testing.T) {
		h := newHostile(t, "mute", allCaps)
		h.setHook(func(ctx context.Context, m string, _ mcp.Request) (mcp.Result, error, bool) {
			if m != "server/discover" {
				return nil, nil, false
			}
			return nil, h.block(ctx), true
		})
		e := newHostileEnv(t, pool.Options{}, []*hostile{h})
		errc := make(chan error, 1)
		go func() {
			_, err := e.acquire(context.Background(), hostileSpec("mute", time.Minute), "s1", viewtest.NewRegistry())
			errc <- err
		}()
		require.Eventually(t, func() bool { return h.count("server/discover") == 1 }, 5*time.Second, 5*time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, e.pool.Close(ctx), "Close waits for the silent handshake")
		select {
		case err := <-errc:
			require.ErrorIs(t, err, pool.ErrTerminal)
		case <-ctx.Done():
			t.Fatal("Acquire still waits after Close")
		}
	})
}

// An upstream whose list answers come slowly is listed completely while
// the pages fit in the spec's timeout; one that takes longer fails its
// entry, naming the server and the list.
func TestHostileSlowPages(t *testing.T) {
	t.Parallel()
	slow := func(h *hostile, delay time.Duration) {
		h.setHook(func(ctx context.Context, m string, req mcp.Request) (mcp.Result, error, bool) {
			if m != "tools/list" {
				return nil, nil, false
			}
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return nil, ctx.Err(), true
			}
			n := 0
			if p, ok := req.GetParams().(*mcp.ListToolsParams); ok && p.Cursor != "" {
				_, _ = fmt.Sscanf(p.Cursor, "page-%d", &n)
			}
			next := ""
			if n < 2 {
				next = fmt.Sprintf("page-%d", n+1)
			}
			return page(m, n, 1, next), nil, true
		})
	}
	t.Run("within timeout", func(t *testing.T) {
		h := newHostile(t, "sluggish", allCaps)
		slow(h, 100*time.Millisecond)
		e := newHostileEnv(t, pool.Options{}, []*hostile{h})
		reg := viewtest.NewRegistry()
		e.mustAcquire(hostileSpec("sluggish", 4*time.Second), "s1", reg)
		require.Equal(t, []string{"item0", "item1", "item2"}, reg.ToolNames("sluggish"))
	})
	t.Run("past timeout", func(t *testing.T) {
		h := newHostile(t, "sluggish", allCaps)
		slow(h, 200*time.Millisecond)
		e := newHostileEnv(t, pool.Options{}, []*hostile{h})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := e.acquire(ctx, hostileSpec("sluggish", 300*time.Millisecond), "s1", viewtest.NewRegistry())
		require.ErrorIs(t, err, pool.ErrTerminal)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Contains(t, err.Error(), `server "sluggish"`)
		require.Contains(t, err.Error(), "list tools")
	})
}

// An upstream that stops answering tools/list after its first discovery
// keeps its entry ready: the refresh a list_changed starts gives up after
// the spec's timeout with a warning naming the entry and is tried again
// later, the views keep the last snapshot, calls on the connection are
// answered meanwhile, more list_changed coalesce, and once the upstream
// answers again its change is discovered. Another server is unaffected.
func TestHostileSilentListOnRefresh(t *testing.T) {
	t.Parallel()
	h := newHostile(t, "stall", allCaps)
	h.addTool("one")
	var stalled atomic.Bool
	h.setHook(func(ctx context.Context, m string, _ mcp.Request) (mcp.Result, error, bool) {
		if m != "tools/list" || !stalled.Load() {
			return nil, nil, false
		}
		return nil, h.block(ctx), true
	})
	good := newUpstream(t, "good", "alpha")
	e := newHostileEnv(t, pool.Options{}, []*hostile{h}, good)
	reg, goodReg := viewtest.NewRegistry(), viewtest.NewRegistry()
	hd := e.mustAcquire(hostileSpec("stall", 700*time.Millisecond), "s1", reg)
	gd := e.mustAcquire(stdioSpec("good"), "s2", goodReg)
	before := e.counters.Snapshot()

	stalled.Store(true)
	lists := h.count("tools/list")
	for range 50 {
		require.NoError(t, h.newest().notify("notifications/tools/list_changed", map[string]any{}))
	}
	require.Eventually(t, func() bool { return h.count("tools/list") > lists }, 5*time.Second, 5*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := hd.Conn().CallTool(ctx, &mcp.CallToolParams{Name: "one"})
	require.NoError(t, err)
	require.Equal(t, "stall/one", mcptest.Text(res))
	require.Equal(t, pool.StateReady, hd.Entry().State())
	requireHealthy(t, gd, goodReg, good)

	require.Eventually(t, func() bool {
		return e.logs.HasLine("snapshot refresh failed", "server=stall")
	}, 5*time.Second, 10*time.Millisecond)
	// (The refresh is tried again with a growing delay while the upstream
	// stays silent, so the entry does not settle.)
	require.Equal(t, []string{"one"}, reg.ToolNames("stall"))
	require.Nil(t, view.Of(hd).Err())
	require.LessOrEqual(t, e.counters.Snapshot().Sub(before).Discoveries, int64(3), "50 list_changed during one stalled refresh")

	stalled.Store(false)
	h.addTool("two") // the go-sdk server announces it
	require.Eventually(t, func() bool { return len(reg.ToolNames("stall")) == 2 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{"one", "two"}, reg.ToolNames("stall"))
}

// Before the fix: When the refresh a list_changed starts fails (the
// upstream's tools/list timed out once), the entry logs a warning and
// keeps its old snapshot until the upstream happens to send another
// list_changed: the change it announced is never discovered, and
// nothing but that one log line (EntryInfo.Err stays nil) says the
// sessions see a stale list. A failed refresh should be tried again
// (with a delay) until it succeeds or the entry fails.
func TestHostileFailedRefreshIsRetried(t *testing.T) {
	t.Parallel()
	h := newHostile(t, "flaky", allCaps)
	h.addTool("one")
	var stallOnce atomic.Bool
	h.setHook(func(ctx context.Context, m string, _ mcp.Request) (mcp.Result, error, bool) {
		if m != "tools/list" || !stallOnce.CompareAndSwap(true, false) {
			return nil, nil, false
		}
		return nil, h.block(ctx), true
	})
	e := newHostileEnv(t, pool.Options{}, []*hostile{h})
	reg := viewtest.NewRegistry()
	hd := e.mustAcquire(hostileSpec("flaky", 300*time.Millisecond), "s1", reg)
	stallOnce.Store(true)
	h.addTool("two") // the go-sdk server sends one tools/list_changed
	require.Eventually(t, func() bool { return e.logs.HasLine("snapshot refresh failed", "server=flaky") }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, pool.StateReady, hd.Entry().State())
	assert.Eventually(t, func() bool { return len(reg.ToolNames("flaky")) == 2 }, 3*time.Second, 20*time.Millisecond,
		"the announced change is never discovered: the sessions keep %v", reg.ToolNames("flaky"))
}

// An upstream that drops the connection when asked for one of its lists
// fails the Acquire that connects it, naming the server and the list; one
// that does so on the connection a crash restart makes fails its entry,
// and its views are withdrawn with ErrTerminal.
func TestHostileClosesDuringDiscovery(t *testing.T) {
	names := map[string]string{"tools/list": "list tools", "prompts/list": "list prompts", "resources/list": "list resources", "resources/templates/list": "list resource templates"}
	for _, method := range listMethods {
		t.Run(method, func(t *testing.T) {
			h := newHostile(t, "quitter", allCaps)
			h.setHook(func(ctx context.Context, m string, _ mcp.Request) (mcp.Result, error, bool) {
				if m != method {
					return nil, nil, false
				}
				h.crash()
				return nil, h.block(ctx), true
			})
			e := newHostileEnv(t, pool.Options{CrashRestarts: 3}, []*hostile{h})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := e.acquire(ctx, hostileSpec("quitter", 5*time.Second), "s1", viewtest.NewRegistry())
			require.ErrorIs(t, err, pool.ErrTerminal)
			require.NotErrorIs(t, err, context.DeadlineExceeded)
			require.Contains(t, err.Error(), `server "quitter"`)
			require.Contains(t, err.Error(), names[method])
			require.Equal(t, 1, h.dialCount())
		})
	}
	t.Run("on restart", func(t *testing.T) {
		h := newHostile(t, "quitter", allCaps)
		h.addTool("one")
		var quit atomic.Bool
		h.setHook(func(ctx context.Context, m string, _ mcp.Request) (mcp.Result, error, bool) {
			if m != "tools/list" || !quit.Load() {
				return nil, nil, false
			}
			h.crash()
			return nil, h.block(ctx), true
		})
		e := newHostileEnv(t, pool.Options{CrashRestarts: 3}, []*hostile{h})
		reg := viewtest.NewRegistry()
		hd := e.mustAcquire(hostileSpec("quitter", 5*time.Second), "s1", reg)
		quit.Store(true)
		h.crash()
		require.Eventually(t, func() bool { return hd.Entry().State() == pool.StateFailed }, 5*time.Second, 5*time.Millisecond)
		settle(t, hd)
		require.Empty(t, reg.ToolNames("quitter"))
		require.ErrorIs(t, view.Of(hd).Err(), pool.ErrTerminal)
		require.Contains(t, view.Of(hd).Err().Error(), "quitter")
		require.Equal(t, 2, h.dialCount())
	})
}

// An upstream that crashes as soon as each connection is up is restarted
// Options.CrashRestarts times in a row (each restart logged) and then
// failed for good: its views are withdrawn with ErrTerminal wrapping
// ErrDisconnected and the server's name, no more connections are made,
// and another server's session is unaffected.
func TestHostileCrashLoopIsBounded(t *testing.T) {
	h := newHostile(t, "crashy", allCaps)
	h.addTool("one")
	good := newUpstream(t, "good", "alpha")
	e := newHostileEnv(t, pool.Options{CrashRestarts: 3}, []*hostile{h}, good)
	reg, goodReg := viewtest.NewRegistry(), viewtest.NewRegistry()
	hd := e.mustAcquire(hostileSpec("crashy", 5*time.Second), "s1", reg)
	gd := e.mustAcquire(stdioSpec("good"), "s2", goodReg)

	for i := 1; i <= 4; i++ {
		require.Eventually(t, func() bool {
			info := hd.Entry().Info()
			return info.State == pool.StateReady && info.Version == uint64(i) && h.dialCount() == i
		}, 5*time.Second, 2*time.Millisecond, "connection %d", i)
		h.crash()
	}
	require.Eventually(t, func() bool { return hd.Entry().State() == pool.StateFailed }, 5*time.Second, 5*time.Millisecond)
	settle(t, hd)
	require.Equal(t, 4, h.dialCount(), "one connection and three restarts")
	require.Empty(t, reg.ToolNames("crashy"))
	err := view.Of(hd).Err()
	require.ErrorIs(t, err, pool.ErrTerminal)
	require.ErrorIs(t, err, pool.ErrDisconnected)
	require.Contains(t, err.Error(), "crashy")
	require.Equal(t, 3, strings.Count(e.logs.String(), "upstream went away, restarting"))
	require.Equal(t, 3, strings.Count(e.logs.String(), "upstream restarted"), "each restart that brought the server back is logged:\n%s", e.logs.String())
	require.True(t, e.logs.HasLine("upstream restarted", "server=crashy"), e.logs.String())
	requireHealthy(t, gd, goodReg, good)
}

// An upstream that sends sampling, elicitation and roots requests in a
// loop, which the pool's client never announced, gets an error for the
// first two and an empty list of roots, each answered at once: the
// connection stays ready, calls are answered, and no goroutines pile up.
func TestHostileUnannouncedServerRequests(t *testing.T) {
	h := newHostile(t, "asker", allCaps)
	h.addTool("one")
	e := newHostileEnv(t, pool.Options{}, []*hostile{h})
	hd := e.mustAcquire(hostileSpec("asker", 5*time.Second), "s1", viewtest.NewRegistry())
	c := h.newest()
	base := runtime.NumGoroutine()
	const rounds = 300
	for range rounds {
		require.NoError(t, c.request("sampling/createMessage", map[string]any{"messages": []any{}, "maxTokens": 10}))
		require.NoError(t, c.request("elicitation/create", map[string]any{"message": "password?", "requestedSchema": map[string]any{"type": "object"}}))
		require.NoError(t, c.request("roots/list", map[string]any{}))
	}
	require.Eventually(t, func() bool {
		return len(h.answered("sampling/createMessage")) == rounds && len(h.answered("elicitation/create")) == rounds && len(h.answered("roots/list")) == rounds
	}, 10*time.Second, 10*time.Millisecond)
	for _, m := range []string{"sampling/createMessage", "elicitation/create"} {
		for _, r := range h.answered(m) {
			require.Error(t, r.Error, m)
		}
	}
	for _, r := range h.answered("roots/list") {
		require.NoError(t, r.Error)
		require.JSONEq(t, `{"roots":[]}`, string(r.Result))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := hd.Conn().CallTool(ctx, &mcp.CallToolParams{Name: "one"})
	require.NoError(t, err)
	require.Equal(t, "asker/one", mcptest.Text(res))
	require.Equal(t, 1, h.dialCount())
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= base+5 }, 5*time.Second, 10*time.Millisecond)
}

// An upstream that floods progress notifications for tokens it was never
// given and resources/updated for URIs nobody subscribed to: a handle
// subscribed to one URI receives exactly that URI's updates, every
// progress notification reaches Options.OnProgress (whose owner, the
// session relay, drops unknown tokens), the connection stays ready and no
// goroutines pile up.
func TestHostileForeignNotifications(t *testing.T) {
	h := newHostile(t, "chatty", allCaps)
	h.addTool("one")
	var progress atomic.Int64
	e := newHostileEnv(t, pool.Options{OnProgress: func(context.Context, *mcp.ProgressNotificationClientRequest) { progress.Add(1) }}, []*hostile{h})
	hd := e.mustAcquire(hostileSpec("chatty", 5*time.Second), "s1", viewtest.NewRegistry())
	var mu sync.Mutex
	var got []string
	ctx, cancel := context.WithTimeout(context.Background(), mcptest.Within(t, mcptest.EventWithin))
	defer cancel()
	require.NoError(t, hd.Subscribe(ctx, "file:///mine", func(p *mcp.ResourceUpdatedNotificationParams) {
		mu.Lock()
		got = append(got, p.URI)
		mu.Unlock()
	}))
	c := h.newest()
	base := runtime.NumGoroutine()
	const n = 2000
	for i := range n {
		require.NoError(t, c.notify("notifications/progress", map[string]any{"progressToken": fmt.Sprintf("stolen-%d", i), "progress": i}))
		require.NoError(t, c.notify("notifications/resources/updated", map[string]any{"uri": fmt.Sprintf("file:///other-%d", i)}))
		if i%500 == 0 {
			require.NoError(t, c.notify("notifications/resources/updated", map[string]any{"uri": "file:///mine"}))
		}
	}
	require.Eventually(t, func() bool { return progress.Load() == n }, mcptest.Within(t, mcptest.EventWithin), 10*time.Millisecond)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 4
	}, mcptest.Within(t, mcptest.EventWithin), 10*time.Millisecond)
	mu.Lock()
	require.Equal(t, []string{"file:///mine", "file:///mine", "file:///mine", "file:///mine"}, got)
	mu.Unlock()
	res, err := hd.Conn().CallTool(ctx, &mcp.CallToolParams{Name: "one"})
	require.NoError(t, err)
	require.Equal(t, "chatty/one", mcptest.Text(res))
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= base+5 }, mcptest.Within(t, mcptest.EventWithin), 10*time.Millisecond)
}

// An upstream that sends log messages outside any call, each with a
// logger name, level and data of 64 KiB, gets them into the operator's
// log (a burst, then one a second) with each field cut to 2 KiB. Before,
// each line held the message whole: one a second of 16 MiB filled the
// log's disk at 16 MiB a second, where standard error is held to 100 lines
// of 2 KiB per 10 s.
func TestHostileLogMessagesAreBounded(t *testing.T) {
	h := newHostile(t, "logger", allCaps)
	h.addTool("one")
	e := newHostileEnv(t, pool.Options{}, []*hostile{h})
	e.mustAcquire(hostileSpec("logger", 5*time.Second), "s1", viewtest.NewRegistry())
	c := h.newest()
	big := strings.Repeat("x", 64<<10)
	for range 10 {
		require.NoError(t, c.notify("notifications/message", map[string]any{"level": "error" + big, "logger": big, "data": map[string]any{"text": big}}))
	}
	const what = "upstream log message (sent outside any client's call)"
	lines := func() []string {
		var out []string
		for l := range strings.Lines(e.logs.String()) {
			if strings.Contains(l, what) {
				out = append(out, l)
			}
		}
		return out
	}
	mcptest.WaitFor(t, mcptest.EventWithin, func() bool { return len(lines()) >= 10 }, func() string { return "" }, "the first burst of log messages logged")
	for _, l := range lines() {
		require.Less(t, len(l), 8<<10, "a log line of %d bytes", len(l))
		assert.Contains(t, l, "server=logger")
	}
}

// An upstream whose error answer to initialize or tools/list carries a
// message of a MiB fails its entry with an error of a few KiB that still
// names the server and the request, its message cut in the middle; no log
// line holds the message whole. Before, the whole message went into the
// entry's error, which each retry (every 30 s, for ever) logged several
// times, and which /v1/state and reload answers carry: 16 MiB each.
func TestHostileHugeErrorMessagesAreCut(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"initialize", "tools/list"} {
		t.Run(strings.ReplaceAll(method, "/", "-"), func(t *testing.T) {
			h := newHostile(t, "liar", allCaps)
			huge := "start " + strings.Repeat("E", 1<<20) + " end"
			h.setHook(func(ctx context.Context, m string, _ mcp.Request) (mcp.Result, error, bool) {
				switch m {
				case method:
					return nil, &jsonrpc.Error{Code: -32000, Message: huge}, true
				case "server/discover":
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "no such method"}, true
				}
				return nil, nil, false
			})
			e := newHostileEnv(t, pool.Options{}, []*hostile{h})
			ctx, cancel := context.WithTimeout(context.Background(), mcptest.Within(t, mcptest.EventWithin))
			defer cancel()
			hd, err := e.acquire(ctx, hostileSpec("liar", 5*time.Second), "s1", viewtest.NewRegistry())
			if hd != nil {
				_ = hd.Release(context.Background())
			}
			require.ErrorIs(t, err, pool.ErrTerminal)
			msg := err.Error()
			assert.Less(t, len(msg), 16<<10, "the error's length")
			for _, want := range []string{`server "liar"`, method, "start EEE", "EEE end", "bytes cut"} {
				assert.Truef(t, strings.Contains(msg, want), "the error lacks %q: %.300s…", want, msg)
			}
			require.True(t, e.logs.HasLine("upstream connection failed", "server=liar"))
			for l := range strings.Lines(e.logs.String()) {
				assert.Less(t, len(l), 16<<10, "a log line of %d bytes: %.200s…", len(l), l)
			}
		})
	}
}

// An upstream that lists many names twice, each name long, gets one
// warning of a few KiB naming the first of them and how many there are.
// Before, the warning held every duplicate whole: up to the listing's 32
// MiB, logged again whenever the set changed, which a list_changed every
// 100 ms could make it do ten times a second.
func TestHostileDuplicateNamesWarningIsBounded(t *testing.T) {
	t.Parallel()
	h := newHostile(t, "twice", allCaps)
	long := strings.Repeat("n", 2<<10)
	h.setHook(func(ctx context.Context, m string, _ mcp.Request) (mcp.Result, error, bool) {
		if m != "tools/list" {
			return nil, nil, false
		}
		var tools []*mcp.Tool
		for i := range 200 {
			name := fmt.Sprintf("%s%d", long, i)
			tools = append(tools, &mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}}, &mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}})
		}
		return &mcp.ListToolsResult{Tools: tools}, nil, true
	})
	e := newHostileEnv(t, pool.Options{}, []*hostile{h})
	e.mustAcquire(hostileSpec("twice", 5*time.Second), "s1", viewtest.NewRegistry())
	var warning string
	for l := range strings.Lines(e.logs.String()) {
		if strings.Contains(l, "upstream lists names twice") {
			warning = l
		}
	}
	require.NotEmpty(t, warning, "the warning is logged")
	assert.Less(t, len(warning), 16<<10, "the warning's length: %.300s…", warning)
	assert.Contains(t, warning, "200 names")
	assert.Contains(t, warning, "server=twice")
}

// An upstream that sends requests (pings here, answered at once) and
// stops reading its input, so that their answers cannot be written, gets
// its connection closed once it has more than pool.MaxUnansweredRequests
// of them unanswered, the failure naming the server and why; the
// goroutines holding the answers end with it. Before, each request held a
// goroutine (and its answer) for as long as the upstream lived: 300,000
// pings of 40 bytes held 300,000 goroutines and 2.7 GB.
func TestHostileDeafUpstreamRequestsAreBounded(t *testing.T) {
	h := newHostile(t, "deaf", allCaps)
	h.addTool("one")
	e := newHostileEnv(t, pool.Options{}, []*hostile{h})
	e.mustAcquire(hostileSpec("deaf", 5*time.Second), "s1", viewtest.NewRegistry())
	c := h.newest()
	base := runtime.NumGoroutine()
	h.deaf.Store(true)
	const n = 4 * pool.MaxUnansweredRequests
	sent := 0
	for ; sent < n; sent++ {
		if c.request("ping", map[string]any{}) != nil {
			break // the connection was closed
		}
	}
	assert.Less(t, sent, n, "every request was taken in")
	mcptest.WaitFor(t, mcptest.EventWithin, func() bool { return runtime.NumGoroutine() <= base+50 }, e.logs.String,
		"the goroutines of the unanswered requests end (%d now, %d before)", runtime.NumGoroutine(), base)
	mcptest.WaitFor(t, mcptest.EventWithin, func() bool { return e.logs.HasLine("server=deaf", "unanswered") }, e.logs.String,
		"the failure is logged, naming the server and why")
}

// Releasing the last handle of an upstream that stops reading its input
// while requests of its own wait for their answers ends within the
// server's timeout, the connection closed beneath them. Before, the
// release waited for ever for those answers to be written, and the reload
// releasing it, holding the daemon's reload lock, with it.
func TestHostileDeafUpstreamReleaseEnds(t *testing.T) {
	h := newHostile(t, "deaf", allCaps)
	h.addTool("one")
	e := newHostileEnv(t, pool.Options{}, []*hostile{h})
	hd := e.mustAcquire(hostileSpec("deaf", 300*time.Millisecond), "s1", viewtest.NewRegistry())
	c := h.newest()
	h.deaf.Store(true)
	for range 10 {
		require.NoError(t, c.request("ping", map[string]any{}))
	}
	done := make(chan error, 1)
	go func() { done <- hd.Release(context.Background()) }()
	select {
	case <-done:
	case <-time.After(mcptest.Within(t, mcptest.EventWithin)):
		t.Fatalf("Release of a deaf upstream did not return\n%s", mcptest.Stacks())
	}
}

// A call to an upstream that stops reading its input (a hung process:
// once the pipe is full, every write waits) ends in an error within the
// server's timeout, and the connection is closed: the call's own context
// cannot cut a write that waits. Before, the call waited for ever, past
// every timeout, and so did every later call, on a connection still
// counted ready.
func TestHostileDeafUpstreamCallEnds(t *testing.T) {
	h := newHostile(t, "deaf", allCaps)
	h.addTool("one")
	e := newHostileEnv(t, pool.Options{}, []*hostile{h})
	hd := e.mustAcquire(hostileSpec("deaf", 300*time.Millisecond), "s1", viewtest.NewRegistry())
	h.deaf.Store(true)
	// The server's read under way takes this ping; it reads nothing after.
	require.NoError(t, hd.Conn().Ping(t.Context(), nil))
	// The first calls fill what the pipe and the server's reader hold;
	// the writes of the next wait.
	cs := hd.Conn()
	for i := range 3 {
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "one"})
			done <- err
		}()
		select {
		case err := <-done:
			require.Error(t, err)
		case <-time.After(mcptest.Within(t, mcptest.EventWithin)):
			t.Fatalf("call %d to an upstream that reads nothing did not end", i)
		}
	}
	mcptest.WaitFor(t, mcptest.EventWithin, func() bool { return e.logs.HasLine("server=deaf", "reads nothing") }, e.logs.String,
		"the closed connection is logged, naming the server and why")
}

// TestStdioServerWithoutTimeoutMayStallItsInput: a stdio server with no
// call timeout that reads nothing of its input for ten times the connect
// timeout, its writes waiting meanwhile (a single-threaded server working
// on a long call), keeps its connection, and the calls waiting on it are
// answered once it reads again. Until then the connect timeout bounded
// these writes, and ended every call on the connection.
func TestStdioServerWithoutTimeoutMayStallItsInput(t *testing.T) {
	const connect = 100 * time.Millisecond
	h := newHostile(t, "slow", allCaps)
	h.addTool("one")
	e := newHostileEnv(t, pool.Options{Timeout: connect}, []*hostile{h})
	hd := e.mustAcquire(pool.Spec{Name: "slow", Command: "/bin/slow", Pooled: true}, "s1", viewtest.NewRegistry())
	h.deaf.Store(true)
	cs := hd.Conn()
	// The server's read under way takes this ping; it reads nothing after.
	require.NoError(t, cs.Ping(t.Context(), nil))
	const calls = 3
	done := make(chan error, calls)
	for range calls {
		go func() {
			_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "one"})
			done <- err
		}()
	}
	select { // the claim: ten times the connect timeout pass with the calls waiting
	case err := <-done:
		t.Fatalf("a call ended while the server read nothing: %v\nlogs:\n%s", err, e.logs.String())
	case <-time.After(10 * connect):
	}
	h.deaf.Store(false)
	close(h.hears)
	for i := range calls {
		select {
		case err := <-done:
			require.NoError(t, err, "call %d, once the server reads again", i)
		case <-time.After(mcptest.Within(t, mcptest.EventWithin)):
			t.Fatalf("call %d not answered once the server reads again\n%s", i, mcptest.Stacks())
		}
	}
	assert.False(t, e.logs.HasLine("server=slow", "reads nothing"), "logs:\n%s", e.logs.String())
}
