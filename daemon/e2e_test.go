package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/daemon"
	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"
	"github.com/wasmhost/wasmhost/view"
)

func TestTwoSessionsShareOneUpstream(t *testing.T) {
	t.Parallel()
	r := start(t, baseConfig())
	alice := r.connect("alice", aliceToken)
	bob := r.connect("bob", bobToken)

	assert.Equal(t, []string{"demo__add", "demo__echo", "demo__pid"}, alice.tools(t))
	assert.Equal(t, []string{"demo__add", "demo__echo", "demo__pid", "demo__read_note"}, bob.tools(t))

	// The session flags are in _meta.
	res, err := alice.cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	for _, tool := range res.Tools {
		assert.Equal(t, true, tool.Meta[view.MetaTrust], tool.Name)
	}
	res, err = bob.cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	for _, tool := range res.Tools {
		assert.Equal(t, false, tool.Meta[view.MetaTrust], tool.Name)
	}

	// A call works through each session, on the same upstream process.
	for _, c := range []*client{alice, bob} {
		out, err := c.call(t, "demo__echo", map[string]any{"text": "hi"})
		require.NoError(t, err)
		assert.Equal(t, "hi", resultText(out))
	}
	pid := alice.pid(t)
	assert.Equal(t, pid, bob.pid(t))

	st := r.state()
	require.Len(t, st.Pool, 1)
	assert.Equal(t, "ready", st.Pool[0].State)
	assert.Equal(t, 2, st.Pool[0].Refs)
	assert.Equal(t, pid, st.Pool[0].PID)
	require.Len(t, st.Sessions, 2)
	assert.Equal(t, "alice", st.Sessions[0].Name)
	assert.Equal(t, []string{"demo__add", "demo__echo", "demo__pid"}, st.Sessions[0].Tools)
	assert.Equal(t, 1, st.Sessions[0].Clients)
	assert.Equal(t, "policy-default", st.Policy.Name)

	// Prompts and resources are forwarded too.
	pr, err := bob.cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "demo__greet"})
	require.NoError(t, err)
	require.Len(t, pr.Messages, 1)
	rr, err := bob.cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "demo://about"})
	require.NoError(t, err)
	assert.Equal(t, "wasmhost demo server 1.0.0", rr.Contents[0].Text)
	cr, err := bob.cs.Complete(t.Context(), &mcp.CompleteParams{
		Ref:      &mcp.CompleteReference{Type: "ref/prompt", Name: "demo__summarize"},
		Argument: mcp.CompleteParamsArgument{Name: "name", Value: "w"},
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"welcome"}, cr.Completion.Values)

	// A guessed hidden tool is refused, though the upstream has it and bob
	// could otherwise write notes visible to alice.
	for _, name := range []string{"demo__write_note", "write_note", "demo__add_tool"} {
		_, err := bob.call(t, name, map[string]any{"name": "x", "text": "y"})
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "unknown tool")
	}
	_, err = alice.call(t, "demo__read_note", map[string]any{"name": "welcome"})
	require.Error(t, err)

	code, body := r.do("GET", "/metrics", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `wasmhost_pool_entries{state="ready"} 1`)
	assert.Contains(t, body, "wasmhost_upstream_connects_total 1")
	assert.Contains(t, body, `wasmhost_policy_call_duration_seconds_count{export="project",outcome="ok"}`)
}

// TestShutdownLeavesNothingBehind stops a daemon that had a live upstream
// and a connected client: the upstream process is gone (reaped, so ESRCH),
// no temporary file is left, and TestMain's goleak finds no goroutine.
func TestShutdownLeavesNothingBehind(t *testing.T) {
	// The test's temp root is made before TMPDIR moves, so the config
	// start writes does not count.
	tmp := filepath.Join(t.TempDir(), "tmp")
	require.NoError(t, os.Mkdir(tmp, 0o700))
	t.Setenv("TMPDIR", tmp)

	r := start(t, baseConfig())
	c := r.connect("alice", aliceToken)
	pid := c.pid(t)
	require.NoError(t, syscall.Kill(pid, 0), "the upstream runs")
	r.stop()

	require.Eventually(t, func() bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) },
		10*time.Second, 20*time.Millisecond, "upstream pid %d outlived the daemon", pid)
	entries, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, entries, "temporary files left behind")
}

