//go:build linux

package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
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

	"github.com/wasmhost/wasmhost/daemon"
	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/leakcheck"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"
)

const (
	// leakRounds is how many churn rounds TestLeakSoak runs; each reloads
	// the config once and connects and disconnects seven or eight clients
	// (see clients).
	leakRounds = 40
	// leakMargin is how many goroutines or file descriptors above its
	// baseline the process may end with: a timer or a connection the
	// runtime closes a moment later, never one per round.
	leakMargin = 2
	// leakSettle bounds the wait for goroutines, descriptors and processes
	// to end once the churn stopped: generous, for a loaded machine (15 s
	// was seen to be too short while other packages' tests ran).
	leakSettle = time.Minute
	// leakIdleTimeout is the daemon's ClientIdleTimeout in the soak: a
	// client that left without DELETE is closed after it.
	leakIdleTimeout = 3 * time.Second
	// leakSlowMS is how long the slow upstream takes to answer the calls
	// clients leave under way: longer than leakIdleTimeout and leakSettle,
	// so that a call nobody cancelled shows.
	leakSlowMS = 120_000
)

// waitChildren waits until this process has at most n child processes.
func waitChildren(t *testing.T, n int) {
	t.Helper()
	var left atomic.Pointer[map[int]string] // the condition runs in its own goroutine
	if !assert.Eventually(t, func() bool {
		r, err := leakcheck.Take()
		// The page tests' shared headless browser (browserPID) lives
		// until the test binary ends; it is none of the daemon's.
		delete(r.Children, browserPID())
		left.Store(&r.Children)
		return err == nil && len(r.Children) <= n
	}, leakSettle, 20*time.Millisecond, "more than %d child processes", n) {
		t.Fatalf("child processes left: %v", *left.Load())
	}
}

// A leakSoak drives one daemon through churn.
type leakSoak struct {
	t      *testing.T
	r      *running
	dir    string // the policy plugins' directory, and the slow calls' marks
	self   string // this test binary, the demo and slow upstreams
	extra  bool   // the config has the "extra" server
	prefix bool   // the prefix policy runs
	carol  bool   // the config has the session carol
	// holder is a client of alice subscribed to a note across rounds;
	// holderLeaves is the round it leaves in.
	holder       *leakClient
	holderLeaves int
	// pending is a call of carol under way while the next reload removes
	// carol.
	pending *slowCall

	calls, vanished, reloads, subscribed, cut, kills int
	marks                                            int // slow calls started
	swaps                                            atomic.Int32
}

// leakNote is the resource the soak's clients subscribe to.
const leakNote = "demo://notes/welcome"

