package reconcile_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/view"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

// A switchRig reconciles two sessions ("alice", "bob") onto a real stdio
// upstream: /bin/sh running a script that starts the demo server (this
// test binary, see TestMain), so that the server's args are a path, as
// with "node server.js".
type switchRig struct {
	t    *testing.T
	rec  *reconcile.Reconciler
	pool *pool.Pool
	regs map[string]*viewtest.Registry
	dir  string
}

func newSwitchRig(t *testing.T) *switchRig {
	t.Helper()
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	r := &switchRig{t: t, dir: t.TempDir(), regs: map[string]*viewtest.Registry{"alice": viewtest.NewRegistry(), "bob": viewtest.NewRegistry()}}
	counters := &opcount.Counters{}
	r.pool = pool.New(pool.Options{Counters: counters, Logger: quiet, Timeout: time.Minute})
	r.rec = reconcile.New(reconcile.Options{
		Pool: r.pool, Policy: metakey.Reference{}, Counters: counters, Logger: quiet,
		Registry: func(s string) view.Registry { return r.regs[s] },
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, r.rec.Close(ctx))
		require.NoError(t, r.pool.Close(ctx))
	})
	return r
}

// script writes a script starting the demo server and returns its path.
func (r *switchRig) script(name string) string {
	path := filepath.Join(r.dir, name)
	require.NoError(r.t, os.WriteFile(path, []byte("#!/bin/sh\nexec '"+os.Args[0]+"'\n"), 0o755))
	return path
}

// config has the server "demo" run /bin/sh with script; bob's settings
// for it are bob's.
func (r *switchRig) config(script, bob string) *config.Config {
	return newCfg().
		server("demo", "command", "/bin/sh", "args", []string{script}, "env", map[string]string{demoserver.ChildEnv: "1"}).
		session("alice").
		session("bob", "overrides", override("demo", bob)).
		build(r.t)
}

// pid calls the demo server's pid tool through session's binding, as a
// session endpoint forwards a call: the handle and its connection are
// looked up at call time.
func (r *switchRig) pid(session string) int {
	r.t.Helper()
	n, err := strconv.Atoi(callText(r.t, r.rec.Handle(session, "demo").Conn(), "pid", nil))
	require.NoError(r.t, err)
	return n
}

// processGone reports whether no process has pid (it ended and was
// reaped).
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// TestTransportChangeToMissingArgsKeepsServing: a reload that changes the
// server's args to a path that does not exist reports the failure for that
// server, and both sessions keep every tool and call it on the same
// process; the bob's settings changed in the same reload apply all the
// same. A later reload back to the running args clears the failure
// without a reconnect.
func TestTransportChangeToMissingArgsKeepsServing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newSwitchRig(t)
	good := r.script("server.sh")
	_, err := r.rec.Apply(ctx, r.config(good, `{}`))
	require.NoError(t, err)
	pid := r.pid("alice")
	require.Equal(t, pid, r.pid("bob"))
	all := []string{"add", "add_tool", "echo", "pid", "read_note", "write_note"}
	require.Equal(t, all, r.regs["alice"].ToolNames("demo"))
	require.Equal(t, all, r.regs["bob"].ToolNames("demo"))
	running := r.rec.Handle("alice", "demo").Identity()

	missing := filepath.Join(r.dir, "no-such-dir", "server.sh")
	bad := r.config(missing, `{"excludeTools":["add"]}`)
	sum, err := r.rec.Apply(ctx, bad)
	require.Error(t, err)
	require.ErrorIs(t, err, reconcile.ErrTransportNotChanged)
	t.Log(sum.String())
	require.Len(t, sum.TransportChanges, 1)
	tc := sum.TransportChanges[0]
	assert.Equal(t, "demo", tc.Server)
	assert.Equal(t, 0, tc.Moved)
	assert.Equal(t, 2, tc.Kept)
	assert.Contains(t, sum.String(), `server "demo": transport not changed, 2 sessions keep the running connection`)
	require.Len(t, sum.Errors, 2)
	for _, be := range sum.Errors {
		assert.Equal(t, "demo", be.Server)
	}

	// Both sessions keep every tool (bob less the one his new settings
	// hide) and call them on the same process.
	assert.Equal(t, all, r.regs["alice"].ToolNames("demo"))
	assert.Equal(t, []string{"add_tool", "echo", "pid", "read_note", "write_note"}, r.regs["bob"].ToolNames("demo"), "the settings changed in the same reload apply")
	assert.Equal(t, pid, r.pid("alice"))
	assert.Equal(t, pid, r.pid("bob"))
	assert.Equal(t, "still here", callText(t, r.rec.Handle("bob", "demo").Conn(), "echo", map[string]any{"text": "still here"}))
	for _, s := range []string{"alice", "bob"} {
		b := r.rec.Bindings(s)
		require.Len(t, b, 1)
		assert.Equal(t, running, b[0].Identity, "the running transport")
		assert.Equal(t, reconcile.SpecOf(bad.Servers["demo"]).Fingerprint(), b[0].Desired, "the desired one")
		assert.Contains(t, b[0].SwitchError, "transport change not made")
		assert.False(t, b[0].Pending)
		assert.Empty(t, b[0].Error, "the binding is healthy")
		assert.Empty(t, r.rec.Unavailable(s, "demo"))
	}

	// If the running process dies meanwhile, the supervisor's Repair
	// brings the running transport back, not the one that failed; the
	// failed change stays on record.
	h := r.rec.Handle("alice", "demo")
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.Eventually(t, func() bool { return h.Entry().State() == pool.StateFailed }, time.Minute, 10*time.Millisecond)
	for _, s := range []string{"alice", "bob"} {
		repaired, err := r.rec.Repair(ctx, s, "demo")
		require.NoError(t, err)
		assert.True(t, repaired, s)
		b := r.rec.Bindings(s)[0]
		assert.Equal(t, running, b.Identity, "%s: the running transport is reconnected", s)
		assert.Contains(t, b.SwitchError, "transport change not made", s)
	}
	assert.NotEqual(t, pid, r.pid("alice"))
	pid = r.pid("alice")
	assert.Equal(t, pid, r.pid("bob"))
	assert.Equal(t, all, r.regs["alice"].ToolNames("demo"))

	// The next reload tries again (and fails again) ...
	sum, err = r.rec.Apply(ctx, bad)
	require.ErrorIs(t, err, reconcile.ErrTransportNotChanged)
	require.Len(t, sum.TransportChanges, 1)
	assert.Equal(t, pid, r.pid("alice"))

	// ... and one back to the running args settles it, on the same process.
	sum, err = r.rec.Apply(ctx, r.config(good, `{"excludeTools":["add"]}`))
	require.NoError(t, err)
	assert.Zero(t, sum.TransportsStarted)
	assert.Empty(t, sum.TransportChanges)
	for _, s := range []string{"alice", "bob"} {
		b := r.rec.Bindings(s)
		assert.Empty(t, b[0].SwitchError)
		assert.Equal(t, b[0].Identity, b[0].Desired)
		assert.Equal(t, pid, r.pid(s))
	}
	assert.Equal(t, all, r.regs["alice"].ToolNames("demo"))
}

