package haproxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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

	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/mcptest"
)

// TestMain doubles as the upstreams: the demo server and the slow one,
// started by each replica from this test binary.
func TestMain(m *testing.M) {
	demoserver.RunIfChild()
	mcptest.RunSlowIfChild()
	os.Exit(m.Run())
}

const (
	token      = "lb-alice-token-0123456789abcdef"
	drainLimit = 10 * time.Second // each replica's --drain-timeout
)

// needHAProxy returns haproxy's path. Without it the test is skipped,
// loudly, on a developer's machine, and fails in CI (CI=true), where
// .ci/run installs it (make tools).
func needHAProxy(t *testing.T) string {
	path, err := exec.LookPath("haproxy")
	if err == nil {
		return path
	}
	msg := "haproxy is not installed: the load-balancer test of deploy/haproxy did NOT run (install it: apt-get install -y haproxy, or make tools)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	fmt.Fprintln(os.Stderr, "\n*** SKIPPED: "+msg+" ***")
	t.Skip(msg)
	return ""
}

// freePort returns a loopback address nothing listens on now.
func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// A configDir is a directory laid out as Kubernetes mounts a ConfigMap:
// wasmhost.json is a symlink to ..data/wasmhost.json, ..data a symlink to
// a timestamped directory, and an update swaps ..data by rename.
type configDir struct {
	dir string
	n   int
}

func (c *configDir) path() string { return filepath.Join(c.dir, "wasmhost.json") }

// write writes cfg once, for every replica, the way the kubelet does.
func (c *configDir) write(t *testing.T, cfg map[string]any) {
	t.Helper()
	c.n++
	data, err := json.MarshalIndent(cfg, "", "  ")
	require.NoError(t, err)
	ts := fmt.Sprintf("..2026_12_02_00_00_%02d.%d", c.n, c.n)
	require.NoError(t, os.Mkdir(filepath.Join(c.dir, ts), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(c.dir, ts, "wasmhost.json"), data, 0o644))
	tmp := filepath.Join(c.dir, "..data_tmp")
	require.NoError(t, os.Symlink(ts, tmp))
	require.NoError(t, os.Rename(tmp, filepath.Join(c.dir, "..data")))
	if c.n == 1 {
		require.NoError(t, os.Symlink("..data/wasmhost.json", c.path()))
	}
}

// config is the replicas' config: one session, alice, with the demo
// upstream's tools and the slow one's.
func config(t *testing.T, tokenFile string, demoTools ...string) map[string]any {
	self, err := os.Executable()
	require.NoError(t, err)
	return map[string]any{
		"listen": "127.0.0.1:0",
		"mcpServers": map[string]any{
			"demo": map[string]any{"command": self, "env": map[string]any{demoserver.ChildEnv: "1"}, "includeTools": demoTools},
			"slow": map[string]any{"command": self, "env": map[string]any{mcptest.SlowEnv: "1"}},
		},
		"sessions": map[string]any{"alice": map[string]any{"tokenFile": tokenFile}},
	}
}

// A replica is one wasmhost process.
type replica struct {
	name, addr string
	log        string // its stderr and stdout
	cmd        *exec.Cmd
	exited     chan struct{}
	pid        int // its demo upstream's process id, which names it in answers
}

// A cluster is three replicas behind HAProxy.
type cluster struct {
	t         *testing.T
	bin       string
	cfg       *configDir
	replicas  []*replica
	lb, stats string
	haproxy   *exec.Cmd
	haLog     string
}

func (c *cluster) url() string { return "http://" + c.lb + "/mcp/alice" }

