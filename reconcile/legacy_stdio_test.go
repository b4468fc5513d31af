package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/session"
	"github.com/wasmhost/wasmhost/view"
)

// A stdioRig is stdio mode's wiring in process: a pool and a Reconciler
// serving session alice, whose registry is a session.Endpoint that
// forwards through the session's handles (as the daemon's does), and a
// client of that endpoint. Every dial makes a new upstream server,
// numbered from 1, whose tools record the calls that reach them by the
// tag the call was sent with (see call).
type stdioRig struct {
	t      *testing.T
	leg    *oneSession
	pool   *pool.Pool
	rec    *reconcile.Reconciler
	ep     *session.Endpoint
	client *mcp.ClientSession

	mu      sync.Mutex
	dials   int
	conns   map[int]pipeEnd     // the server end of each dial's pipe
	reached map[string][]string // a call's tag to the tools it reached
	// phase is held (read) by each call for as long as it lasts, and
	// (write) by setTag: no call straddles a change of tag.
	phase   sync.RWMutex
	current string
	hang    chan struct{} // the "hang" tool waits for it (or its call's end)
	started chan string   // the "hang" tool says it started
}

// A pipeEnd is the server end of a dial's pipe.
type pipeEnd interface{ Close() error }

func newStdioRig(t *testing.T) *stdioRig {
	t.Helper()
	r := &stdioRig{t: t, conns: make(map[int]pipeEnd), reached: make(map[string][]string),
		hang: make(chan struct{}), started: make(chan string, 16)}
	r.setTag("")
	r.ep = session.New(session.Options{
		Name:   "alice",
		Logger: quiet,
		Upstream: func(server string) session.Target {
			cs, timeout, subs := r.leg.Upstream(server)
			return session.Target{Conn: cs, Timeout: timeout, Subscriptions: subs}
		},
	})
	e := &env{t: t, counters: &opcount.Counters{}}
	r.pool = pool.New(pool.Options{Dialer: r.dial, Counters: e.counters, Logger: quiet})
	r.rec = reconcile.New(reconcile.Options{Pool: r.pool, Policy: ref, Counters: e.counters, Logger: quiet,
		Registry: func(string) view.Registry { return r.ep }})
	e.pool, e.rec = r.pool, r.rec
	r.leg = &oneSession{e: e, session: "alice"}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, r.rec.Close(ctx))
		require.NoError(t, r.pool.Close(ctx))
	})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := r.ep.Server().Connect(t.Context(), st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	cl := mcp.NewClient(&mcp.Implementation{Name: "rig", Version: "1"}, &mcp.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	r.client, err = cl.Connect(t.Context(), ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.client.Close() })
	return r
}

// setTag tags the calls sent from now on, once the calls under way are
// answered.
func (r *stdioRig) setTag(tag string) {
	r.phase.Lock()
	defer r.phase.Unlock()
	r.current = tag
}

// dial makes dial number n: a new server with tools "read", "wipe" and
// "hang", each recording its calls under their tag.
func (r *stdioRig) dial(ctx context.Context, _ pool.Spec) (mcp.Transport, error) {
	r.mu.Lock()
	r.dials++
	n := r.dials
	r.mu.Unlock()
	srv := mcp.NewServer(&mcp.Implementation{Name: "fs", Version: "1"}, &mcp.ServerOptions{Logger: quiet})
	for _, name := range []string{"read", "wipe", "hang"} {
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct{ Tag string }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			r.mu.Lock()
			r.reached[args.Tag] = append(r.reached[args.Tag], name)
			r.mu.Unlock()
			if name == "hang" {
				r.started <- name
				select {
				case <-r.hang:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
		})
	}
	tr, conn, err := mcptest.Connect(ctx, srv)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.conns[n] = conn
	r.mu.Unlock()
	return tr, nil
}

// crash breaks the pipe of the latest dial, as if its upstream crashed.
func (r *stdioRig) crash() {
	r.mu.Lock()
	conn := r.conns[r.dials]
	r.mu.Unlock()
	require.NoError(r.t, conn.Close())
}

