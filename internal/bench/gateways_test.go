package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/daemon"
	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/internal/procstat"
)

// The peer gateways, pinned: what a user would pick instead of wasmhost.
const (
	mcpProxyPackage     = "mcp-proxy@6.7.19"
	supergatewayPackage = "supergateway@4.0.0"
)

// Child modes of this test binary (see TestMain): each serves one gateway
// over streamable HTTP on a free loopback port, writes "LISTEN <url>" on
// stdout, and ends when its stdin closes (when the benchmark that started
// it ends or dies).
const (
	// relayChildEnv holds the upstream's command line as a JSON array.
	relayChildEnv = "WASMHOST_BENCH_RELAY"
	// daemonChildEnv holds the path of a wasmhost config file.
	daemonChildEnv = "WASMHOST_BENCH_DAEMON"
)

// gatewayToken is the wasmhost session token of the gateway benchmarks.
const gatewayToken = "token-for-the-gateway-benchmark-0123"

// benchProtocol is the protocol version the load generator asks every
// gateway for: a client session (the 2026-07-28 per-request form is not
// served by every peer), the same for all of them.
const benchProtocol = "2025-11-25"

// runGatewayChild serves a gateway and exits when this process was started
// as one; otherwise it returns at once.
func runGatewayChild() {
	var err error
	switch {
	case os.Getenv(relayChildEnv) != "":
		err = serveRelay(os.Getenv(relayChildEnv))
	case os.Getenv(daemonChildEnv) != "":
		err = serveDaemon(os.Getenv(daemonChildEnv))
	default:
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// untilStdinCloses returns a context that ends when stdin reaches EOF.
func untilStdinCloses() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	return ctx, cancel
}

// serveRelay is the minimal go-sdk relay: one go-sdk client connected to
// the upstream (started once, as wasmhost pools it), and a go-sdk server
// over streamable HTTP with each of the upstream's tools, whose handler
// forwards the call's raw arguments through that client and hands back its
// result. There is no session logic, policy, routing or filtering: it is
// the floor any gateway built on the go-sdk pays.
func serveRelay(argvJSON string) error {
	var argv []string
	if err := json.Unmarshal([]byte(argvJSON), &argv); err != nil || len(argv) == 0 {
		return fmt.Errorf("relay: %s=%q is not a JSON command line: %v", relayChildEnv, argvJSON, err)
	}
	ctx, cancel := untilStdinCloses()
	defer cancel()
	up, err := mcp.NewClient(&mcp.Implementation{Name: "bench-relay", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: exec.Command(argv[0], argv[1:]...)}, nil)
	if err != nil {
		return fmt.Errorf("relay: connecting to the upstream %v: %w", argv, err)
	}
	defer up.Close()
	tools, err := up.ListTools(ctx, nil)
	if err != nil {
		return fmt.Errorf("relay: listing the upstream's tools: %w", err)
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "bench-relay", Version: "1"}, &mcp.ServerOptions{Logger: quiet})
	for _, t := range tools.Tools {
		name := t.Name
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: t.InputSchema}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return up.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: req.Params.Arguments})
		})
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Logger: quiet})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	fmt.Printf("LISTEN http://%s/mcp\n", ln.Addr())
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("relay: %w", err)
	}
	return nil
}

// pprofChildEnv, set to 1 in a gateway child of this binary, makes it
// serve net/http/pprof on a loopback port of its own, which it prints as
// "PPROF <url>" (BenchmarkGatewayProfile reads it).
const pprofChildEnv = "WASMHOST_BENCH_PPROF"

// servePprof serves net/http/pprof when pprofChildEnv asks for it.
func servePprof() {
	if os.Getenv(pprofChildEnv) != "1" {
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "pprof:", err)
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	go func() { _ = http.Serve(ln, mux) }()
	fmt.Printf("PPROF http://%s/debug/pprof/\n", ln.Addr())
}