// leakConfig is the soak's config in round round (0 is the starting
// config): the demo server's and the sessions' metadata settings change
// every round; a second pooled stdio server comes and goes, its identity
// changing too; an unpooled one (a process per session) comes and goes; a
// third session comes and goes; the demo server's identity changes every
// ten rounds (a new process, subscriptions moved to it); and the policy
// plugin is the prefix policy for a few rounds at a time. The slow
// upstream is always there. Every session always sees demo__echo, and
// alice slow__slow, under either policy.
func (s *leakSoak) leakConfig(round int) map[string]any {
	cfg := baseConfig()
	s.extra = round%3 == 1
	s.prefix = round%20 >= 10 && round%20 < 13
	s.carol = round%4 == 3
	policy := "default.wasm"
	if s.prefix {
		policy = "prefix.wasm"
	}
	set(cfg, "policy", map[string]any{"path": filepath.Join(s.dir, policy)})
	servers := cfg["mcpServers"].(map[string]any)
	demo := servers["demo"].(map[string]any)
	demo["env"] = childEnv(demoserver.ChildEnv, map[string]any{"ROUND": strconv.Itoa(round / 10 % 2)})
	alice := map[string]any{"trust": true, "includeTools": []string{"echo", "add", "pid"}}
	bob := map[string]any{"includeTools": []string{"echo", "pid", "read_note"}, "excludeTools": []string{"write_note"}}
	switch round % 4 {
	case 1:
		demo["trust"] = true
		alice = map[string]any{"includeTools": []string{"pid", "echo", "read_note"}, "alwaysLoadTools": true}
	case 2:
		demo["alwaysLoadTools"] = true
		demo["excludeTools"] = []string{"add_tool"}
		bob = map[string]any{"includeTools": []string{"echo", "add"}, "trust": true}
	case 3:
		demo["includeTools"] = []string{"echo", "pid", "add"}
		alice = map[string]any{"includeTools": []string{"echo", "pid"}, "excludeTools": []string{"pid"}, "trust": false}
	}
	set(cfg, "sessions.alice.overrides.demo", alice)
	set(cfg, "sessions.bob.overrides.demo", bob)
	servers["slow"] = map[string]any{"command": s.self, "env": childEnv(mcptest.SlowEnv, nil), "includeTools": []string{"slow"}}
	if s.extra {
		servers["extra"] = map[string]any{"command": s.self, "env": childEnv(demoserver.ChildEnv, map[string]any{"ROUND": strconv.Itoa(round % 2)})}
	}
	if round%5 == 2 {
		servers["solo"] = map[string]any{"command": s.self, "env": childEnv(demoserver.ChildEnv, nil), "pooled": false, "includeTools": []string{"echo"}}
	}
	if s.carol {
		cfg["sessions"].(map[string]any)["carol"] = map[string]any{
			"token": carolToken, "servers": []string{"demo", "slow"},
			"overrides": map[string]any{"demo": map[string]any{"includeTools": []string{"echo"}}},
		}
	}
	return cfg
}

// childEnv is the environment of an upstream that is this test binary
// serving what the variable which selects, with extra. A race build sleeps
// a second before it exits (GORACE's atexit_sleep_ms), which would make
// every upstream the soak stops take that long.
func childEnv(which string, extra map[string]any) map[string]any {
	env := map[string]any{which: "1", "GORACE": "atexit_sleep_ms=0"}
	maps.Copy(env, extra)
	return env
}

// reload writes round's config and reloads it. A reload that removes the
// session carol ends the call a client of carol has under way (see
// clients): it must not wait for the upstream's answer.
func (s *leakSoak) reload(round int) {
	s.t.Helper()
	writeConfig(s.t, s.r.path, s.leakConfig(round))
	done := make(chan error, 1)
	go func() {
		res, err := s.r.d.Reload(context.Background(), "leak")
		if err != nil {
			err = fmt.Errorf("%w: %+v", err, res)
		} else if res.PolicySwapped {
			s.swaps.Add(1)
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(s.t, err, "round %d", round)
	case <-time.After(leakSettle):
		s.t.Fatalf("round %d: the reload did not return in %v:\n%s", round, leakSettle, goroutineProfile())
	}
	s.reloads++
	if p := s.pending; p != nil && !s.carol {
		s.pending = nil
		require.Error(s.t, <-p.ended, "the call of a removed session")
		_ = p.c.cs.Close() // its session is gone: no DELETE to send
		p.c.tr.CloseIdleConnections()
		s.cut++
	}
}

// goroutineProfile returns this process's goroutines, grouped by stack.
func goroutineProfile() string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	return b.String()
}

// A leakClient is a go-sdk client of one session over HTTP.
type leakClient struct {
	s  *leakSoak
	cs *mcp.ClientSession
	tr *http.Transport
	// vanish makes leave drop the client's connections and refuse new
	// ones, as if its process had died: no DELETE, no cancellation.
	vanish bool

	mu    sync.Mutex
	conns []net.Conn
	gone  bool
	// stopPings ends keepAlive's pings, if they run; leave calls it.
	stopPings func()
}

// keepAlive pings the daemon every tenth of leakIdleTimeout until the
// client leaves, so that a client held across rounds stays active however
// long a round takes on a loaded machine (a round's reload, kill and
// clients took more than leakIdleTimeout there, and the daemon rightly
// closed the held client before its next call).
func (c *leakClient) keepAlive() {
	ctx, cancel := context.WithCancel(c.s.t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(leakIdleTimeout / 10)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				// A failed ping shows in the client's next call.
				_ = c.cs.Ping(ctx, nil)
			}
		}
	}()
	c.stopPings = func() { cancel(); <-done }
}