// reachedOn returns how many calls of tool tagged tag reached an upstream.
func (r *stdioRig) reachedOn(tag, tool string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, got := range r.reached[tag] {
		if got == tool {
			n++
		}
	}
	return n
}

// totalReached returns how many calls of tool reached any upstream.
func (r *stdioRig) totalReached(tool string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, tools := range r.reached {
		for _, got := range tools {
			if got == tool {
				n++
			}
		}
	}
	return n
}

// call calls the session's tool, with the current tag, and reports
// whether it was answered without an error.
func (r *stdioRig) call(ctx context.Context, tool string) (bool, error) {
	r.phase.RLock()
	defer r.phase.RUnlock()
	res, err := r.client.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"tag": r.current}})
	if err != nil {
		return false, err
	}
	return !res.IsError, nil
}

func (r *stdioRig) apply(cfg *config.Config) {
	r.t.Helper()
	_, err := r.leg.Apply(context.Background(), cfg, "alice")
	require.NoError(r.t, err)
}

func fsConfig(t *testing.T, settings string) *config.Config {
	return newCfg().server("fs").session("alice", "overrides", override("fs", settings)).build(t)
}

// TestLegacyHideIsEnforcedAtOnce: in stdio mode's wiring, once an Apply
// that hides a tool has returned, a call of it is refused and reaches no
// upstream, including when the upstream was down (crashed, withdrawn) as
// the Apply came, and once SetPolicy with a policy that hides it has
// returned. Calls hammering the tool meanwhile never reach an upstream when
// sent after an Apply that hid it returned (on the legacy reconciler,
// which reconnected for each change of settings: never a connection made
// for settings that hide it).
func TestLegacyHideIsEnforcedAtOnce(t *testing.T) {
	t.Parallel()
	r := newStdioRig(t)
	show, hide := fsConfig(t, `{}`), fsConfig(t, `{"excludeTools":["wipe"]}`)

	r.setTag("show")
	r.apply(show)
	ok, err := r.call(t.Context(), "fs__wipe")
	require.NoError(t, err)
	require.True(t, ok)

	// Hidden while the upstream is down.
	r.crash()
	require.Eventually(t, func() bool { return r.leg.Session("fs") == nil }, mcptest.EventWithin, 2*time.Millisecond)
	before := r.totalReached("wipe")
	r.setTag("hide")
	r.apply(hide)
	_, err = r.call(t.Context(), "fs__wipe")
	require.Error(t, err, "hidden: unknown tool")
	assert.Equal(t, before, r.totalReached("wipe"), "the call reached an upstream")
	ok, err = r.call(t.Context(), "fs__read")
	require.NoError(t, err)
	assert.True(t, ok, "the reconnected server serves what it shows")

	// Hidden by a policy swap.
	r.setTag("show")
	r.apply(show)
	_, err = r.leg.SetPolicy(t.Context(), altPolicy{}) // hides tools starting with "w"
	require.NoError(t, err)
	before = r.totalReached("wipe")
	_, err = r.call(t.Context(), "fs__wipe")
	require.Error(t, err, "hidden by the new policy")
	assert.Equal(t, before, r.totalReached("wipe"))
	_, err = r.leg.SetPolicy(t.Context(), ref)
	require.NoError(t, err)

	// Hammered while the settings go back and forth.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = r.call(context.Background(), "fs__wipe")
			}
		}()
	}
	for i := range 30 {
		if i%2 == 0 {
			r.apply(hide)
			r.setTag("hide")
			before := r.reachedOn("hide", "wipe")
			_, err := r.call(t.Context(), "fs__wipe")
			require.Error(t, err, "round %d: a call right after the Apply that hid it", i)
			require.Equal(t, before, r.reachedOn("hide", "wipe"))
		} else {
			r.setTag("show")
			r.apply(show)
		}
	}
	close(stop)
	wg.Wait()
	assert.Zero(t, r.reachedOn("hide", "wipe"), "calls sent once the tool was hidden reached an upstream")
	assert.NotZero(t, r.reachedOn("show", "wipe"), "the hammer reached the tool where it was shown")
}