func TestConfigEditNotifiesOnlyTheAffectedSession(t *testing.T) {
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	r := start(t, cfg)
	alice := r.connect("alice", aliceToken)
	bob := r.connect("bob", bobToken)
	pid := alice.pid(t)
	alice.countChanged(100 * time.Millisecond)
	bob.countChanged(0)

	writeConfig(t, r.path, set(cfg, "sessions.alice.overrides.demo.includeTools", []string{"echo", "add", "pid", "read_note"}))
	alice.waitChanged(t)
	assert.Equal(t, []string{"demo__add", "demo__echo", "demo__pid", "demo__read_note"}, alice.tools(t))
	r.waitLog("reload (watch config): 1 session changed (alice); transports 1 reused, 0 started, 0 stopped; 1 view replayed; 1 client notified; policy unchanged")
	assert.Equal(t, 0, bob.countChanged(300*time.Millisecond), "bob's view did not change")
	assert.Equal(t, pid, alice.pid(t), "the upstream process is the same")
	assert.Equal(t, pid, bob.pid(t))
	// The reload projected alice's new view in a batch (reconcile.prefill).
	_, metrics := r.do("GET", "/metrics", adminToken, nil, nil)
	assert.Contains(t, metrics, `wasmhost_policy_call_duration_seconds_count{export="project_batch",outcome="ok"} 1`)

	// An invalid edit is reported with its location; the old config keeps
	// serving.
	writeConfig(t, r.path, strings.Replace(mustJSON(t, set(cfg, "sessions.alice.overrides.demo.includeTools", []string{"echo"})), `"echo"`, `42`, 1))
	r.waitLog("reload refused, the running config keeps serving")
	assert.Contains(t, r.logs.String(), r.path+": sessions.alice.overrides.demo.includeTools[0]: expected a string")
	writeConfig(t, r.path, "{ not json")
	require.Eventually(t, func() bool { return r.countLog("reload refused") >= 2 }, eventWithin, 20*time.Millisecond)
	assert.Equal(t, []string{"demo__add", "demo__echo", "demo__pid", "demo__read_note"}, alice.tools(t))
	out, err := alice.call(t, "demo__read_note", map[string]any{"name": "welcome"})
	require.NoError(t, err)
	assert.False(t, out.IsError)
	assert.Equal(t, 0, alice.countChanged(100*time.Millisecond))
	st := r.state()
	require.NotNil(t, st.LastReload)
	assert.False(t, st.LastReload.Applied)
	assert.Len(t, st.Pool, 1)

	// The admin endpoint and SIGHUP reload as well.
	writeConfig(t, r.path, set(cfg, "sessions.alice.overrides.demo.includeTools", []string{"echo"}))
	code, body := r.do("POST", "/v1/reload", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `"changed": [`)
	alice.waitChanged(t)
	assert.Equal(t, []string{"demo__echo"}, alice.tools(t))
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	r.waitLog("SIGHUP): no session changed") // may be merged with a late watch event
}

// mustJSON encodes v as writeConfig writes it.
func mustJSON(t *testing.T, v map[string]any) string {
	t.Helper()
	b, err := json.MarshalIndent(pinNames(t, v), "", "  ")
	require.NoError(t, err)
	return string(b)
}