// start starts r and waits until it is ready and its upstream named.
func (c *cluster) start(r *replica) {
	t := c.t
	t.Helper()
	f, err := os.OpenFile(r.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	r.cmd = exec.Command(c.bin, "run", "--config", c.cfg.path(), "--listen", r.addr, "--replica", r.name,
		"--drain-timeout", drainLimit.String(), "--per-request-protocol", "--debounce", "50ms", "--cache-dir", host.DefaultCacheDir())
	r.cmd.Stdout, r.cmd.Stderr = f, f
	require.NoError(t, r.cmd.Start())
	r.exited = make(chan struct{})
	go func() { _ = r.cmd.Wait(); f.Close(); close(r.exited) }()
	c.waitReady(r)
	cs := c.dial("http://"+r.addr+"/mcp/alice", "2025-11-25", nil)
	r.pid = pidOf(t, cs)
	_ = cs.Close()
}

// waitReady waits until r answers /readyz 200 and HAProxy (once started)
// has marked it up.
func (c *cluster) waitReady(r *replica) {
	c.t.Helper()
	require.Eventually(c.t, func() bool {
		resp, err := http.Get("http://" + r.addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, 20*time.Millisecond, "replica %s not ready; log:\n%s", r.name, c.logOf(r))
	if c.haproxy != nil {
		c.waitStatus(r, "UP")
	}
}

// waitStatus waits until HAProxy's stats show r in status want.
func (c *cluster) waitStatus(r *replica, want string) {
	c.t.Helper()
	require.Eventually(c.t, func() bool { return c.status(r) == want }, 60*time.Second, 20*time.Millisecond,
		"HAProxy never saw %s %s (now %q); haproxy log:\n%s", r.name, want, c.status(r), readFile(c.haLog))
}

// status is r's status in HAProxy's stats (UP, DOWN, "UP 1/2", ...).
func (c *cluster) status(r *replica) string {
	resp, err := http.Get("http://" + c.stats + "/stats;csv")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ",")
		if len(f) > 17 && f[0] == "wasmhost" && f[1] == r.name {
			return f[17]
		}
	}
	return ""
}

func (c *cluster) logOf(r *replica) string { return readFile(r.log) }

// rss is a process's resident memory as /proc tells it (Linux), for the
// capacity figures of docs/operations.md.
func rss(pid int) string {
	for _, l := range strings.Split(readFile(fmt.Sprintf("/proc/%d/status", pid)), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	return "VmRSS unknown"
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// byPID returns the replica whose demo upstream has pid.
func (c *cluster) byPID(pid int) *replica {
	for _, r := range c.replicas {
		if r.pid == pid {
			return r
		}
	}
	return nil
}

// dial connects a client of protocol version, through url, with a
// list_changed channel (nil: none).
func (c *cluster) dial(url, version string, changed chan<- string) *mcp.ClientSession {
	c.t.Helper()
	cs, err := c.tryDial(url, version, changed)
	require.NoError(c.t, err)
	return cs
}

func (c *cluster) tryDial(url, version string, changed chan<- string) (*mcp.ClientSession, error) {
	o := &mcp.ClientOptions{Logger: slog.New(slog.DiscardHandler)}
	if changed != nil {
		o.ToolListChangedHandler = func(context.Context, *mcp.ToolListChangedRequest) { changed <- version }
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "lb-test", Version: "1"}, o)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := &http.Transport{}
	c.t.Cleanup(tr.CloseIdleConnections)
	return cl.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   url,
		HTTPClient: &http.Client{Transport: &bearer{base: tr}},
	}, &mcp.ClientSessionOptions{ProtocolVersion: version})
}

type bearer struct{ base http.RoundTripper }

func (b *bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+token)
	return b.base.RoundTrip(req)
}

// pidOf asks the demo upstream behind cs for its process id.
func pidOf(t *testing.T, cs *mcp.ClientSession) int {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "pid", Arguments: map[string]any{}})
	require.NoError(t, err)
	require.False(t, res.IsError, mcptest.Text(res))
	pid, err := strconv.Atoi(mcptest.Text(res))
	require.NoError(t, err)
	return pid
}