// TestLegacyReconnectEndsCallsUnderWay: closing a connection (a Restart,
// an Apply that drops the server, a stop) ends the calls under way on it,
// which fail, rather than waiting for an upstream that may never answer
// them; the reconciler is not held up meanwhile.
//
// On the one path, an Apply releases a connection gracefully: the release
// waits for the calls under way, as long as the server's "timeout" lets
// them run (the server here has one, 1 s; without one it would wait for
// ever). The legacy reconciler's Apply closed the connection at once on
// any change of metadata, which on the one path refreshes the view in
// place (TestLegacyReconnectKeys). A stop is the daemon's: the session's
// Drain cuts the calls short, then the reconciler and the pool close.
func TestLegacyReconnectEndsCallsUnderWay(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits on a legacy HTTP stream's connect bound or reconnect; run without -short")
	}
	for _, tc := range []struct {
		name    string
		timeout int // the server's "timeout", ms
		do      func(r *stdioRig) error
	}{
		{"restart", 0, func(r *stdioRig) error { return r.leg.Restart(context.Background(), "fs") }},
		{"apply", 1000, func(r *stdioRig) error {
			c := newCfg().server("fs", "disabled", true, "timeout", 1000).session("alice").build(r.t)
			_, err := r.leg.Apply(context.Background(), c, "alice")
			return err
		}},
		{"close", 0, func(r *stdioRig) error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := r.ep.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("drain: %w, want the call cut short", err)
			}
			ctx, cancel = context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := r.rec.Close(ctx); err != nil {
				return err
			}
			return r.pool.Close(ctx)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newStdioRig(t)
			defer close(r.hang)
			r.apply(newCfg().server("fs", "timeout", tc.timeout).session("alice").build(t))
			answered := make(chan error, 1)
			go func() {
				ok, err := r.call(context.Background(), "fs__hang")
				if err == nil && !ok {
					err = assert.AnError // an isError result
				}
				answered <- err
			}()
			select {
			case <-r.started:
			case <-time.After(mcptest.Within(t, mcptest.EventWithin)):
				t.Fatal("the call did not reach the upstream")
			}
			done := make(chan error, 1)
			go func() { done <- tc.do(r) }()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(mcptest.Within(t, mcptest.EventWithin)):
				t.Fatalf("%s waited for the call under way, which the upstream never answers", tc.name)
			}
			select {
			case err := <-answered:
				assert.Error(t, err, "the call under way failed with its connection")
			case <-time.After(mcptest.Within(t, mcptest.EventWithin)):
				t.Fatal("the call under way got no answer")
			}
		})
	}
}

// TestLegacyCloseNotHeldByStuckRefresh: an upstream that announces a list
// change and then never answers the rediscovery does not hold Close up
// beyond its ctx (stdio mode closes within procgroup.MaxClose).
func TestLegacyCloseNotHeldByStuckRefresh(t *testing.T) {
	t.Parallel()
	up := newUpstream("fs", "read")
	var stuck atomic.Bool
	listing := make(chan struct{}, 1)
	up.Server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if strings.HasSuffix(method, "/list") && stuck.Load() {
				select {
				case listing <- struct{}{}:
				default:
				}
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return next(ctx, method, req)
		}
	})
	e := newLegacyEnv(t, up)
	_, err := e.leg.Apply(t.Context(), newCfg().server("fs", "timeout", 20_000).session("alice").build(t), "alice")
	require.NoError(t, err)
	stuck.Store(true)
	up.AddTool("late") // tools/list_changed: a rediscovery that hangs
	select {
	case <-listing:
	case <-time.After(mcptest.Within(t, mcptest.EventWithin)):
		t.Fatal("no rediscovery")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_ = e.rec.Close(ctx)
	_ = e.pool.Close(ctx)
	assert.Less(t, time.Since(start), 5*time.Second, "Close waited for the stuck rediscovery")
}