func TestTokensAndRebindingChecks(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	r := start(t, baseConfig())

	// alice's token opens alice's endpoint only.
	r.connect("alice", aliceToken)
	_, err := r.dial("bob", aliceToken)
	require.Error(t, err)
	_, err = r.dial("bob", "")
	require.Error(t, err)
	_, err = r.dial("nobody", aliceToken)
	require.Error(t, err)

	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	mcpHeaders := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
	code, _ := r.do("POST", "/mcp/bob", aliceToken, strings.NewReader(init), mcpHeaders)
	assert.Equal(t, http.StatusUnauthorized, code)
	code, _ = r.do("POST", "/mcp/bob", bobToken, strings.NewReader(init), mcpHeaders)
	assert.Equal(t, http.StatusOK, code)
	// The answers are all alike; the log tells the operator which.
	assert.True(t, r.logs.HasLine("level=INFO", "refused MCP request: wrong token: the token of session alice", "session=bob"), r.logs.String())
	assert.True(t, r.logs.HasLine("level=INFO", "refused MCP request: no Authorization header", "session=bob"), r.logs.String())
	assert.True(t, r.logs.HasLine("level=INFO", "refused MCP request: no such session", "session=nobody"), r.logs.String())
	assert.False(t, r.logs.HasLine("refused MCP request: no such session", "session=bob"), r.logs.String())

	// The admin API has its own token.
	for _, tok := range []string{aliceToken, bobToken, ""} {
		code, _ := r.do("GET", "/v1/state", tok, nil, nil)
		assert.Equal(t, http.StatusUnauthorized, code)
		code, _ = r.do("POST", "/v1/reload", tok, nil, nil)
		assert.Equal(t, http.StatusUnauthorized, code)
		code, _ = r.do("GET", "/metrics", tok, nil, nil)
		assert.Equal(t, http.StatusUnauthorized, code)
	}
	code, body := r.do("GET", "/v1/state", adminToken, nil, nil)
	assert.Equal(t, http.StatusOK, code)
	var raw struct{ Counters map[string]int64 }
	require.NoError(t, json.Unmarshal([]byte(body), &raw))
	assert.Contains(t, raw.Counters, "connects", "counters are named in camelCase like the rest of the state")
	assert.NotContains(t, raw.Counters, "Connects")
	code, _ = r.do("POST", "/mcp/alice", adminToken, strings.NewReader(init), mcpHeaders)
	assert.Equal(t, http.StatusUnauthorized, code, "the admin token is not a session token")

	// DNS rebinding: a foreign Host or Origin is refused before any token
	// check; loopback and same-host ones pass.
	port := r.d.Addr()[strings.LastIndex(r.d.Addr(), ":"):]
	for _, h := range []map[string]string{
		{"Host": "evil.example" + port},
		{"Host": "evil.example"},
		{"Origin": "http://evil.example"},
		{"Origin": "null"},
		{"Host": "localhost" + port, "Origin": "https://attacker.test" + port},
	} {
		code, _ := r.do("GET", "/v1/state", adminToken, nil, h)
		assert.Equal(t, http.StatusForbidden, code, "%v", h)
		code, _ = r.do("POST", "/mcp/alice", aliceToken, strings.NewReader(init), merge(mcpHeaders, h))
		assert.Equal(t, http.StatusForbidden, code, "%v", h)
		code, _ = r.do("GET", "/healthz", "", nil, h)
		assert.Equal(t, http.StatusForbidden, code, "%v", h)
	}
	for _, h := range []map[string]string{
		{"Host": "localhost" + port},
		{"Host": "127.0.0.1" + port, "Origin": "http://127.0.0.1" + port},
		{"Origin": "http://localhost:3000"},
		{"Host": "[::1]" + port},
	} {
		code, _ := r.do("GET", "/v1/state", adminToken, nil, h)
		assert.Equal(t, http.StatusOK, code, "%v", h)
	}
	code, body = r.do("GET", "/healthz", "", nil, nil)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok\n", body)

	// Tokens never reach the logs.
	for _, tok := range []string{aliceToken, bobToken, adminToken} {
		assert.NotContains(t, r.logs.String(), tok)
	}
}

