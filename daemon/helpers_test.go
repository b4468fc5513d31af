package daemon_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/wasmhost/wasmhost/daemon"
	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/internal/procgroup"
	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"
)

// TestMain doubles as the demo upstream: with demoserver.ChildEnv=1 the
// test binary serves internal/demoserver over stdio, so the end-to-end
// tests need nothing installed. Otherwise it runs the tests and checks for
// leaked goroutines.
func TestMain(m *testing.M) {
	procgroup.Main() // this binary supervises the upstreams it runs, as wasmhost does
	demoserver.RunIfChild()
	mcptest.RunSlowIfChild()
	for k, v := range tokenEnvs {
		os.Setenv(k, v)
	}
	// No usable user cache directory (none, or read-only): one for this run.
	dir, removeCache := mcptest.CacheDir(host.DefaultCacheDir())
	os.Setenv(host.CacheDirEnv, dir)
	cacheCleanup = removeCache
	warmCache()
	goleak.VerifyTestMain(closingBrowser{m})
}

// warmCache compiles the embedded plugin into the shared compilation cache
// (cacheDir) once, before any test runs: tests run in parallel, and each
// would otherwise compile it (minutes of CPU under -race) while the cache
// does not hold it yet. With the cache warm it costs one load. A failure
// is left to the tests to report.
func warmCache() {
	if p, err := host.LoadEmbedded(context.Background(), policydefault.Name, policydefault.Wasm, policydefault.SHA256, host.Options{CacheDir: cacheDir()}); err == nil {
		_ = p.Close(context.Background())
	}
}

// closingBrowser runs the tests, then closes the headless browser they
// shared (browser_test.go), before goleak looks for leaked goroutines.
type closingBrowser struct{ m *testing.M }

func (c closingBrowser) Run() int {
	defer cacheCleanup()
	defer closeBrowser()
	return c.m.Run()
}

// cacheCleanup removes the compilation cache TestMain made, if it made one.
var cacheCleanup = func() {}

// cacheDir is the compilation cache the tests share with the CLI.
func cacheDir() string { return host.DefaultCacheDir() }

// warmed runs warmPlugin's compilation once per plugin path.
var warmed mcptest.OnceByKey

// warmPlugin compiles and meters the plugin at path into the shared cache
// first, with no deadline (under -race on a busy machine a cold compile
// takes longer than start waits), once per test process: tests in parallel
// that use the same plugin wait for that one compilation instead of each
// compiling it while the cache lacks it.
func warmPlugin(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, warmed.Do(path, func() error {
		p, err := host.LoadFile(context.Background(), path, host.Options{CacheDir: cacheDir(), CallTimeout: time.Minute})
		if err != nil {
			return err
		}
		return p.Close(context.Background())
	}), "compile %s", path)
}

const (
	aliceToken = "alice-token-0123456789abcdef"
	bobToken   = "bob-token-0123456789abcdef"
	adminToken = "admin-token-0123456789abcdef"
)

// baseConfig is a config with two sessions over one shared demo upstream
// (this test binary). Keys can be replaced with set.
func baseConfig() map[string]any {
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	return map[string]any{
		"listen": "127.0.0.1:0",
		"admin":  map[string]any{"token": adminToken},
		"mcpServers": map[string]any{
			"demo": map[string]any{
				"command": self,
				"env":     map[string]any{demoserver.ChildEnv: "1"},
			},
		},
		"sessions": map[string]any{
			"alice": map[string]any{
				"token":     aliceToken,
				"overrides": map[string]any{"demo": map[string]any{"trust": true, "includeTools": []string{"echo", "add", "pid"}}},
			},
			"bob": map[string]any{
				"token":     bobToken,
				"overrides": map[string]any{"demo": map[string]any{"excludeTools": []string{"write_note", "add_tool"}}},
			},
		},
	}
}