// dial makes the client's connections, and refuses them once it is gone.
func (c *leakClient) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return nil, errors.New("vanished")
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		c.conns = append(c.conns, conn)
	}
	return conn, err
}

// connect connects a client to session; when vanish is set, it will leave
// as if its process had died.
func (s *leakSoak) connect(session, token string, vanish bool) *leakClient {
	s.t.Helper()
	c := &leakClient{s: s, vanish: vanish}
	c.tr = &http.Transport{DialContext: c.dial}
	cl := mcp.NewClient(&mcp.Implementation{Name: "leak-" + session, Version: "1"}, &mcp.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithTimeout(s.t.Context(), 15*time.Second)
	defer cancel()
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   s.r.d.URL() + "/mcp/" + session,
		HTTPClient: &http.Client{Transport: &bearerTransport{token: token, base: c.tr}},
	}, nil)
	if err != nil {
		c.tr.CloseIdleConnections()
	}
	require.NoError(s.t, err, session)
	c.cs = cs
	return c
}

// leave disconnects the client: with a DELETE, or (vanish) by dropping its
// connections.
func (c *leakClient) leave() {
	c.s.t.Helper()
	if c.stopPings != nil {
		c.stopPings()
	}
	if c.vanish {
		c.mu.Lock()
		c.gone = true
		for _, conn := range c.conns {
			_ = conn.Close()
		}
		c.mu.Unlock()
		c.s.vanished++
	}
	err := c.cs.Close() // what is left of it in this process
	c.tr.CloseIdleConnections()
	if !c.vanish {
		assert.NoError(c.s.t, err, "close")
	}
}

// call calls tool, which must answer "soak" (an echo) or anything (other
// tools).
func (c *leakClient) call(tool string) {
	c.s.t.Helper()
	args := map[string]any{}
	switch {
	case strings.HasSuffix(tool, "__echo"):
		args["text"] = "soak"
	case tool == "slow__slow":
		args["mark"], args["ms"] = filepath.Join(c.s.dir, "warm"), 0
	}
	ctx, cancel := context.WithTimeout(c.s.t.Context(), 15*time.Second)
	defer cancel()
	res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	require.NoError(c.s.t, err, tool)
	require.False(c.s.t, res.IsError, "%s: %s", tool, resultText(res))
	if args["text"] != nil {
		assert.Equal(c.s.t, "soak", resultText(res), tool)
	}
	c.s.calls++
}

// subscribe subscribes the client to the demo server's note.
func (c *leakClient) subscribe() {
	c.s.t.Helper()
	require.NoError(c.s.t, c.cs.Subscribe(c.s.t.Context(), &mcp.SubscribeParams{URI: leakNote}))
	c.s.subscribed++
}

// client connects a client to session, subscribes it to the note when sub
// is set, calls tool and leaves, without a DELETE when vanish is set.
func (s *leakSoak) client(session, token, tool string, sub, vanish bool) {
	s.t.Helper()
	c := s.connect(session, token, vanish)
	defer c.leave()
	if sub {
		c.subscribe()
	}
	c.call(tool)
}

// A slowCall is a call of the slow upstream under way.
type slowCall struct {
	c     *leakClient
	ended chan error // CallTool's error, once it returns
}

// startSlow has a new client of session start a call of the slow upstream
// under ctx, with a progress token, and returns once the upstream has it.
func (s *leakSoak) startSlow(ctx context.Context, session, token string, vanish bool) *slowCall {
	s.t.Helper()
	c := s.connect(session, token, vanish)
	s.marks++
	n := s.marks
	mark := filepath.Join(s.dir, fmt.Sprintf("slow-%d", n))
	params := &mcp.CallToolParams{Name: "slow__slow", Arguments: map[string]any{"mark": mark, "ms": leakSlowMS}}
	params.SetProgressToken(fmt.Sprintf("soak-%d", n))
	call := &slowCall{c: c, ended: make(chan error, 1)}
	go func() {
		_, err := c.cs.CallTool(ctx, params)
		call.ended <- err
	}()
	require.Eventually(s.t, func() bool {
		_, err := os.Stat(mark)
		return err == nil
	}, eventWithin, 5*time.Millisecond, "the slow call did not reach the upstream")
	return call
}