func merge(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

func TestPolicySwapRekeysViewsWithoutReconnect(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	dir := t.TempDir()
	plugin := filepath.Join(dir, "policy.wasm")
	require.NoError(t, os.WriteFile(plugin, policydefault.Wasm, 0o644))
	prefixWasm, err := os.ReadFile("../testplugins/prefix-policy/prefix-policy.wasm")
	require.NoError(t, err)
	// Compile the prefix policy into the shared cache first: a cold compile
	// under -race on a busy machine can take longer than the waits below,
	// and this test is about re-keying, not compile time.
	warm, err := host.Load(t.Context(), "prefix-policy", prefixWasm, host.Options{CacheDir: cacheDir()})
	require.NoError(t, err)
	require.NoError(t, warm.Close(t.Context()))

	cfg := set(baseConfig(), "policy", map[string]any{"path": plugin})
	r := start(t, cfg)
	alice := r.connect("alice", aliceToken)
	bob := r.connect("bob", bobToken)
	pid := alice.pid(t)
	require.Equal(t, []string{"demo__add", "demo__echo", "demo__pid"}, alice.tools(t))
	alice.countChanged(100 * time.Millisecond)
	bob.countChanged(0)

	// Replacing the plugin file's content swaps the policy: the prefix
	// policy reads includeTools as prefixes ("add" also shows add_tool)
	// and shows nothing to a session without includeTools.
	tmp := plugin + ".new"
	require.NoError(t, os.WriteFile(tmp, prefixWasm, 0o644))
	require.NoError(t, os.Rename(tmp, plugin))
	alice.waitChanged(t)
	bob.waitChanged(t)
	r.waitLog("policy swapped to prefix-policy 1.0.0")
	assert.Equal(t, []string{"demo__add", "demo__add_tool", "demo__echo", "demo__pid"}, alice.tools(t))
	assert.Empty(t, bob.tools(t))
	assert.Equal(t, pid, alice.pid(t), "no transport was touched")
	st := r.state()
	assert.Equal(t, "prefix-policy", st.Policy.Name)
	assert.Equal(t, 1, len(st.Pool))
	assert.Equal(t, `{"prefixes":["add","echo","pid"]}`, st.Sessions[0].Servers[0].Key)

	// A bad plugin is refused; the running one keeps working.
	require.NoError(t, os.WriteFile(tmp, []byte("not wasm at all"), 0o644))
	require.NoError(t, os.Rename(tmp, plugin))
	r.waitLog("policy plugin refused")
	assert.Equal(t, "prefix-policy", r.state().Policy.Name)
	assert.Equal(t, []string{"demo__add", "demo__add_tool", "demo__echo", "demo__pid"}, alice.tools(t))

	// Pointing the config at another file (the default policy, pinned)
	// swaps back.
	good := filepath.Join(dir, "default.wasm")
	require.NoError(t, os.WriteFile(good, policydefault.Wasm, 0o644))
	writeConfig(t, r.path, set(cfg, "policy", map[string]any{"path": good, "sha256": r.state().Policy.SHA256}))
	// A pin that does not match is refused.
	require.Eventually(t, func() bool { return r.countLog("policy plugin refused") >= 2 }, eventWithin, 20*time.Millisecond)
	assert.Equal(t, "prefix-policy", r.state().Policy.Name)
	writeConfig(t, r.path, set(cfg, "policy", map[string]any{"path": good}))
	r.waitLog("policy swapped to policy-default 1.0.0")
	require.Eventually(t, func() bool { return len(bob.tools(t)) == 4 }, eventWithin, 20*time.Millisecond)
	assert.Equal(t, []string{"demo__add", "demo__echo", "demo__pid"}, alice.tools(t))
	assert.Equal(t, pid, bob.pid(t), "no transport was touched")
}

func TestKilledUpstreamIsRestarted(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	r := start(t, baseConfig())
	alice := r.connect("alice", aliceToken)
	bob := r.connect("bob", bobToken)
	pid := alice.pid(t)
	before := alice.tools(t)

	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	var next int
	require.Eventually(t, func() bool {
		res, err := alice.call(t, "demo__pid", map[string]any{})
		if err != nil || res.IsError {
			return false
		}
		next = alice.pid(t)
		return true
	}, eventWithin, 50*time.Millisecond)
	assert.NotEqual(t, pid, next)
	assert.Equal(t, next, bob.pid(t), "both sessions share the restarted upstream")
	assert.Equal(t, before, alice.tools(t), "no duplicate or missing registrations")
	st := r.state()
	require.Len(t, st.Pool, 1)
	assert.Equal(t, next, st.Pool[0].PID)
	assert.Equal(t, "ready", st.Pool[0].State)

	// The admin API restarts an upstream on request.
	code, body := r.do("POST", "/v1/servers/demo/restart", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, code, body)
	assert.NotEqual(t, next, alice.pid(t))
	code, _ = r.do("POST", "/v1/servers/nope/restart", adminToken, nil, nil)
	assert.Equal(t, http.StatusNotFound, code)
}

func TestUnreachableUpstreamIsRetried(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	missing := filepath.Join(t.TempDir(), "not-yet")
	set(cfg, "mcpServers.demo.command", missing)
	r := start(t, cfg)
	alice := r.connect("alice", aliceToken)
	assert.Empty(t, alice.tools(t))
	r.waitLog("upstream retry failed")
	st := r.state()
	require.NotEmpty(t, st.Sessions[0].Servers)
	assert.NotEmpty(t, st.Sessions[0].Servers[0].Error)
	// alice and bob share the server: once one's retry failed, the other's
	// waits for the next round rather than trying again a moment later.
	r.waitLog("upstream retry put off: the same server failed a moment ago")

	// Once the command exists, a retry connects and the client is told.
	self, err := os.Executable()
	require.NoError(t, err)
	require.NoError(t, os.Symlink(self, missing))
	alice.waitChanged(t)
	require.Eventually(t, func() bool { return len(alice.tools(t)) == 3 }, eventWithin, 20*time.Millisecond)
	alice.pid(t)
}

func TestAdminOverlay(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	r := start(t, baseConfig())
	alice := r.connect("alice", aliceToken)
	pid := alice.pid(t)
	alice.countChanged(100 * time.Millisecond)

	self, err := os.Executable()
	require.NoError(t, err)
	entry := mustJSON(t, map[string]any{"command": self, "env": map[string]any{demoserver.ChildEnv: "1"}, "includeTools": []string{"echo"}})
	code, body := r.do("PUT", "/v1/sessions/alice/servers/demo", adminToken, strings.NewReader(entry), nil)
	require.Equal(t, http.StatusOK, code, body)
	alice.waitChanged(t)
	assert.Equal(t, []string{"demo__echo"}, alice.tools(t))
	assert.Contains(t, body, "transports 1 reused, 0 started, 0 stopped")

	code, body = r.do("DELETE", "/v1/sessions/alice/servers/demo", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, code, body)
	alice.waitChanged(t)
	assert.Equal(t, []string{"demo__add", "demo__echo", "demo__pid"}, alice.tools(t))
	assert.Equal(t, pid, alice.pid(t))

	// Bad requests are refused with the path of the problem.
	code, body = r.do("PUT", "/v1/sessions/alice/servers/demo", adminToken, strings.NewReader(`{"command": 7}`), nil)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "request body: command: expected a string")
	assert.NotContains(t, body, "mcpServers", "paths are the body's own")
	code, body = r.do("PUT", "/v1/sessions/alice/servers/demo", adminToken, strings.NewReader(`{"args": []}`), nil)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.NotContains(t, body, "mcpServers", "paths are the body's own: %s", body)
	huge := `{"description":"` + strings.Repeat("x", 1<<20) + `"}`
	code, body = r.do("PUT", "/v1/sessions/alice/servers/demo", adminToken, strings.NewReader(huge), nil)
	assert.Equal(t, http.StatusRequestEntityTooLarge, code)
	assert.Contains(t, body, "request body larger than 1 MiB")
	code, _ = r.do("PUT", "/v1/sessions/nobody/servers/demo", adminToken, strings.NewReader(entry), nil)
	assert.Equal(t, http.StatusNotFound, code)
	code, _ = r.do("DELETE", "/v1/sessions/alice/servers/demo", adminToken, nil, nil)
	assert.Equal(t, http.StatusNotFound, code)
	// A failed overlay change is a warning with its error; a done one has
	// no empty error beside it.
	assert.Contains(t, r.logs.String(), `level=WARN msg="overlay delete failed: `)
	assert.NotContains(t, r.logs.String(), `err=""`)

	// An unknown key is refused as in a file entry, with the key meant;
	// a key gemini-cli has and wasmhost ignores is a warning, in the
	// answer and in the log.
	typo := mustJSON(t, map[string]any{"command": self, "env": map[string]any{demoserver.ChildEnv: "1"}, "includeTool": []string{"echo"}})
	code, body = r.do("PUT", "/v1/sessions/alice/servers/demo", adminToken, strings.NewReader(typo), nil)
	require.Equal(t, http.StatusBadRequest, code, body)
	assert.Contains(t, body, `request body: includeTool: unknown key; did you mean \"includeTools\"?`)
	ignored := mustJSON(t, map[string]any{"command": self, "env": map[string]any{demoserver.ChildEnv: "1"}, "includeTools": []string{"echo"}, "oauth": map[string]any{}})
	code, body = r.do("PUT", "/v1/sessions/alice/servers/demo", adminToken, strings.NewReader(ignored), nil)
	require.Equal(t, http.StatusOK, code, body)
	var res struct{ Warnings []string }
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	assert.Equal(t, []string{"request body: oauth: not supported by wasmhost, ignored"}, res.Warnings)
	assert.Contains(t, r.logs.String(), "overlay put: request body: oauth: not supported by wasmhost, ignored")
}

