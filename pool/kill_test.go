package pool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

// callTimeout bounds each tool call of TestKillUpstream: a call still
// running when it expires is a call that hung.
const callTimeout = 15 * time.Second

// callStats counts the outcomes of the forwarded calls.
type callStats struct {
	started, results, errs, hung, skipped atomic.Int64
	// inFlight is the number of calls started and not yet returned.
	inFlight atomic.Int64
}

// TestKillUpstream starts a real stdio upstream (this test binary serving
// the demo server), kills it with SIGKILL twenty times while several
// goroutines forward calls through three sessions' handles, and checks:
// every call returned a result or an error, none hung; the pool restarted
// the upstream after each kill (a later call reaches a new process); each
// session's registry holds its projection exactly once and the entry its
// three views; and after Pool.Close no upstream process and no goroutine
// of the test remain.
func TestKillUpstream(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills real upstream processes")
	}
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	exe, err := os.Executable()
	require.NoError(t, err)
	spec := pool.Spec{
		Name:    "demo",
		Command: exe,
		Args:    []string{"-test.run=^$"},
		Env:     map[string]string{demoserver.ChildEnv: "1"},
		Timeout: 30 * time.Second,
		Pooled:  true,
	}
	const kills = 20
	counters := &opcount.Counters{}
	p := pool.New(pool.Options{Counters: counters, Logger: quiet, CrashRestarts: 2 * kills})
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = p.Close(context.Background())
		}
	})

	sessions := []struct{ name, settings string }{
		{"s1", `{}`},
		{"s2", `{"includeTools":["echo","pid"],"trust":true}`},
		{"s3", `{"excludeTools":["write_note","add_tool"],"alwaysLoadTools":true}`},
	}
	ctx := context.Background()
	handles := make([]*pool.Handle, len(sessions))
	regs := make([]*viewtest.Registry, len(sessions))
	for i, s := range sessions {
		regs[i] = viewtest.NewRegistry()
		v := view.New(view.Config{Session: s.name, Server: spec.Name, Registry: regs[i], Counters: counters,
			Policy: metakey.Reference{}, Settings: json.RawMessage(s.settings), Logger: quiet})
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		handles[i], err = p.Acquire(actx, spec, v)
		cancel()
		require.NoError(t, err)
	}
	entry := handles[0].Entry()

	// Callers forward echo calls through the handles until stopped.
	var (
		stats callStats
		stop  atomic.Bool
		wg    sync.WaitGroup
	)
	const callers = 4
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := handles[g%len(handles)]
			for i := 0; !stop.Load(); i++ {
				cs := h.Conn()
				if cs == nil { // restarting: no session to call
					stats.skipped.Add(1)
					time.Sleep(2 * time.Millisecond) // a hammer's pause while the entry restarts: nothing to wait for
					continue
				}
				text := fmt.Sprintf("caller %d call %d %s", g, i, strings.Repeat("x", 4<<10))
				if !forward(t, cs, text, &stats) {
					time.Sleep(time.Millisecond) // a dead session fails fast: do not spin
				}
			}
		}()
	}
	t.Cleanup(func() { // on an early failure too
		stop.Store(true)
		wg.Wait()
	})

	pids := map[int]bool{}
	last := 0
	for k := range kills {
		// The pool has recovered: a call reaches a new upstream process,
		// and once the restart's fan-out is done each session shows its
		// projection of the new snapshot.
		pid := upstreamPID(t, handles[k%len(handles)], last)
		pids[pid] = true
		if k > 0 {
			requireProjections(t, entry, handles, regs)
		}
		// Kill it while calls are in flight.
		require.Eventually(t, func() bool { return stats.inFlight.Load() > 0 }, 10*time.Second, time.Millisecond)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL), "kill #%d", k+1)
		last = pid
	}
	final := upstreamPID(t, handles[0], last)
	pids[final] = true
	stop.Store(true)
	wg.Wait()

	t.Logf("%d calls: %d results, %d errors, %d hung; %d rounds found no session; %d upstream processes",
		stats.started.Load(), stats.results.Load(), stats.errs.Load(), stats.hung.Load(), stats.skipped.Load(), len(pids))
	assert.Zero(t, stats.hung.Load(), "calls still running after %v", callTimeout)
	assert.Equal(t, stats.started.Load(), stats.results.Load()+stats.errs.Load()+stats.hung.Load(), "every call returned")
	assert.Positive(t, stats.errs.Load(), "calls in flight when the upstream died got errors")
	assert.Positive(t, stats.results.Load())
	assert.Len(t, pids, kills+1, "each kill was followed by a new upstream process")

	// One entry, still the same, with the three views attached once each,
	// each registry holding its projection of the current snapshot.
	requireProjections(t, entry, handles, regs)
	infos := p.Entries()
	require.Len(t, infos, 1, "entries: %+v", infos)
	assert.Equal(t, entry.ID(), infos[0].ID)
	assert.Equal(t, pool.StateReady, infos[0].State)
	assert.Equal(t, len(handles), infos[0].Views, "views attached")
	assert.Equal(t, len(handles), infos[0].Refs, "references")
	c := counters.Snapshot()
	assert.GreaterOrEqual(t, c.Connects, int64(kills+1))

	// Close: no upstream process and no goroutine remain.
	closeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	require.NoError(t, p.Close(closeCtx))
	cancel()
	closed = true
	for _, h := range handles {
		require.NoError(t, h.Release(ctx))
	}
	for pid := range pids {
		require.Eventually(t, func() bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }, 10*time.Second, 10*time.Millisecond,
			"upstream process %d is still there (running or not reaped)", pid)
	}
}