// TestTransportChangeSwitchesWithoutGap: a good transport change starts
// the new process, moves both sessions onto it and ends the old one; calls
// made all along, during the switch too, succeed, and no session is told
// of a list change, since what they see is the same.
func TestTransportChangeSwitchesWithoutGap(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newSwitchRig(t)
	_, err := r.rec.Apply(ctx, r.config(r.script("a.sh"), `{"excludeTools":["add"]}`))
	require.NoError(t, err)
	oldPID := r.pid("alice")
	aliceOps, bobOps := r.regs["alice"].OpCount(), r.regs["bob"].OpCount()

	// Callers forward calls as a session endpoint does, until stopped.
	var (
		stop      atomic.Bool
		switching atomic.Bool
		during    atomic.Int64
		wg        sync.WaitGroup
		mu        sync.Mutex
		failures  []string
		failed    atomic.Int64
	)
	fail := func(msg string) {
		if failed.Add(1) <= 5 {
			mu.Lock()
			failures = append(failures, msg)
			mu.Unlock()
		}
	}
	for _, s := range []string{"alice", "bob"} {
		wg.Go(func() {
			for !stop.Load() {
				within := switching.Load()
				h := r.rec.Handle(s, "demo")
				var cs *mcp.ClientSession
				if h != nil {
					cs = h.Conn()
				}
				if cs == nil {
					fail(s + ": no connection")
					continue
				}
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": s}})
				if err == nil && res.IsError {
					err = errors.New("tool error")
				}
				if err != nil {
					fail(s + ": " + err.Error())
				}
				if within && switching.Load() {
					during.Add(1)
				}
			}
		})
	}
	// Let the callers get going before the reload.
	require.Eventually(t, func() bool { return r.rec.Handle("bob", "demo") != nil }, time.Minute, time.Millisecond)

	switching.Store(true)
	sum, err := r.rec.Apply(ctx, r.config(r.script("b.sh"), `{"excludeTools":["add"]}`))
	switching.Store(false)
	stop.Store(true)
	wg.Wait()
	require.NoError(t, err)
	assert.Zero(t, failed.Load(), "failed calls during the switch; the first ones: %v", failures)
	t.Logf("%d calls completed during the switch; %s", during.Load(), sum)
	assert.Equal(t, []reconcile.TransportChange{{Server: "demo", Moved: 2}}, sum.TransportChanges)
	assert.Equal(t, 1, sum.TransportsStarted)
	assert.Empty(t, sum.Changed, "no session is told of a change: they see the same")
	assert.Equal(t, aliceOps, r.regs["alice"].OpCount())
	assert.Equal(t, bobOps, r.regs["bob"].OpCount())

	newPID := r.pid("alice")
	assert.NotEqual(t, oldPID, newPID, "the new process serves")
	assert.Equal(t, newPID, r.pid("bob"))
	require.Eventually(t, func() bool { return processGone(oldPID) }, time.Minute, 10*time.Millisecond, "the old process ended")
	for _, s := range []string{"alice", "bob"} {
		b := r.rec.Bindings(s)
		assert.Equal(t, b[0].Desired, b[0].Identity)
		assert.Empty(t, b[0].SwitchError)
	}
	assert.Len(t, r.pool.Entries(), 1)
	assert.Equal(t, []string{"add_tool", "echo", "pid", "read_note", "write_note"}, r.regs["bob"].ToolNames("demo"))
}