func TestStartupRefusals(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.json")
	writeConfig(t, path, `{"sessions": {"a": {"token": 5}}}`)
	d, err := daemon.New(daemon.Options{ConfigPath: path, Logger: slog.New(slog.DiscardHandler), CacheDir: cacheDir()})
	require.NoError(t, err)
	err = d.Run(t.Context())
	require.ErrorIs(t, err, config.ErrInvalid)
	assert.Contains(t, err.Error(), path+": sessions.a.token: expected a string")

	good := filepath.Join(dir, "good.json")
	writeConfig(t, good, baseConfig())
	d, err = daemon.New(daemon.Options{ConfigPath: good, Listen: "0.0.0.0:0", Logger: slog.New(slog.DiscardHandler), CacheDir: cacheDir()})
	require.NoError(t, err)
	err = d.Run(t.Context())
	require.ErrorIs(t, err, daemon.ErrNotLoopback)

	// With AllowRemote it serves; Host checks accept the extra allowed
	// host, the loopback names and the local IP, nothing else.
	r := start(t, baseConfig(), func(o *daemon.Options) {
		o.Listen = "0.0.0.0:0"
		o.AllowRemote = true
		o.AllowedHosts = []string{"gateway.internal"}
	})
	code, _ := r.do("GET", "/healthz", "", nil, map[string]string{"Host": "gateway.internal"})
	assert.Equal(t, http.StatusOK, code)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	code, body := r.do("POST", "/mcp/alice", aliceToken, strings.NewReader(init), map[string]string{
		"Host": "gateway.internal", "Origin": "https://gateway.internal", "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
	})
	assert.Equal(t, http.StatusOK, code, body)
	code, _ = r.do("GET", "/healthz", "", nil, map[string]string{"Host": "evil.example"})
	assert.Equal(t, http.StatusForbidden, code)
	code, _ = r.do("GET", "/healthz", "", nil, map[string]string{"Host": "127.0.0.1"})
	assert.Equal(t, http.StatusOK, code)
}