// serveDaemon runs a wasmhost daemon on the config at path, with the
// options `wasmhost run` uses by default.
func serveDaemon(path string) error {
	ctx, cancel := untilStdinCloses()
	defer cancel()
	d, err := daemon.New(daemon.Options{
		ConfigPath: path,
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Listen:     "127.0.0.1:0",
		CacheDir:   filepath.Join(os.TempDir(), "wasmhost-bench-cache"),
	})
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case <-d.Ready():
	case err := <-done:
		return fmt.Errorf("wasmhost did not start: %w", err)
	}
	servePprof()
	fmt.Printf("LISTEN %s/mcp/\n", d.URL())
	return <-done
}

// A benchUpstream is the MCP server every gateway of a run serves, over
// stdio, and the call the load generator makes to it.
type benchUpstream struct {
	name string
	argv []string // the command line (absolute program path)
	tool string
	args map[string]any
	want string
}

// goUpstream is the project's demo server (this test binary as a child):
// its echo tool. The variable that makes the binary serve it is set through
// env(1), since gateways do not all pass their environment on.
func goUpstream(tb testing.TB) benchUpstream {
	env, err := exec.LookPath("env")
	require.NoError(tb, err)
	return benchUpstream{
		name: "go", argv: []string{env, demoserver.ChildEnv + "=1", os.Args[0]},
		tool: "echo", args: map[string]any{"text": "hello through the gateway"}, want: "hello through the gateway",
	}
}

// nodeUpstream is the MCP project's server-everything (Node.js): its echo
// tool.
func nodeUpstream(tb testing.TB) benchUpstream {
	name, args := nodeCommand(tb)
	return benchUpstream{
		name: "node", argv: append([]string{name}, args...),
		tool: "echo", args: map[string]any{"message": "hello through the gateway"}, want: "Echo: hello through the gateway",
	}
}

// A gateway is one running gateway process in front of an upstream.
type gateway struct {
	name   string
	url    string
	header http.Header // sent with every request (wasmhost's token)
	tool   string      // the upstream tool's name as the gateway exposes it
	// urls and tokens are the endpoints of a wasmhost with several
	// sessions (startGatewayWith) and their tokens; empty: url alone.
	urls, tokens []string
	cfgPath      string                 // a wasmhost's config file
	pprof        atomic.Pointer[string] // the child's pprof URL, if it serves one
	cmd          *exec.Cmd
	stdin        io.WriteCloser
	stderr       *mcptest.LogBuffer
	waited       chan struct{}
}

// gatewayNames lists the gateways in the order each round measures them.
var gatewayNames = []string{"relay", "wasmhost", "mcp-proxy", "supergateway"}

// startGateway starts the gateway name in front of up and waits until it
// answers HTTP, for at most two minutes. A peer whose package cannot be
// installed returns an error saying so.
func startGateway(ctx context.Context, tb testing.TB, name string, up benchUpstream) (*gateway, error) {
	return startGatewayWith(ctx, tb, name, up, 1)
}

// scaleFilters are the tool filters of the wasmhost sessions of
// startGatewayWith, one per session: each keeps the demo server's echo.
var scaleFilters = []map[string]any{
	{"trust": true},
	{"excludeTools": []string{"add"}},
	{"excludeTools": []string{"pid"}, "trust": true},
	{"excludeTools": []string{"add_tool"}},
	{"excludeTools": []string{"write_note"}, "trust": true},
	{"excludeTools": []string{"read_note"}},
	{"excludeTools": []string{"add", "pid"}, "trust": true},
	{"excludeTools": []string{"add_tool", "write_note"}},
	{"includeTools": []string{"echo", "add"}, "trust": true},
	{"includeTools": []string{"echo"}},
}

// sessionToken is the token of wasmhost session i of startGatewayWith.
func sessionToken(i int) string { return fmt.Sprintf("token-for-the-scale-benchmark-s%d-0123", i) }