// TestLegacyTransportChangeIsMadeBeforeBreak: the single-session mode
// changes a transport the same way: a change to args that do not exist is
// reported and the running process keeps serving every tool (with the
// settings of the same Apply applied); a good change moves the session to
// the new process and ends the old one, with no change to what the
// session sees.
func TestLegacyTransportChangeIsMadeBeforeBreak(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := newSwitchRig(t) // for its scripts and configs
	reg := r.regs["bob"]
	leg := newOneSession(t, "bob", pool.DefaultDialer, reg)
	pid := func() int {
		t.Helper()
		n, err := strconv.Atoi(callText(t, leg.Session("demo"), "pid", nil))
		require.NoError(t, err)
		return n
	}
	good := r.script("a.sh")
	_, err := leg.Apply(ctx, r.config(good, `{}`), "bob")
	require.NoError(t, err)
	oldPID := pid()
	all := []string{"add", "add_tool", "echo", "pid", "read_note", "write_note"}
	require.Equal(t, all, reg.ToolNames("demo"))
	running := identity(leg.State().Sessions[0].Servers[0])

	bad := r.config(filepath.Join(r.dir, "missing", "server.sh"), `{"excludeTools":["add"]}`)
	sum, err := leg.Apply(ctx, bad, "bob")
	require.ErrorIs(t, err, reconcile.ErrTransportNotChanged)
	require.Len(t, sum.TransportChanges, 1)
	assert.Equal(t, 1, sum.TransportChanges[0].Kept)
	assert.Equal(t, oldPID, pid(), "the running process serves")
	assert.Equal(t, []string{"add_tool", "echo", "pid", "read_note", "write_note"}, reg.ToolNames("demo"), "the new settings apply")
	b := leg.State().Sessions[0].Servers[0]
	assert.NotEqual(t, running, identity(b), "re-keyed by the new settings")
	assert.NotEqual(t, b.Identity, b.Desired)
	assert.Contains(t, b.SwitchError, "transport change not made")
	assert.Equal(t, "ready", b.EntryState)

	n := reg.OpCount()
	sum, err = leg.Apply(ctx, r.config(r.script("b.sh"), `{"excludeTools":["add"]}`), "bob")
	require.NoError(t, err)
	assert.Equal(t, []reconcile.TransportChange{{Server: "demo", Moved: 1}}, sum.TransportChanges)
	assert.Equal(t, n, reg.OpCount(), "the session sees the same: no registry call")
	newPID := pid()
	assert.NotEqual(t, oldPID, newPID)
	require.Eventually(t, func() bool { return processGone(oldPID) }, time.Minute, 10*time.Millisecond, "the old process ended")
	b = leg.State().Sessions[0].Servers[0]
	assert.Equal(t, b.Desired, b.Identity)
	assert.Empty(t, b.SwitchError)
}