func TestThirdPartyUpstreamServerEverything(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("skipped in -short mode: needs npx and the npm registry")
	}
	npx, err := exec.LookPath("npx")
	if err != nil {
		t.Skip("skipped: npx is not installed")
	}
	// Fetch the package first (bounded), so the daemon's connect does not
	// race the download.
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	warm := exec.CommandContext(ctx, npx, "-y", "--package", mcptest.ServerEverything, "--", "node", "-e", "0")
	if out, err := warm.CombinedOutput(); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Skipf("skipped: npm could not fetch %s within 60s", mcptest.ServerEverything)
		}
		t.Skipf("skipped: npm could not fetch %s: %v\n%s", mcptest.ServerEverything, err, out)
	}

	cfg := baseConfig()
	set(cfg, "mcpServers", map[string]any{
		"everything": map[string]any{"command": npx, "args": []string{"-y", mcptest.ServerEverything, "stdio"}, "timeout": 60000},
	})
	set(cfg, "sessions", map[string]any{
		"alice": map[string]any{"token": aliceToken, "overrides": map[string]any{"everything": map[string]any{
			"includeTools": []string{"echo", "get-sum", "trigger-long-running-operation"},
		}}},
	})
	r := start(t, cfg)
	var progress []string
	var mu sync.Mutex
	alice := r.connect("alice", aliceToken, func(o *mcp.ClientOptions) {
		o.ProgressNotificationHandler = func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			progress = append(progress, fmt.Sprint(req.Params.ProgressToken, " ", req.Params.Progress))
			mu.Unlock()
		}
	})
	require.Eventually(t, func() bool { return len(alice.tools(t)) == 3 }, 60*time.Second, 100*time.Millisecond, "logs:\n%s", r.logs)
	assert.Equal(t, []string{"everything__echo", "everything__get-sum", "everything__trigger-long-running-operation"}, alice.tools(t))
	res, err := alice.call(t, "everything__echo", map[string]any{"message": "through wasmhost"})
	require.NoError(t, err)
	assert.Equal(t, "Echo: through wasmhost", resultText(res))
	res, err = alice.call(t, "everything__get-sum", map[string]any{"a": 2, "b": 3})
	require.NoError(t, err)
	assert.Contains(t, resultText(res), "5")
	_, err = alice.call(t, "everything__get-env", map[string]any{})
	require.Error(t, err, "a tool outside the filter is refused")

	// Progress notifications come back with the client's own token.
	params := &mcp.CallToolParams{Name: "everything__trigger-long-running-operation", Arguments: map[string]any{"duration": 0.3, "steps": 3}}
	params.SetProgressToken("e2e-progress")
	res, err = alice.cs.CallTool(t.Context(), params)
	require.NoError(t, err)
	assert.False(t, res.IsError, resultText(res))
	// The client may handle the last notification after the response.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(progress) >= 3
	}, eventWithin, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"e2e-progress 1", "e2e-progress 2", "e2e-progress 3"}, progress)
}