// startGatewayWith is startGateway with, for wasmhost, sessions sessions
// (at most len(scaleFilters)) of the one pooled upstream, each with its
// own tool filter (scaleFilters); g.urls lists their endpoints. One
// session is the benchmark's single unfiltered "bench" session.
func startGatewayWith(ctx context.Context, tb testing.TB, name string, up benchUpstream, sessions int) (*gateway, error) {
	return startGatewayConfig(ctx, tb, name, up, sessions, nil)
}

// startGatewayConfig is startGatewayWith where a wasmhost runs on cfg
// instead, when it is not nil (g.cfgPath is its file).
func startGatewayConfig(ctx context.Context, tb testing.TB, name string, up benchUpstream, sessions int, cfg map[string]any) (*gateway, error) {
	g := &gateway{name: name, tool: up.tool, header: http.Header{}, stderr: &mcptest.LogBuffer{}, waited: make(chan struct{})}
	var port int
	switch name {
	case "relay":
		argv, _ := json.Marshal(up.argv)
		g.cmd = exec.Command(os.Args[0])
		g.cmd.Env = append(os.Environ(), relayChildEnv+"="+string(argv))
	case "wasmhost":
		given := cfg != nil
		if !given {
			cfg = map[string]any{
				"mcpServers": map[string]any{"up": map[string]any{"command": up.argv[0], "args": up.argv[1:]}},
				"sessions":   map[string]any{"bench": map[string]any{"token": gatewayToken}},
			}
		}
		if sessions > 1 && !given {
			ss := make(map[string]any)
			for i := range sessions {
				ss[fmt.Sprintf("s%d", i)] = map[string]any{"token": sessionToken(i), "overrides": map[string]any{"up": scaleFilters[i]}}
			}
			cfg["sessions"] = ss
		}
		data, _ := json.Marshal(cfg)
		path := filepath.Join(tb.TempDir(), "wasmhost.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
		g.cfgPath = path
		g.cmd = exec.Command(os.Args[0])
		g.cmd.Env = append(os.Environ(), daemonChildEnv+"="+path)
		g.header.Set("Authorization", "Bearer "+gatewayToken)
	case "mcp-proxy", "supergateway":
		pkg := map[string]string{"mcp-proxy": mcpProxyPackage, "supergateway": supergatewayPackage}[name]
		dir, err := mcptest.NPMTryInstall(ctx, pkg)
		if err != nil {
			return nil, fmt.Errorf("%s is missing: %w", pkg, err)
		}
		node, err := exec.LookPath("node")
		if err != nil {
			return nil, fmt.Errorf("%s is missing: node is not installed", pkg)
		}
		if port, err = freePort(); err != nil {
			return nil, err
		}
		script := filepath.Join(dir, "node_modules", ".bin", name)
		if name == "mcp-proxy" {
			args := []string{script, "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--server", "stream", "--"}
			g.cmd = exec.Command(node, append(args, up.argv...)...)
		} else {
			// supergateway runs --stdio through a shell; the paths here have
			// no spaces. It has no flag for its listen address.
			g.cmd = exec.Command(node, script, "--stdio", strings.Join(up.argv, " "), "--outputTransport", "streamableHttp",
				"--stateful", "--port", strconv.Itoa(port), "--logLevel", "none")
		}
		g.url = fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	default:
		return nil, fmt.Errorf("no gateway %q", name)
	}
	// Its own process group, so that the upstreams it starts end with it.
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	g.cmd.Stderr = g.stderr
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if g.stdin, err = g.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := g.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "LISTEN "); ok {
				listening <- u
			}
			if u, ok := strings.CutPrefix(sc.Text(), "PPROF "); ok {
				g.pprof.Store(&u)
			}
		}
	}()
	go func() {
		_ = g.cmd.Wait()
		close(g.waited)
	}()
	ready, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for g.url == "" || !accepts(port) || !g.ready() {
		select {
		case u := <-listening:
			g.url = u
			if name == "wasmhost" {
				if sessions > 1 {
					for i := range sessions {
						g.urls = append(g.urls, g.url+fmt.Sprintf("s%d", i))
						g.tokens = append(g.tokens, sessionToken(i))
					}
				}
				g.url += "bench"
			}
			if port == 0 {
				port = -1 // printed only once it serves
			}
		case <-g.waited:
			return nil, fmt.Errorf("%s ended before it served: %s", name, g.stderr)
		case <-ready.Done():
			g.close()
			return nil, fmt.Errorf("%s did not serve within 2 minutes: %s", name, g.stderr)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return g, nil
}

// ready reports whether wasmhost's /readyz says it is ready (its upstream
// connected); other gateways are ready when they serve.
func (g *gateway) ready() bool {
	if g.name != "wasmhost" {
		return true
	}
	base, _, _ := strings.Cut(g.url, "/mcp/")
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// accepts reports whether something accepts connections on the loopback
// port; -1 means a gateway that says when it serves.
func accepts(port int) bool {
	if port < 0 {
		return true
	}
	if port == 0 {
		return false
	}
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// freePort returns a loopback port nothing listened on a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// close ends the gateway and every process it started: stdin first (the
// children of this binary end by themselves), then SIGKILL to its process
// group after five seconds.
func (g *gateway) close() {
	_ = g.stdin.Close()
	if g.name != "relay" && g.name != "wasmhost" {
		_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGTERM)
	}
	select {
	case <-g.waited:
	case <-time.After(5 * time.Second):
	}
	_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
	<-g.waited
}

// rss returns the resident memory of the gateway's process in bytes (of
// the process itself, not of the upstreams it started).
func (g *gateway) rss() (int64, error) { return processRSS(g.cmd.Process.Pid) }

// processRSS reads VmRSS of /proc/<pid>/status.
func processRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// headerTransport adds a gateway's headers to every request.
type headerTransport struct {
	base   http.RoundTripper
	header http.Header
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.header) == 0 {
		return t.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	for k, v := range t.header {
		r.Header[k] = v
	}
	return t.base.RoundTrip(r)
}

// A load is what the load generator does to one gateway: clients client
// sessions, connected first, then making calls between them until calls
// have been made or maxTime has passed, whichever comes first.
type load struct {
	clients int
	calls   int
	maxTime time.Duration
}

// A loadResult is what a load measured.
type loadResult struct {
	calls    int
	took     time.Duration
	p50, p99 time.Duration
	setupP50 time.Duration
	setupP99 time.Duration
	cpu      cpuUse // spent while the calls were made
}

func (r loadResult) perSecond() float64 { return float64(r.calls) / r.took.Seconds() }

// httpClient returns the load generator's HTTP client for up to n client
// sessions: enough idle connections kept that no call opens a new one.
func httpClient(g *gateway, n int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 4*n + 16
	tr.MaxIdleConnsPerHost = 4*n + 16
	return &http.Client{Transport: headerTransport{base: tr, header: g.header}}
}

// connectClients connects n client sessions to g, at most 8 at once,
// each bounded by ctx, and returns them with their set-up times.
func connectClients(ctx context.Context, g *gateway, hc *http.Client, n int) ([]*mcp.ClientSession, []time.Duration, error) {
	sessions := make([]*mcp.ClientSession, n)
	setup := make([]time.Duration, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			start := time.Now()
			c := mcp.NewClient(&mcp.Implementation{Name: "bench-load", Version: "1"}, nil)
			sessions[i], errs[i] = c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: g.url, HTTPClient: hc, DisableStandaloneSSE: true},
				&mcp.ClientSessionOptions{ProtocolVersion: benchProtocol})
			setup[i] = time.Since(start)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeClients(sessions)
		return nil, nil, fmt.Errorf("%s: connecting %d clients: %w", g.name, n, err)
	}
	return sessions, setup, nil
}

