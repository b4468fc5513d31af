package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
)

// headerTransport adds a header to every request.
type headerTransport struct {
	key, value string
	base       http.RoundTripper
}

func (h *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(h.key, h.value)
	return h.base.RoundTrip(req)
}

// startQuick runs `wasmhost run` with args until it prints its banner and
// returns the URL and token it printed; the command stops with the test.
func startQuick(t *testing.T, args ...string) (url, token string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var o, e mcptest.LogBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"run"}, args...), strings.NewReader(""), &o, &e) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			assert.Equal(t, exitOK, code, e.String())
		case <-time.After(30 * time.Second):
			t.Error("run did not stop")
		}
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", o.String(), e.String())
		}
	})
	require.Eventually(t, func() bool { return strings.Contains(o.String(), "Ctrl-C stops") }, within(t, readyWithin), 20*time.Millisecond, "stderr:\n%s", e.String())
	out := o.String()
	m := regexp.MustCompile(`(?m)^  url    (\S+)$`).FindStringSubmatch(out)
	require.NotNil(t, m, "no url line in:\n%s", out)
	tm := regexp.MustCompile(`(?m)^  token  (\S+)$`).FindStringSubmatch(out)
	require.NotNil(t, tm, "no token line in:\n%s", out)
	assert.Contains(t, out, `npx @modelcontextprotocol/inspector@0.17.2 --cli `+m[1]+` --transport http --header "Authorization: Bearer `+tm[1]+`" --method tools/list`)
	assert.NotContains(t, e.String(), tm[1], "the token is never logged")
	return m[1], tm[1]
}

// quickClient connects a go-sdk client to url with the bearer token.
func quickClient(t *testing.T, url, token string) *mcp.ClientSession {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cl := mcp.NewClient(&mcp.Implementation{Name: "quick-test", Version: "1"}, nil)
	cs, err := cl.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint:   url,
		HTTPClient: &http.Client{Transport: &headerTransport{key: "Authorization", value: "Bearer " + token, base: tr}},
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// TestRunOneServerWithoutConfig: `wasmhost run -- CMD ARGS...` serves that
// server as one session on loopback, without a config file, and prints a
// URL, a fresh token and a client command that work.
func TestRunOneServerWithoutConfig(t *testing.T) {
	t.Parallel()
	url, token := startQuick(t, "--listen", "127.0.0.1:0", "--name", "demo", "--", os.Args[0], "-test.run=^TestHelperDemoServer$")
	assert.Regexp(t, `^http://127\.0\.0\.1:\d+/mcp/default$`, url)
	assert.Regexp(t, `^[0-9a-f]{64}$`, token)

	cs := quickClient(t, url, token)
	names := toolNames(t, cs)
	assert.Contains(t, names, "echo")
	assert.Contains(t, names, "add")
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"a": 2, "b": 3}})
	require.NoError(t, err)
	require.False(t, res.IsError, "%+v", res.Content)
	require.NotEmpty(t, res.Content)
	assert.Contains(t, res.Content[0].(*mcp.TextContent).Text, "5")

	// A wrong token is refused.
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	_, err = mcp.NewClient(&mcp.Implementation{Name: "x", Version: "1"}, nil).Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint:   url,
		HTTPClient: &http.Client{Transport: &headerTransport{key: "Authorization", value: "Bearer not-" + token, base: tr}},
	}, nil)
	assert.Error(t, err)
}

// TestRunOneURLWithoutConfig: `wasmhost run --url URL` serves a remote
// server the same way, named after the URL's host.
func TestRunOneURLWithoutConfig(t *testing.T) {
	t.Parallel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "hello"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hi"}}}, nil, nil
	})
	remote := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(remote.Close) // after the daemon, which holds a stream open to it, has stopped

	url, token := startQuick(t, "--listen", "127.0.0.1:0", "--url", remote.URL)
	cs := quickClient(t, url, token)
	assert.Equal(t, []string{"hello"}, toolNames(t, cs))
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "hello"})
	require.NoError(t, err)
	assert.Equal(t, "hi", res.Content[0].(*mcp.TextContent).Text)

	_, token2 := startQuick(t, "--listen", "127.0.0.1:0", "--url", remote.URL)
	assert.NotEqual(t, token, token2, "every run makes a fresh token")
}

// TestRunOneServerRefusals: the one-line forms exclude --config and each
// other, and a bad URL is refused as a config would be.
func TestRunOneServerRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--config", "x.json", "--", "node", "s.js"}, `unexpected argument "node" (--config and a command exclude each other`},
		{[]string{"run", "--config", "x.json", "--url", "http://127.0.0.1:1/mcp"}, "--config and --url exclude each other"},
		{[]string{"run", "--url", "http://127.0.0.1:1/mcp", "--", "node"}, "a command and --url exclude each other"},
		{[]string{"run"}, "--config is required, or a server to serve: -- CMD ARGS... or --url URL"},
		{[]string{"run", "--listen", "127.0.0.1:0", "--url", "ftp://example.com/"}, "command line: mcpServers"},
	} {
		r := runCLI(t, "", tc.args...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", tc.args, r.errOut)
		assert.Contains(t, r.errOut, tc.want, "%v", tc.args)
	}
}

// adminState fetches /v1/state from base with the demo config's admin
// token.
func adminState(t *testing.T, base string) map[string]any {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/v1/state", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer admin-token-0123456789abcdef")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var st map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	return st
}

// sessionClients is how many clients /v1/state counts for session name.
func sessionClients(t *testing.T, base, name string) float64 {
	t.Helper()
	for _, s := range adminState(t, base)["sessions"].([]any) {
		if s := s.(map[string]any); s["name"] == name {
			return s["clients"].(float64)
		}
	}
	t.Fatalf("no session %q in /v1/state", name)
	return 0
}

// TestRunClientIdleTimeoutFlag: --client-idle-timeout closes a client
// that sent nothing for that long.
func TestRunClientIdleTimeoutFlag(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	var o, e mcptest.LogBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "--config", demoConfig(t), "--listen", "127.0.0.1:0", "--client-idle-timeout", "300ms"}, strings.NewReader(""), &o, &e)
	}()
	defer func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("stderr:\n%s", e.String())
		}
	}()
	re := regexp.MustCompile(`wasmhost listening on (\S+)`)
	require.Eventually(t, func() bool { return re.MatchString(o.String()) }, within(t, readyWithin), 20*time.Millisecond, "stderr:\n%s", e.String())
	base := re.FindStringSubmatch(o.String())[1]

	cs := quickClient(t, base+"/mcp/alice", "alice-token-0123456789abcdef")
	require.NotEmpty(t, toolNames(t, cs))
	require.Equal(t, float64(1), sessionClients(t, base, "alice"))
	require.Eventually(t, func() bool { return sessionClients(t, base, "alice") == 0 }, 60*time.Second, 50*time.Millisecond, "the idle client is closed")

	r := runCLI(t, "", "run", "--config", demoConfig(t), "--client-idle-timeout", "-1s")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "--client-idle-timeout -1s: must be 0 (never) or more")
}