// TestIdleClientSessionsClose: a client that leaves without ending its
// session (no DELETE) is closed once it has sent nothing for
// ClientIdleTimeout, so it is no longer counted or notified; a client that
// keeps making requests stays.
func TestIdleClientSessionsClose(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	// Long enough for a connect on a loaded machine: a session that times
	// out before the client's first request after initialize is made
	// again by the go-sdk client, and would be counted twice meanwhile.
	r := start(t, baseConfig(), func(o *daemon.Options) { o.ClientIdleTimeout = time.Second })
	r.connect("alice", aliceToken) // never used again, never closed
	busy := r.connect("bob", bobToken)
	clients := func() map[string]int {
		out := make(map[string]int)
		for _, s := range r.state().Sessions {
			out[s.Name] = s.Clients
		}
		return out
	}
	require.GreaterOrEqual(t, clients()["alice"], 1, "the idle client is counted until it is closed")
	waitFor(t, eventWithin, func() bool {
		busy.tools(t) // bob keeps his session busy
		return clients()["alice"] == 0
	}, r.logs.String, "the idle client closed (clients: %v)", lazy(func() string { return fmt.Sprint(clients()) }))
	assert.Equal(t, 1, clients()["bob"], "a client making requests stays")
}

// TestShutdownAnswersCallsUnderWay: a tool call under way when the daemon
// is told to stop gets its answer before the daemon closes the session.
func TestShutdownAnswersCallsUnderWay(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	self, err := os.Executable()
	require.NoError(t, err)
	cfg := baseConfig()
	cfg["mcpServers"] = map[string]any{"slow": map[string]any{"command": self, "env": map[string]any{mcptest.SlowEnv: "1"}}}
	cfg["sessions"] = map[string]any{"alice": map[string]any{"token": aliceToken}}
	r := start(t, cfg)
	c := r.connect("alice", aliceToken)
	answered := mcptest.StartSlow(t, c.cs, "slow__slow", 1500, 0)
	r.stop()
	select {
	case res := <-answered:
		require.NotNil(t, res)
		assert.False(t, res.IsError, resultText(res))
		assert.Equal(t, "slept", resultText(res))
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
	assert.Contains(t, r.logs.String(), "stopping: answering the calls under way", "the stop is logged when it starts")
}

// TestReloadDoesNotRepeatWarnings: a config warning is logged at warn
// level once, when it first appears, not again at every reload that still
// has it; a new one is.
func TestReloadDoesNotRepeatWarnings(t *testing.T) {
	t.Parallel()
	cfg := baseConfig()
	cfg = set(cfg, "sessions.bob.token", "bob-short")
	r := start(t, cfg)
	for range 2 {
		_, err := r.d.Reload(t.Context(), "test")
		require.NoError(t, err)
	}
	warned := func(s string) int {
		n := 0
		for _, line := range strings.Split(r.logs.String(), "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, s) {
				n++
			}
		}
		return n
	}
	assert.Equal(t, 1, warned("shorter than 16 characters"), "once, at start-up")
	assert.Contains(t, r.logs.String(), "config (warned before)")

	writeConfig(t, r.path, set(cfg, "sessions.alice.token", "alice-short"))
	_, err := r.d.Reload(t.Context(), "test")
	require.NoError(t, err)
	assert.Equal(t, 2, warned("shorter than 16 characters"), "alice's is new")
}