func closeClients(sessions []*mcp.ClientSession) {
	var wg sync.WaitGroup
	for _, cs := range sessions {
		if cs != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = cs.Close()
			}()
		}
	}
	wg.Wait()
}

// callOnce makes the upstream's tool call through cs and checks its answer.
func callOnce(ctx context.Context, cs *mcp.ClientSession, g *gateway, up benchUpstream) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: g.tool, Arguments: up.args})
	if err != nil {
		return fmt.Errorf("%s: calling %s: %w", g.name, g.tool, err)
	}
	if res.IsError || len(res.Content) != 1 {
		return fmt.Errorf("%s: tool %s: unexpected result %+v", g.name, g.tool, res)
	}
	if text, ok := res.Content[0].(*mcp.TextContent); !ok || text.Text != up.want {
		return fmt.Errorf("%s: tool %s answered %+v, want %q", g.name, g.tool, res.Content[0], up.want)
	}
	return nil
}

// drive runs l against g: connects the clients, warms each up with two
// calls, then has them call concurrently, and closes them. Every call is
// checked; the first failure ends the load.
func drive(ctx context.Context, g *gateway, up benchUpstream, l load) (loadResult, error) {
	ctx, cancel := context.WithTimeout(ctx, l.maxTime+3*time.Minute)
	defer cancel()
	hc := httpClient(g, l.clients)
	sessions, setup, err := connectClients(ctx, g, hc, l.clients)
	if err != nil {
		return loadResult{}, err
	}
	defer closeClients(sessions)
	var res loadResult
	slices.Sort(setup)
	res.setupP50, res.setupP99 = percentile(setup, 50), percentile(setup, 99)
	if err := eachClient(ctx, sessions, func(cs *mcp.ClientSession) error {
		for range 2 {
			if err := callOnce(ctx, cs, g, up); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return loadResult{}, err
	}
	var next atomic.Int64
	lats := make([][]time.Duration, len(sessions))
	cpu := g.cpuNow()
	start := time.Now()
	deadline := start.Add(l.maxTime)
	i := atomic.Int64{}
	err = eachClient(ctx, sessions, func(cs *mcp.ClientSession) error {
		mine := &lats[i.Add(1)-1]
		for next.Add(1) <= int64(l.calls) && time.Now().Before(deadline) {
			t := time.Now()
			if err := callOnce(ctx, cs, g, up); err != nil {
				return err
			}
			*mine = append(*mine, time.Since(t))
		}
		return nil
	})
	res.took = time.Since(start)
	res.cpu = g.cpuNow().since(cpu)
	if err != nil {
		return loadResult{}, err
	}
	all := slices.Concat(lats...)
	slices.Sort(all)
	res.calls = len(all)
	res.p50, res.p99 = percentile(all, 50), percentile(all, 99)
	return res, nil
}

// eachClient runs f for every session at once and returns the first error
// (cancelling the others' calls).
func eachClient(ctx context.Context, sessions []*mcp.ClientSession, f func(*mcp.ClientSession) error) error {
	errs := make([]error, len(sessions))
	var wg sync.WaitGroup
	for i, cs := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(cs)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// percentile returns the p-th percentile of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

// gatewayLoads are the loads of BenchmarkGateways by concurrency: bounded
// in calls and in time.
var gatewayLoads = []load{
	{clients: 1, calls: 1500, maxTime: 3 * time.Second},
	{clients: 8, calls: 2000, maxTime: 3 * time.Second},
	{clients: 64, calls: 3000, maxTime: 4 * time.Second},
}

// BenchmarkGateways compares wasmhost with the gateways users would pick
// instead, over the wire they use: one Go load generator (go-sdk clients
// over streamable HTTP, one client session each) drives the minimal go-sdk
// relay (serveRelay, the floor), wasmhost, mcp-proxy and supergateway
// (npm, pinned), each a process of its own with the upstream over stdio
// behind it, on the Node upstream (server-everything) and the Go one (the
// demo server), at 1, 8 and 64 concurrent clients. The gateways of one
// upstream are started once and measured in turn at each concurrency, so
// one invocation interleaves them; `make bench` runs it in rounds. Each
// sub-benchmark runs its load once, whatever b.N, and reports calls/s,
// p50-ns and p99-ns, the set-up time of a client session, and the CPU
// time each call cost, in µs, of the load generator (this process), of the
// gateway's process and of the processes it started (the upstreams). A
// peer that cannot be installed or started is reported on a line
// "gateway-missing: <name> <upstream>: <why>" and measured nowhere.
func BenchmarkGateways(b *testing.B) {
	for _, upName := range []string{"node", "go"} {
		b.Run("upstream="+upName, func(b *testing.B) {
			up := goUpstream(b)
			if upName == "node" {
				up = nodeUpstream(b)
			}
			gws := make(map[string]*gateway)
			for _, name := range gatewayNames {
				g, err := startGateway(b.Context(), b, name, up)
				if err != nil {
					if name == "relay" || name == "wasmhost" {
						b.Fatal(err)
					}
					fmt.Printf("gateway-missing: %s %s: %s\n", name, upName, oneLine(err.Error()))
					continue
				}
				defer g.close()
				gws[name] = g
			}
			for _, l := range gatewayLoads {
				for _, name := range gatewayNames {
					g := gws[name]
					if g == nil {
						continue
					}
					b.Run(fmt.Sprintf("c=%d/gw=%s", l.clients, name), func(b *testing.B) {
						res, err := drive(b.Context(), g, up, l)
						if err != nil {
							b.Fatalf("%v\n%s stderr:\n%s", err, name, g.stderr)
						}
						b.ReportMetric(res.perSecond(), "calls/s")
						b.ReportMetric(float64(res.p50.Nanoseconds()), "p50-ns")
						b.ReportMetric(float64(res.p99.Nanoseconds()), "p99-ns")
						b.ReportMetric(float64(res.setupP50.Nanoseconds()), "setup-p50-ns")
						b.ReportMetric(float64(res.calls), "calls")
						perCall := func(d time.Duration) float64 { return d.Seconds() * 1e6 / float64(res.calls) }
						b.ReportMetric(perCall(res.cpu.load), "load-cpu-us/call")
						b.ReportMetric(perCall(res.cpu.gateway), "gw-cpu-us/call")
						b.ReportMetric(perCall(res.cpu.upstream), "up-cpu-us/call")
						b.ReportMetric(0, "ns/op")
					})
				}
			}
		})
	}
}

// oneLine joins the lines of s and clips it to 300 bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// TestGatewayHarness runs BenchmarkGateways' machinery at a tiny load on
// the Go upstream: the relay and wasmhost start as processes of their own,
// the load generator's clients connect over streamable HTTP, every call
// reaches the upstream's tool and is counted, the load stops at its call
// count, and the CPU accounting finds the gateway's upstream.
func TestGatewayHarness(t *testing.T) {
	up := goUpstream(t)
	for _, name := range []string{"relay", "wasmhost"} {
		t.Run(name, func(t *testing.T) {
			g, err := startGateway(t.Context(), t, name, up)
			require.NoError(t, err)
			defer g.close()
			res, err := drive(t.Context(), g, up, load{clients: 3, calls: 20, maxTime: time.Minute})
			require.NoError(t, err, "%s stderr:\n%s", name, g.stderr)
			require.Equal(t, 20, res.calls)
			require.Positive(t, res.p99)
			require.LessOrEqual(t, res.p50, res.p99)
			rss, err := g.rss()
			require.NoError(t, err)
			require.Positive(t, rss)
			// The CPU accounting finds the upstream below the gateway
			// (through env(1)) and reads the gateway's and its own time.
			procs := processes()
			require.Len(t, procstat.Descendants(procs, g.cmd.Process.Pid), 1, "the upstream below %s", name)
			require.Positive(t, g.cpuNow().gateway, "%s has started and served calls", name)
			require.Positive(t, res.cpu.load, "the load generator's time over the load")
		})
	}
}