// newCluster builds wasmhost, starts three replicas on one ConfigMap-style
// config directory, and HAProxy with haproxy.cfg in front of them.
func newCluster(t *testing.T, haproxy string) *cluster {
	dir := t.TempDir()
	c := &cluster{t: t, bin: filepath.Join(dir, "wasmhost"), cfg: &configDir{dir: filepath.Join(dir, "configmap")}}
	build := exec.Command("go", "build", "-o", c.bin, "github.com/wasmhost/wasmhost/cmd/wasmhost")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	secret := filepath.Join(dir, "secret")
	require.NoError(t, os.Mkdir(secret, 0o700))
	tokenFile := filepath.Join(secret, "alice")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
	require.NoError(t, os.Mkdir(c.cfg.dir, 0o755))
	c.cfg.write(t, config(t, tokenFile, "echo", "pid"))

	for i := range 3 {
		r := &replica{name: fmt.Sprintf("r%d", i+1), addr: freePort(t), log: filepath.Join(dir, fmt.Sprintf("r%d.log", i+1))}
		c.replicas = append(c.replicas, r)
	}
	t.Cleanup(func() {
		for _, r := range c.replicas {
			if r.cmd != nil && r.cmd.Process != nil {
				_ = r.cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-r.exited:
				case <-time.After(30 * time.Second):
					_ = r.cmd.Process.Kill()
					<-r.exited
				}
			}
			if t.Failed() {
				t.Logf("replica %s log:\n%s", r.name, c.logOf(r))
			}
		}
	})
	var wg sync.WaitGroup
	for _, r := range c.replicas {
		wg.Go(func() { c.start(r) })
	}
	wg.Wait()

	c.lb, c.stats, c.haLog = freePort(t), freePort(t), filepath.Join(dir, "haproxy.log")
	hl, err := os.Create(c.haLog)
	require.NoError(t, err)
	c.haproxy = exec.Command(haproxy, "-db", "-f", "haproxy.cfg")
	c.haproxy.Env = append(os.Environ(), "LB_BIND="+c.lb, "STATS_BIND="+c.stats,
		"WASMHOST_1="+c.replicas[0].addr, "WASMHOST_2="+c.replicas[1].addr, "WASMHOST_3="+c.replicas[2].addr)
	c.haproxy.Stdout, c.haproxy.Stderr = hl, hl
	require.NoError(t, c.haproxy.Start())
	haDone := make(chan struct{})
	go func() { _ = c.haproxy.Wait(); hl.Close(); close(haDone) }()
	t.Cleanup(func() {
		_ = c.haproxy.Process.Kill()
		<-haDone
		if t.Failed() {
			t.Logf("haproxy log:\n%s", readFile(c.haLog))
		}
	})
	for _, r := range c.replicas {
		c.waitStatus(r, "UP")
	}
	return c
}

// A session client calls through the load balancer and, when its session
// is gone (the replica holding it stopped: 404, or 503 from a replica
// stopping), starts a new one through the balancer and calls again.
type sessionClient struct {
	c       *cluster
	version string
	cs      *mcp.ClientSession
	reinits int
}

// errLost is a call that reached an upstream and got no answer.
var errLost = errors.New("call lost")

// call makes one slow call of ms milliseconds with a mark file of its
// own. A call whose answer says it did not run (its session gone, or
// refused by a stopping replica) and whose mark was not made is made
// again on a new session; one that ran and got no answer is lost.
func (s *sessionClient) call(ctx context.Context, ms int) (*mcp.CallToolResult, error) {
	for attempt := 0; ; attempt++ {
		if s.cs == nil {
			cs, err := s.c.tryDial(s.c.url(), s.version, nil)
			if err != nil {
				if attempt < 20 && ctx.Err() == nil {
					time.Sleep(100 * time.Millisecond) // the balancer may not have seen the replica go yet
					continue
				}
				return nil, fmt.Errorf("re-initialize through the balancer: %w", err)
			}
			s.cs = cs
		}
		mark := filepath.Join(s.c.t.TempDir(), "mark")
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		res, err := s.cs.CallTool(cctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"mark": mark, "ms": ms}})
		cancel()
		if err == nil && !res.IsError {
			return res, nil
		}
		_, statErr := os.Stat(mark)
		ran := statErr == nil
		if ran {
			if err == nil {
				err = errors.New(mcptest.Text(res))
			}
			return nil, fmt.Errorf("%w: %w", errLost, err)
		}
		if err == nil {
			return res, fmt.Errorf("refused: %s", mcptest.Text(res))
		}
		if attempt >= 20 {
			return nil, fmt.Errorf("never ran: %w", err)
		}
		_ = s.cs.Close()
		s.cs = nil
		s.reinits++
	}
}