// TestSubscriptionThroughDaemon: a session's client subscribed to a note
// hears that another session wrote it, through the one upstream process
// they share.
func TestSubscriptionThroughDaemon(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	cfg["sessions"].(map[string]any)["carol"] = map[string]any{"token": "carol-token-0123456789abcdef"}
	r := start(t, cfg)
	updated := make(chan string, 4)
	alice := r.connect("alice", aliceToken, func(o *mcp.ClientOptions) {
		o.ResourceUpdatedHandler = func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI }
	})
	carol := r.connect("carol", "carol-token-0123456789abcdef")
	require.NoError(t, alice.cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: "demo://notes/welcome"}))
	// The upstream subscribes as the listen request goes out; a write is
	// heard once it has.
	require.Eventually(t, func() bool {
		res, err := carol.call(t, "demo__write_note", map[string]any{"name": "welcome", "text": "hello alice"})
		require.NoError(t, err)
		require.False(t, res.IsError, resultText(res))
		select {
		case uri := <-updated:
			return uri == "demo://notes/welcome"
		case <-time.After(100 * time.Millisecond):
			return false
		}
	}, 10*time.Second, time.Millisecond)
	st := r.state()
	require.Len(t, st.Pool, 1)
	assert.Equal(t, []string{"demo://notes/welcome"}, st.Pool[0].Subscriptions)

	// A reload that changes the server's transport replaces every
	// session's connection; alice's subscription moves to the new one.
	for round := range 3 {
		writeConfig(t, r.path, set(cfg, "mcpServers.demo.env.ROUND", fmt.Sprint(round)))
		code, body := r.do("POST", "/v1/reload", adminToken, nil, nil)
		require.Equal(t, http.StatusOK, code, body)
		var pool []daemon.EntryState
		waitFor(t, eventWithin, func() bool {
			pool = r.state().Pool
			return len(pool) == 1 && slices.Equal(pool[0].Subscriptions, []string{"demo://notes/welcome"})
		}, r.logs.String, "round %d: %+v", round, lazy(func() string { return fmt.Sprintf("%+v", pool) }))
		for len(updated) > 0 {
			<-updated
		}
		res, err := carol.call(t, "demo__write_note", map[string]any{"name": "welcome", "text": fmt.Sprint(round)})
		require.NoError(t, err)
		require.False(t, res.IsError, resultText(res))
		select {
		case uri := <-updated:
			assert.Equal(t, "demo://notes/welcome", uri)
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: no update after the reload", round)
		}
	}
}

// TestMetricsCountForwardedRequests: /metrics counts the requests sessions
// forward by server, method and outcome, and times those that reached
// their upstream.
func TestMetricsCountForwardedRequests(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	r := start(t, baseConfig())
	alice := r.connect("alice", aliceToken)
	for range 2 {
		out, err := alice.call(t, "demo__echo", map[string]any{"text": "hi"})
		require.NoError(t, err)
		require.False(t, out.IsError, resultText(out))
	}
	_, metrics := r.do("GET", "/metrics", adminToken, nil, nil)
	assert.Contains(t, metrics, `wasmhost_upstream_requests_total{method="tools/call",outcome="ok",server="demo"} 2`)
	assert.Contains(t, metrics, `wasmhost_upstream_request_duration_seconds_count{method="tools/call",server="demo"} 2`)
	// And the process's own metrics.
	assert.Contains(t, metrics, "\ngo_goroutines ")
	assert.Contains(t, metrics, "\nprocess_open_fds ")
}