// A running daemon and its config file.
type running struct {
	t    *testing.T
	d    *daemon.Daemon
	path string
	logs *mcptest.LogBuffer
	http *http.Client
	// adminOnly is set when the file watcher's debounce outlasts any test
	// (adminReloadsOnly), so that reloads come from the admin API alone.
	adminOnly bool
	// stop cancels Run and waits for it to return (once; later calls
	// return at once).
	stop func()
}

// adminReloadsOnly leaves reloads to the admin API, so that each
// reloadWith reports the change it made: with the watcher's short
// debounce, the watcher could apply the written file first, and the admin
// reload would then find nothing changed (seen under load).
func adminReloadsOnly(o *daemon.Options) { o.Debounce = time.Hour }

// defaultNames, as a session's "names" in a config writeConfig writes,
// leaves the session the default naming.
const defaultNames = "(default)"

// pinNames returns a copy of cfg in which each session without "names"
// has "prefixed": these tests name tools and prompts "<server>__<name>",
// which the default naming ("auto") does only on a clash. A session whose
// "names" is defaultNames has the key removed.
func pinNames(t *testing.T, cfg any) any {
	t.Helper()
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	var c map[string]any
	if json.Unmarshal(b, &c) != nil {
		return cfg
	}
	sessions, _ := c["sessions"].(map[string]any)
	for _, s := range sessions {
		s, ok := s.(map[string]any)
		if !ok {
			continue
		}
		switch v, ok := s["names"]; {
		case !ok:
			s["names"] = "prefixed"
		case v == defaultNames:
			delete(s, "names")
		}
	}
	return c
}

// writeConfig replaces the config file the way editors do: write a
// temporary file, then rename it over the old one.
func writeConfig(t *testing.T, path string, cfg any) {
	t.Helper()
	var data []byte
	switch c := cfg.(type) {
	case string:
		data = []byte(c)
	default:
		var err error
		data, err = json.MarshalIndent(pinNames(t, c), "", "  ")
		require.NoError(t, err)
	}
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, data, 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

func start(t *testing.T, cfg map[string]any, opts ...func(*daemon.Options)) *running {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "wasmhost.json")
	writeConfig(t, path, cfg)
	logs := &mcptest.LogBuffer{}
	o := daemon.Options{
		ConfigPath: path,
		Logger:     slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Listen:     "127.0.0.1:0",
		CacheDir:   cacheDir(),
		Debounce:   50 * time.Millisecond,
		RetryMin:   100 * time.Millisecond,
		RetryMax:   time.Second,
	}
	for _, f := range opts {
		f(&o)
	}
	d, err := daemon.New(o)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case <-d.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("daemon did not start: %v\nlogs:\n%s", err, logs)
	case <-time.After(within(t, readyWithin)):
		// The goroutines' stacks say where the start is stuck.
		st := stacks()
		cancel()
		t.Fatalf("daemon not ready within %v; logs:\n%s\ngoroutines:\n%s", readyWithin, logs, st)
	}
	r := &running{t: t, d: d, path: path, logs: logs, http: &http.Client{Transport: &http.Transport{}}, adminOnly: o.Debounce >= time.Hour}
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(within(t, readyWithin)): // shutdown grace plus the upstream close grace, loaded
				t.Errorf("daemon did not stop within %v; logs:\n%s\ngoroutines:\n%s", readyWithin, logs, stacks())
			}
		})
	}
	t.Cleanup(func() {
		r.stop()
		r.http.CloseIdleConnections()
		if t.Failed() {
			t.Logf("daemon logs:\n%s", logs)
		}
	})
	return r
}

// bearerTransport adds a bearer token (and optional headers) to requests.
type bearerTransport struct {
	token   string
	headers map[string]string
	base    http.RoundTripper
}

func (b *bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if b.token != "" {
		req.Header.Set("Authorization", "Bearer "+b.token)
	}
	for k, v := range b.headers {
		req.Header.Set(k, v)
	}
	return b.base.RoundTrip(req)
}

// A client is a go-sdk MCP client of one session over HTTP.
type client struct {
	cs      *mcp.ClientSession
	changed chan struct{}
}