// TestHAProxy runs three replicas of the wasmhost binary, sharing one
// ConfigMap-style config directory, behind HAProxy with haproxy.cfg.
func TestHAProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts haproxy and wasmhost replicas for a load-balancer end to end; run without -short")
	}
	haproxy := needHAProxy(t)
	c := newCluster(t, haproxy)

	t.Run("2025 sessions stick to one replica", func(t *testing.T) {
		used := map[string]int{}
		for range 6 {
			cs := c.dial(c.url(), "2025-11-25", nil)
			require.NotEmpty(t, cs.ID(), "a 2025 client has a session")
			first := pidOf(t, cs)
			for range 4 {
				assert.Equal(t, first, pidOf(t, cs), "a session's requests all reach one replica")
			}
			r := c.byPID(first)
			require.NotNil(t, r)
			used[r.name]++
			_ = cs.Close()
		}
		t.Logf("6 sessions over the replicas: %v", used)
		assert.Len(t, used, 3, "new sessions are spread over every replica")
	})

	t.Run("2026-07-28 requests go to any replica", func(t *testing.T) {
		cs := c.dial(c.url(), "2026-07-28", nil)
		defer cs.Close()
		assert.Equal(t, "2026-07-28", cs.InitializeResult().ProtocolVersion)
		assert.Empty(t, cs.ID(), "no session")
		served := map[string]int{}
		for range 9 {
			r := c.byPID(pidOf(t, cs))
			require.NotNil(t, r)
			served[r.name]++
		}
		t.Logf("9 requests of one 2026-07-28 client served by %v", served)
		assert.Len(t, served, 3, "every replica serves them")
	})

	t.Run("a config written once reaches every replica", func(t *testing.T) {
		changed := make(chan string, 100)
		on := map[string]bool{}
		var clients []*mcp.ClientSession
		for len(on) < 3 {
			require.Less(t, len(clients), 30, "sessions never reached all three replicas")
			cs := c.dial(c.url(), "2025-11-25", changed)
			clients = append(clients, cs)
			on[c.byPID(pidOf(t, cs)).name] = true
		}
		fresh := c.dial(c.url(), "2026-07-28", changed)
		clients = append(clients, fresh)
		defer func() {
			for _, cs := range clients {
				_ = cs.Close()
			}
		}()
		c.cfg.write(t, config(t, filepath.Join(filepath.Dir(c.cfg.dir), "secret", "alice"), "echo", "pid", "add"))
		got := map[string]int{}
		deadline := time.After(60 * time.Second)
		for n := 0; n < len(clients); n++ {
			select {
			case v := <-changed:
				got[v]++
			case <-deadline:
				t.Fatalf("list_changed reached %v of %d clients", got, len(clients))
			}
		}
		t.Logf("list_changed: %v (2025 clients on %d replicas)", got, len(on))
		for _, cs := range clients {
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"a": 1, "b": 2}})
			require.NoError(t, err)
			assert.False(t, res.IsError, mcptest.Text(res))
		}
		for _, r := range c.replicas {
			assert.Contains(t, c.logOf(r), "reload", "replica %s reloaded", r.name)
		}
		for _, r := range c.replicas {
			t.Logf("replica %s: %s", r.name, rss(r.cmd.Process.Pid))
		}
	})

	t.Run("a killed replica costs its clients one re-initialize and the calls in flight on it", func(t *testing.T) {
		type inflight struct {
			s  *sessionClient
			on *replica
		}
		var calls []inflight
		perReplica := map[string]int{}
		for len(calls) < 9 {
			s := &sessionClient{c: c, version: "2025-11-25", cs: c.dial(c.url(), "2025-11-25", nil)}
			r := c.byPID(pidOf(t, s.cs))
			if perReplica[r.name] < 3 {
				perReplica[r.name]++
				calls = append(calls, inflight{s, r})
			} else {
				_ = s.cs.Close()
			}
		}
		victim := c.replicas[1]
		type result struct {
			i   int
			err error
		}
		results := make(chan result, len(calls))
		var started sync.WaitGroup
		for i, x := range calls {
			mark := filepath.Join(t.TempDir(), "mark")
			started.Add(1)
			go func() {
				// One call each, 3 s long, no retry: what is in flight when
				// the replica dies.
				res, err := x.s.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"mark": mark, "ms": 3000}})
				if err == nil && res.IsError {
					err = errors.New(mcptest.Text(res))
				}
				results <- result{i, err}
			}()
			go func() {
				defer started.Done()
				assert.Eventually(t, func() bool { _, err := os.Stat(mark); return err == nil }, 30*time.Second, 5*time.Millisecond, "the call did not reach its upstream")
			}()
		}
		started.Wait()
		require.False(t, t.Failed())
		require.NoError(t, victim.cmd.Process.Kill())
		<-victim.exited
		lost, onVictim := 0, 0
		for range calls {
			r := <-results
			if calls[r.i].on == victim {
				onVictim++
			}
			if r.err != nil {
				lost++
				assert.Same(t, victim, calls[r.i].on, "a call on a live replica failed: %v", r.err)
			}
		}
		t.Logf("killed %s with %d calls in flight on it: %d of %d calls lost", victim.name, onVictim, lost, len(calls))
		assert.Equal(t, onVictim, lost, "the calls in flight on the dead replica, and only those, are lost")

		// Its clients go on through the balancer, on a new session.
		for _, x := range calls {
			res, err := x.s.call(t.Context(), 10)
			require.NoError(t, err)
			assert.Equal(t, "slept", mcptest.Text(res))
			if x.on == victim {
				assert.Equal(t, 1, x.s.reinits, "a client of the dead replica re-initializes once")
			} else {
				assert.Zero(t, x.s.reinits, "a client of a live replica keeps its session")
			}
			_ = x.s.cs.Close()
		}
		c.start(victim) // back for the next test
	})

	t.Run("a rolling restart loses no call", func(t *testing.T) {
		ctx, stop := context.WithCancel(t.Context())
		var (
			wg          sync.WaitGroup
			ok, reinits atomic.Int64
			failuresMu  sync.Mutex
			failures    []error
		)
		for i := range 9 {
			version := "2025-11-25"
			if i%3 == 2 {
				version = "2026-07-28"
			}
			wg.Go(func() {
				s := &sessionClient{c: c, version: version}
				defer func() {
					if s.cs != nil {
						_ = s.cs.Close()
					}
					reinits.Add(int64(s.reinits))
				}()
				for ctx.Err() == nil {
					_, err := s.call(context.Background(), 200)
					if err != nil {
						failuresMu.Lock()
						failures = append(failures, fmt.Errorf("%s client: %w", version, err))
						failuresMu.Unlock()
						return
					}
					ok.Add(1)
				}
			})
		}
		require.Eventually(t, func() bool { return ok.Load() >= 20 }, 60*time.Second, 10*time.Millisecond, "the clients never got going")
		for _, r := range c.replicas {
			notReady := make(chan time.Duration, 1)
			began := time.Now()
			require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
			go func() {
				// The replica's own /readyz: 503 (or no answer, once it
				// has gone) from the signal on.
				for {
					resp, err := http.Get("http://" + r.addr + "/readyz")
					if err == nil {
						resp.Body.Close()
					}
					if err != nil || resp.StatusCode != http.StatusOK {
						notReady <- time.Since(began)
						return
					}
					time.Sleep(2 * time.Millisecond)
				}
			}()
			c.waitStatus(r, "DOWN")
			out := time.Since(began)
			select {
			case <-r.exited:
			case <-time.After(drainLimit + 20*time.Second):
				t.Fatalf("replica %s did not stop within its drain timeout and a margin", r.name)
			}
			exited := time.Since(began)
			nr := <-notReady
			t.Logf("SIGTERM %s: /readyz 503 after %v, HAProxy took it out after %v, it exited after %v", r.name, nr, out, exited)
			assert.Less(t, nr, 5*time.Second, "a stopping replica turns not ready at once")
			assert.Less(t, exited, drainLimit+5*time.Second, "the drain is bounded by --drain-timeout")
			before := ok.Load()
			c.start(r)
			require.Eventually(t, func() bool { return ok.Load() > before+5 }, 60*time.Second, 10*time.Millisecond, "calls go on")
		}
		stop()
		wg.Wait()
		t.Logf("rolling restart of 3 replicas: %d calls answered, %d re-initializes, %d failed", ok.Load(), reinits.Load(), len(failures))
		assert.Empty(t, failures, "no call is lost in a rolling restart")
		assert.Positive(t, reinits.Load(), "the sessions of the stopped replicas were started again")
	})
}