// leaveMidCall has a client of alice leave while its call of the slow upstream
// is under way: after cancelling the call (the go-sdk client sends the
// cancellation on a goroutine of its own, so its DELETE may come first),
// or (vanish) by dropping its connections.
func (s *leakSoak) leaveMidCall(vanish bool) {
	s.t.Helper()
	ctx, cancel := context.WithCancel(s.t.Context())
	defer cancel()
	call := s.startSlow(ctx, "alice", aliceToken, vanish)
	if !vanish {
		cancel()
		require.Error(s.t, <-call.ended)
	}
	call.c.leave()
	if vanish {
		cancel() // what is left of the client in this process
		require.Error(s.t, <-call.ended)
	}
	s.cut++
}

// initializeOnly opens a session with a bare initialize request and
// leaves: no initialized notification, no stream, no DELETE.
func (s *leakSoak) initializeOnly() {
	s.t.Helper()
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"leak-raw","version":"1"}}}`
	code, body := s.r.do("POST", "/mcp/alice", aliceToken, strings.NewReader(init),
		map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
	require.Equal(s.t, http.StatusOK, code, body)
	s.vanished++
}

// clients runs one round's clients: five that call a tool, two of them
// subscribed, two of them leaving without DELETE; one that leaves with a
// slow call under way; one that sends initialize alone. A client of alice
// subscribed to the note stays for three rounds.
func (s *leakSoak) clients(round int) {
	s.t.Helper()
	aliceTool := "demo__echo"
	if s.extra && !s.prefix {
		aliceTool = "extra__echo" // a call on the server this reload started
	}
	s.client("alice", aliceToken, aliceTool, false, false)
	s.client("alice", aliceToken, "demo__echo", round%3 == 0, round%2 == 0)
	s.client("bob", bobToken, "demo__echo", round%3 == 1, false)
	s.client("bob", bobToken, "demo__echo", false, round%2 == 1)
	if s.carol {
		s.client("carol", carolToken, "demo__echo", true, round%4 == 3)
		// The next reload removes carol with this call under way.
		s.pending = s.startSlow(s.t.Context(), "carol", carolToken, false)
	} else {
		s.client("alice", aliceToken, "demo__pid", false, false)
	}
	s.leaveMidCall(round%2 == 1)
	s.initializeOnly()
	if s.holder != nil && round >= s.holderLeaves {
		s.holder.leave()
		s.holder = nil
	}
	if s.holder == nil && round != 0 {
		s.holder = s.connect("alice", aliceToken, round%2 == 0)
		s.holder.subscribe()
		s.holder.keepAlive()
		s.holderLeaves = round + 3
	}
	if s.holder != nil {
		s.holder.call("demo__echo") // a held client calls in every round
	}
}

// demoPID returns the pid of the demo server's pooled process, once it is
// ready.
func (s *leakSoak) demoPID() int {
	s.t.Helper()
	var pid int
	require.Eventually(s.t, func() bool {
		for _, e := range s.r.state().Pool {
			if e.Server == "demo" && e.State == "ready" {
				pid = e.PID
				return pid != 0
			}
		}
		return false
	}, eventWithin, 20*time.Millisecond, "the demo upstream is not ready")
	return pid
}

// kill kills the demo upstream and waits until the pool has restarted it
// and a call reaches the new process.
//
// A new pid alone is not enough: the pool records the new process's pid
// when it starts it, and the entry could be read as ready with that pid
// before the restart had connected (a call then failed with "upstream
// unavailable (connecting or restarting)", seen in a loaded -race run).
// The pool's "upstream restarted" line, one more than before the kill,
// says the new connection is up.
func (s *leakSoak) kill() {
	s.t.Helper()
	const restartedLine = `msg="upstream restarted" component=pool server=demo`
	restarts := strings.Count(s.r.logs.String(), restartedLine)
	pid := s.demoPID()
	require.NoError(s.t, syscall.Kill(pid, syscall.SIGKILL))
	require.Eventually(s.t, func() bool { return s.demoPID() != pid }, eventWithin, 20*time.Millisecond,
		"the demo upstream %d was not restarted", pid)
	waitFor(s.t, eventWithin, func() bool { return strings.Count(s.r.logs.String(), restartedLine) > restarts },
		s.r.logs.String, "the pool's restart of the demo upstream %d", pid)
	s.client("alice", aliceToken, "demo__pid", false, false)
	s.kills++
}

// warmClients has a client of alice and one of bob call a tool and leave.
func (s *leakSoak) warmClients() {
	s.t.Helper()
	s.client("alice", aliceToken, "demo__echo", true, false)
	s.client("bob", bobToken, "slow__slow", false, false)
	s.initializeOnly()
}

// clientCounts returns how many clients each session counts.
func (s *leakSoak) clientCounts() map[string]int {
	out := make(map[string]int)
	for _, sess := range s.r.state().Sessions {
		out[sess.Name] = sess.Clients
	}
	return out
}

// waitNoClients waits until no session counts a client: those that left
// without DELETE have timed out.
func (s *leakSoak) waitNoClients() {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		for _, sess := range s.r.state().Sessions {
			if sess.Clients != 0 {
				return false
			}
		}
		return true
	}, leakIdleTimeout+leakSettle, 20*time.Millisecond, "clients that left are still counted")
}

// newLeakSoak writes the policy plugins the soak's configs name, and
// compiles the prefix policy into the shared cache first, as
// TestPolicySwapRekeysViewsWithoutReconnect does.
func newLeakSoak(t *testing.T) *leakSoak {
	self, err := os.Executable()
	require.NoError(t, err)
	prefixWasm, err := os.ReadFile("../testplugins/prefix-policy/prefix-policy.wasm")
	require.NoError(t, err)
	warm, err := host.Load(t.Context(), "prefix-policy", prefixWasm, host.Options{CacheDir: cacheDir()})
	require.NoError(t, err)
	require.NoError(t, warm.Close(t.Context()))
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "default.wasm"), policydefault.Wasm, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prefix.wasm"), prefixWasm, 0o644))
	return &leakSoak{t: t, dir: dir, self: self}
}

// TestLeakCallsOfGoneClients: a call under way whose client cannot get its
// answer any more has its upstream request cancelled, at once, rather than
// holding its client session (and the goroutines serving it) open until the
// upstream answers: when the client goes away (its connections drop, no
// DELETE, no cancellation), when it ends its session (DELETE) before its
// cancellation of the call arrives, and when a reload removes its session
// (which also held the reload up, and every reload after it).
func TestLeakCallsOfGoneClients(t *testing.T) {
	if testing.Short() {
		t.Skip("a soak of calls by clients that go away")
	}
	s := newLeakSoak(t)
	s.r = start(t, s.leakConfig(0), func(o *daemon.Options) { o.ClientIdleTimeout = time.Second })
	s.warmClients()
	s.waitNoClients()
	s.r.http.CloseIdleConnections()
	base := leakcheck.Quiet(t, leakSettle)

	// Gone: the idle timeout closes its session, which waits for the call.
	gone := s.startSlow(t.Context(), "alice", aliceToken, true)
	gone.c.leave()
	require.Error(t, <-gone.ended)
	assert.Eventually(t, func() bool { return s.clientCounts()["alice"] == 0 }, eventWithin, 20*time.Millisecond, "the client gone is still counted")

	// DELETE (the go-sdk client sends its own only once its calls have
	// returned; another client of the session may send it meanwhile).
	deleted := s.startSlow(t.Context(), "alice", aliceToken, false)
	began := time.Now()
	code, body := s.r.do("DELETE", "/mcp/alice", aliceToken, nil, map[string]string{"Mcp-Session-Id": deleted.c.cs.ID()})
	assert.Equal(t, http.StatusNoContent, code, body)
	assert.Less(t, time.Since(began), 3*time.Second, "DELETE answered")
	require.Error(t, <-deleted.ended)
	deleted.c.leave()

	// A reload removing the session.
	s.reload(3)
	s.pending = s.startSlow(t.Context(), "carol", carolToken, false)
	s.reload(0)

	s.r.http.CloseIdleConnections()
	if err := leakcheck.Settle(base, leakMargin, len(base.Children), leakSettle); err != nil {
		t.Fatalf("clients counted: %v: %v", s.clientCounts(), err)
	}
}

// TestLeakSoak churns one daemon: clients connect, call a tool and leave
// (some without DELETE, some subscribed to a resource, some with a call
// under way, some after initialize alone), reloads add and remove stdio
// servers (pooled and not), a session and per-server settings, the policy
// plugin is swapped back and forth, and the demo upstream is killed for
// the pool to restart. Then, with the starting config back, the
// goroutines, file descriptors and child processes are back to what they
// were before the churn; and once the daemon has stopped, to what they
// were before it started, with no child process.
func TestLeakSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("a soak of many sessions and reloads")
	}
	s := newLeakSoak(t)
	opts := func(o *daemon.Options) {
		o.ClientIdleTimeout = leakIdleTimeout
		o.CrashRestarts = 100
	}

	// A first daemon sets up what a process does once (the signal
	// handler's goroutine, the network poller, the plugin cache), so that
	// the baseline taken after it counts none of it.
	s.r = start(t, s.leakConfig(0), opts)
	s.warmClients()
	s.reload(11) // the prefix policy
	s.r.stop()
	s.r.http.CloseIdleConnections()
	waitChildren(t, 0)

	before := leakcheck.Quiet(t, leakSettle)
	logResources(t, "before")
	s.r = start(t, s.leakConfig(0), opts)
	s.warmClients()
	// The baseline, with the starting config: its clients have left,
	// those without DELETE too.
	s.waitNoClients()
	waitChildren(t, 2)
	s.r.http.CloseIdleConnections()
	baseline := leakcheck.Quiet(t, leakSettle)
	logResources(t, "baseline")

	began := time.Now()
	for round := 1; round <= leakRounds; round++ {
		s.reload(round)
		s.clients(round)
		if round%8 == 4 {
			s.kill()
		}
	}
	s.reload(0)
	s.clients(0)
	s.holder.leave()
	t.Logf("churn: %d rounds, %d tool calls answered, %d clients left without DELETE, %d subscribed, %d left with a call under way, %d reloads (%d policy swaps), %d kills, in %v",
		leakRounds+1, s.calls, s.vanished, s.subscribed, s.cut, s.reloads, s.swaps.Load(), s.kills, time.Since(began).Round(time.Millisecond))

	// Back to the starting config: what the churn made is gone once the
	// clients that left without DELETE have timed out.
	s.r.http.CloseIdleConnections()
	if err := leakcheck.Settle(baseline, leakMargin, len(baseline.Children), leakIdleTimeout+leakSettle); err != nil {
		t.Fatalf("after the churn, with the starting config back (clients counted: %v): %v", s.clientCounts(), err)
	}
	logResources(t, "after the churn")

	s.r.stop()
	s.r.http.CloseIdleConnections()
	// before has no child but the page tests' browser, if one runs
	// (waitChildren).
	require.NoError(t, leakcheck.Settle(before, leakMargin, len(before.Children), leakSettle), "after the daemon stopped")
	logResources(t, "after the stop")
}

// logResources logs this process's counts of goroutines, descriptors and
// child processes.
func logResources(t *testing.T, when string) {
	t.Helper()
	r, err := leakcheck.Take()
	require.NoError(t, err)
	t.Logf("%s: %d goroutines, %d fds, %d children", when, r.Goroutines, len(r.FDs), len(r.Children))
}