func (r *running) dial(session, token string, opts ...func(*mcp.ClientOptions)) (*client, error) {
	c := &client{changed: make(chan struct{}, 100)}
	tr := &http.Transport{}
	o := &mcp.ClientOptions{
		Logger:                 slog.New(slog.DiscardHandler),
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { c.changed <- struct{}{} },
	}
	for _, f := range opts {
		f(o)
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "e2e-" + session, Version: "1"}, o)
	ctx, cancel := context.WithTimeout(context.Background(), within(r.t, eventWithin))
	defer cancel()
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   r.d.URL() + "/mcp/" + session,
		HTTPClient: &http.Client{Transport: &bearerTransport{token: token, base: tr}},
	}, nil)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, err
	}
	c.cs = cs
	r.t.Cleanup(func() {
		_ = cs.Close()
		tr.CloseIdleConnections()
	})
	return c, nil
}

func (r *running) connect(session, token string, opts ...func(*mcp.ClientOptions)) *client {
	r.t.Helper()
	c, err := r.dial(session, token, opts...)
	require.NoError(r.t, err)
	return c
}

func (c *client) tools(t *testing.T) []string {
	t.Helper()
	names, err := mcptest.ToolNames(t.Context(), c.cs)
	require.NoError(t, err)
	return names
}

func (c *client) call(t *testing.T, name string, args any) (*mcp.CallToolResult, error) {
	t.Helper()
	return c.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
}

func resultText(res *mcp.CallToolResult) string { return mcptest.Text(res) }

// pid asks the shared upstream, through c, for its process id.
func (c *client) pid(t *testing.T) int {
	t.Helper()
	res, err := c.call(t, "demo__pid", map[string]any{})
	require.NoError(t, err)
	require.False(t, res.IsError, resultText(res))
	pid, err := strconv.Atoi(resultText(res))
	require.NoError(t, err)
	return pid
}

func (c *client) waitChanged(t *testing.T) {
	t.Helper()
	select {
	case <-c.changed:
	case <-time.After(within(t, eventWithin)):
		t.Fatalf("no tools/list_changed within %v", eventWithin)
	}
}

// countChanged reports how many list_changed arrived within d.
func (c *client) countChanged(d time.Duration) int {
	deadline := time.After(d)
	n := 0
	for {
		select {
		case <-c.changed:
			n++
		case <-deadline:
			return n
		}
	}
}

// do sends an HTTP request to the daemon and returns status and body.
func (r *running) do(method, path, token string, body io.Reader, headers map[string]string) (int, string) {
	r.t.Helper()
	req, err := http.NewRequest(method, r.d.URL()+path, body)
	require.NoError(r.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := r.http.Do(req)
	require.NoError(r.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// state fetches /v1/state.
func (r *running) state() daemon.State {
	r.t.Helper()
	code, body := r.do("GET", "/v1/state", adminToken, nil, nil)
	require.Equal(r.t, http.StatusOK, code, body)
	var st daemon.State
	require.NoError(r.t, json.Unmarshal([]byte(body), &st))
	return st
}

// waitLog waits until the logs contain s.
func (r *running) waitLog(s string) {
	r.t.Helper()
	waitFor(r.t, eventWithin, func() bool { return strings.Contains(r.logs.String(), s) }, r.logs.String, "log %q", s)
}

// countLog counts the log lines containing s.
func (r *running) countLog(s string) int {
	return strings.Count(r.logs.String(), s)
}

// set returns cfg with the value at the dotted path replaced.
func set(cfg map[string]any, path string, v any) map[string]any {
	keys := strings.Split(path, ".")
	m := cfg
	for _, k := range keys[:len(keys)-1] {
		m = m[k].(map[string]any)
	}
	m[keys[len(keys)-1]] = v
	return cfg
}

// skipEndToEndIfShort skips a test under -short: it runs a daemon, an
// upstream process and the default plugin, and -short keeps a faster test
// of its area.
func skipEndToEndIfShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end to end (a daemon, an upstream process, the default plugin); -short keeps a faster test of this area; run without -short")
	}
}