// TestTransportChangeWhileOthersChange: while a reload makes the new
// connection of one server, that server's sessions keep calling the
// running one and see it as pending, the same reload's changes to other
// servers are already in effect, and a reload asked for meanwhile waits
// for it and then supersedes it: here it moves the server on to yet
// another transport, and the one after removes it; no connection is left
// behind.
func TestTransportChangeWhileOthersChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read", "write"), newUpstream("gh", "issues", "pulls"))
	base := func(fsArgs []string, ghAlice string) *cfg {
		return newCfg().server("fs", "args", fsArgs).server("gh").
			session("alice", "overrides", override("gh", ghAlice)).session("bob")
	}
	e.apply(base([]string{"/0"}, `{}`).build(t))
	old := e.handle("alice", "fs")

	gate := make(chan struct{})
	e.mu.Lock()
	e.gates = map[string]chan struct{}{"fs": gate}
	e.mu.Unlock()
	type result struct {
		sum reconcile.Summary
		err error
	}
	first := make(chan result, 1)
	go func() {
		sum, err := e.rec.Apply(context.Background(), base([]string{"/a"}, `{"excludeTools":["pulls"]}`).build(t))
		first <- result{sum, err}
	}()
	pending := func() bool {
		for _, s := range []string{"alice", "bob"} {
			for _, b := range e.rec.Bindings(s) {
				if b.Server == "fs" && !b.Pending {
					return false
				}
			}
		}
		return true
	}
	require.Eventually(t, pending, time.Minute, time.Millisecond, "fs shows as pending while its new connection is made")
	require.Eventually(t, func() bool { return slices.Equal(e.reg("alice").ToolNames("gh"), []string{"issues"}) }, time.Minute, time.Millisecond,
		"another server's settings change of the same reload applies meanwhile")
	for _, s := range []string{"alice", "bob"} {
		h := e.handle(s, "fs")
		assert.Same(t, old.Entry(), h.Entry(), "%s: the running connection serves", s)
		assert.Equal(t, "fs/read", callText(t, h.Conn(), "read", nil))
		assert.Equal(t, []string{"read", "write"}, e.reg(s).ToolNames("fs"))
	}

	second := make(chan result, 1)
	go func() {
		sum, err := e.rec.Apply(context.Background(), base([]string{"/b"}, `{"excludeTools":["pulls"]}`).build(t))
		second <- result{sum, err}
	}()
	close(gate)
	r1 := <-first
	require.NoError(t, r1.err)
	assert.Equal(t, []reconcile.TransportChange{{Server: "fs", Moved: 2}}, r1.sum.TransportChanges)
	r2 := <-second
	require.NoError(t, r2.err)
	assert.Equal(t, []reconcile.TransportChange{{Server: "fs", Moved: 2}}, r2.sum.TransportChanges, "the later reload moves it on")
	want := reconcile.SpecOf(base([]string{"/b"}, `{}`).build(t).Servers["fs"]).Fingerprint()
	for _, s := range []string{"alice", "bob"} {
		h := e.handle(s, "fs")
		assert.Equal(t, want, h.Identity(), s)
		assert.Equal(t, "fs/read", callText(t, h.Conn(), "read", nil))
		assert.Equal(t, []string{"read", "write"}, e.reg(s).ToolNames("fs"))
	}
	ids := func() []string {
		var out []string
		for _, info := range e.pool.Entries() {
			out = append(out, info.Server+" "+info.State.String())
		}
		return out
	}
	assert.Equal(t, []string{"fs ready", "gh ready"}, ids(), "one connection per server: the intermediate one is closed")

	// A reload removing the server releases it everywhere.
	sum := e.apply(newCfg().server("gh").session("alice", "overrides", override("gh", `{"excludeTools":["pulls"]}`)).session("bob").build(t))
	assert.Equal(t, 2, sum.Released)
	assert.Equal(t, []string{"gh ready"}, ids())
	assert.Empty(t, e.reg("alice").ToolNames("fs"))
	e.requireRefsMatch()
}

// TestTransportChangeFailsWhileRemoved: a reload removing a server whose
// transport change is being made waits for it to end (failed here: the
// new connection cannot be made), then removes it; nothing is left.
func TestTransportChangeFailsWhileRemoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newUpstream("fs", "read"), newUpstream("gh", "issues"))
	e.apply(newCfg().server("fs").server("gh").session("alice").build(t))
	gate := make(chan struct{})
	e.mu.Lock()
	e.gates = map[string]chan struct{}{"fs": gate}
	e.failing["fs"] = errors.New("no such file")
	e.mu.Unlock()
	first := make(chan error, 1)
	go func() {
		_, err := e.rec.Apply(context.Background(), newCfg().server("fs", "args", []string{"/missing"}).server("gh").session("alice").build(t))
		first <- err
	}()
	require.Eventually(t, func() bool {
		b := e.rec.Bindings("alice")
		return len(b) == 2 && b[0].Server == "fs" && b[0].Pending
	}, time.Minute, time.Millisecond)
	second := make(chan error, 1)
	go func() {
		_, err := e.rec.Apply(context.Background(), newCfg().server("gh").session("alice").build(t))
		second <- err
	}()
	close(gate)
	require.ErrorIs(t, <-first, reconcile.ErrTransportNotChanged)
	require.NoError(t, <-second)
	assert.Nil(t, e.rec.Handle("alice", "fs"))
	assert.Empty(t, e.reg("alice").ToolNames("fs"))
	require.Len(t, e.pool.Entries(), 1)
	assert.Equal(t, "gh", e.pool.Entries()[0].Server)
	e.requireRefsMatch()
}