// forward makes one echo call on cs, records its outcome and reports
// whether it got a result.
func forward(t *testing.T, cs *mcp.ClientSession, text string, stats *callStats) bool {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	stats.started.Add(1)
	stats.inFlight.Add(1)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
	stats.inFlight.Add(-1)
	switch {
	case ctx.Err() != nil:
		stats.hung.Add(1)
	case err != nil:
		stats.errs.Add(1)
	case res.IsError || len(res.Content) != 1:
		stats.errs.Add(1)
		t.Errorf("echo: unexpected result %+v", res)
	default:
		stats.results.Add(1)
		got, ok := res.Content[0].(*mcp.TextContent)
		if !ok || got.Text != text {
			t.Errorf("echo answered another call: %+v", res.Content[0])
		}
		return true
	}
	return false
}

// upstreamPID waits until a call through h reaches an upstream process
// other than not and returns its pid.
func upstreamPID(t *testing.T, h *pool.Handle, not int) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		cs := h.Conn()
		if cs == nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "pid"})
		if err != nil || res.IsError || len(res.Content) != 1 {
			return false
		}
		text, ok := res.Content[0].(*mcp.TextContent)
		if !ok {
			return false
		}
		pid, err = strconv.Atoi(text.Text)
		return err == nil && pid != not
	}, 30*time.Second, 5*time.Millisecond, "the pool did not recover from killing %d", not)
	return pid
}

// requireProjections waits for the entry to settle, then checks that each
// handle's registry holds exactly its projection of the entry's snapshot,
// registered once (no registry call carried a name twice).
func requireProjections(t *testing.T, entry *pool.Entry, handles []*pool.Handle, regs []*viewtest.Registry) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, entry.Settle(ctx))
	for i, h := range handles {
		v := view.Of(h)
		require.NoError(t, v.Err(), v.Session())
		requireProjection(t, regs[i], v.Server(), string(v.Settings()), entry.Snapshot())
		for _, op := range regs[i].Ops() {
			require.Equal(t, v.Server(), op.Server, "%s: %v", v.Session(), op)
			require.Len(t, uniq(op.Keys), len(op.Keys), "%s: a name twice in one call: %v", v.Session(), op)
		}
	}
}

func uniq(keys []string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}
