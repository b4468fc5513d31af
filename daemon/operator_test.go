package daemon_test

// Operator-facing error handling, checked against the project's rule: bad
// input gets a clear error that names where it is (file, JSON path,
// session, server), and nothing that was working is lost.
//
// The cases come from an audit of the operator paths against that rule.

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/daemon"
)

// writePicky copies testplugins/wat/picky.wasm (see picky.wat) into dir
// and returns its path there.
func writePicky(t *testing.T, dir string) string {
	t.Helper()
	wasm, err := os.ReadFile("../testplugins/wat/picky.wasm")
	require.NoError(t, err)
	path := filepath.Join(dir, "picky.wasm")
	require.NoError(t, os.WriteFile(path, wasm, 0o644))
	return path
}

// reloadWith replaces the config file with cfg and reloads through the
// admin API, returning the status and the decoded answer.
func (r *running) reloadWith(cfg any) (int, daemon.ReloadResult, string) {
	r.t.Helper()
	if !r.adminOnly {
		r.t.Fatal("reloadWith needs a daemon started with adminReloadsOnly: its file watcher could apply the file before the admin reload")
	}
	writeConfig(r.t, r.path, cfg)
	code, body := r.do("POST", "/v1/reload", adminToken, nil, nil)
	var res daemon.ReloadResult
	require.NoError(r.t, json.Unmarshal([]byte(body), &res), body)
	return code, res, body
}

// watchAlice connects alice and returns her tools and a check that she
// still has them, on the same upstream process, and heard of no list
// change since.
func (r *running) watchAlice(t *testing.T) (tools []string, stillServed func()) {
	t.Helper()
	alice := r.connect("alice", aliceToken)
	before := alice.tools(t)
	pid := alice.pid(t)
	alice.countChanged(100 * time.Millisecond)
	return before, func() {
		t.Helper()
		assert.Equal(t, before, alice.tools(t), "alice keeps her tools")
		assert.Equal(t, pid, alice.pid(t), "on the same upstream process")
		assert.Equal(t, 0, alice.countChanged(100*time.Millisecond), "no list change reached the client")
	}
}

// A policy plugin that loads, shakes hands and passes the trial calls (it
// keys {}) but refuses the settings the running sessions have is refused
// like any other broken plugin (ErrPolicyRefused, 422, nothing changed),
// naming the sessions and servers whose settings it refuses; the old policy
// keeps serving.
func TestOperatorPolicySwapRefusingLiveSettingsKeepsOldPolicy(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	r := start(t, cfg, adminReloadsOnly)
	before, stillServed := r.watchAlice(t)
	require.Equal(t, []string{"demo__add", "demo__echo", "demo__pid"}, before)

	picky := writePicky(t, filepath.Dir(r.path))
	code, res, body := r.reloadWith(set(cfg, "policy", map[string]any{"path": picky}))

	assert.Equal(t, http.StatusUnprocessableEntity, code, "the swap is refused: %s", body)
	assert.False(t, res.Applied, "nothing is touched: %s", body)
	assert.Contains(t, res.Error, "policy plugin refused")
	assert.Contains(t, res.Error, `session "alice"`)
	assert.Contains(t, res.Error, `server "demo"`)
	assert.Equal(t, "policy-default", r.state().Policy.Name, "the old policy keeps serving")
	stillServed()
}

// A reload bringing settings the running policy refuses is refused before
// anything is touched, naming the file, the session and the JSON path of
// the settings; alice keeps the view she had.
func TestOperatorReloadWithSettingsThePolicyRefusesKeepsView(t *testing.T) {
	t.Parallel()
	r, cfg, alice, before := startPicky(t)

	set(cfg, "sessions.alice.overrides", map[string]any{"demo": map[string]any{"trust": true}})
	code, res, body := r.reloadWith(cfg)

	assert.Equal(t, http.StatusUnprocessableEntity, code, "the reload is refused: %s", body)
	assert.False(t, res.Applied, body)
	assert.Contains(t, res.Error, r.path+": ")
	assert.Contains(t, res.Error, `sessions.alice.overrides.demo over mcpServers.demo: session "alice", server "demo": the policy refuses the settings`)
	assert.Equal(t, before, alice.tools(t), "alice keeps what she had")
}

// A reload that points a working server at a command that does not exist
// is refused with mcpServers.demo.command named: the reconciler lets the
// old connection go before it makes the new one, so applying it would
// leave both sessions without tools. The old connection keeps serving.
func TestOperatorReloadToMissingCommandKeepsWorkingConnection(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	r := start(t, cfg, adminReloadsOnly)
	_, stillServed := r.watchAlice(t)

	missing := filepath.Join(t.TempDir(), "no-such-server")
	code, res, body := r.reloadWith(set(cfg, "mcpServers.demo.command", missing))
	assert.Equal(t, http.StatusUnprocessableEntity, code, body)
	assert.False(t, res.Applied, body)
	assert.Contains(t, res.Error, r.path+": mcpServers.demo.command: server \"demo\" cannot start", body)
	assert.Contains(t, res.Error, "no such file or directory", body)

	stillServed()
	st := r.state()
	if assert.Len(t, st.Pool, 1, "the working upstream is still there") {
		assert.Equal(t, "ready", st.Pool[0].State)
	}
}

// A reload that keeps a working server's command but points its "cwd" at
// a directory that does not exist, or at a file, is refused with
// mcpServers.demo.cwd named: the process cannot start there (os/exec
// would blame the command), and the old connection would be gone before
// the new one failed. An overlay PUT is refused the same way.
func TestOperatorReloadToMissingCwdKeepsWorkingConnection(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	r := start(t, cfg, adminReloadsOnly)
	_, stillServed := r.watchAlice(t)

	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for cwd, want := range map[string]string{
		filepath.Join(dir, "missing"): "no such file or directory",
		file:                          "not a directory",
	} {
		code, res, body := r.reloadWith(set(cfg, "mcpServers.demo.cwd", cwd))
		assert.Equal(t, http.StatusUnprocessableEntity, code, body)
		assert.False(t, res.Applied, body)
		assert.Contains(t, res.Error, r.path+`: mcpServers.demo.cwd: server "demo" cannot start, and its running connection keeps serving: `+
			"the working directory (cwd) cannot be used: "+cwd+": "+want, body)

		self := cfg["mcpServers"].(map[string]any)["demo"].(map[string]any)["command"]
		entry := mustJSON(t, map[string]any{"command": self, "cwd": cwd, "includeTools": []string{"echo"}})
		code, body = r.do("PUT", "/v1/sessions/alice/servers/demo", adminToken, strings.NewReader(entry), nil)
		assert.Equal(t, http.StatusBadRequest, code, body)
		assert.Contains(t, body, `request body: cwd: server \"demo\" cannot start: the working directory (cwd) cannot be used: `+cwd, body)
	}
	stillServed()
	st := r.state()
	if assert.Len(t, st.Pool, 1, "the working upstream is still there") {
		assert.Equal(t, "ready", st.Pool[0].State)
	}
}

// A reload that swaps the policy plugin and also points a working server
// at a command that does not exist is refused for the command, and leaves
// no plugin open for nothing: the command is checked before the new plugin
// would be loaded, and the running policy keeps serving.
func TestOperatorRefusedReloadLeavesNoPluginOpen(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	r := start(t, cfg, adminReloadsOnly)
	_, stillServed := r.watchAlice(t)

	prefix, err := filepath.Abs("../testplugins/prefix-policy/prefix-policy.wasm")
	require.NoError(t, err)
	set(cfg, "policy", map[string]any{"path": prefix})
	set(cfg, "mcpServers.demo.command", filepath.Join(t.TempDir(), "no-such-server"))
	code, res, body := r.reloadWith(cfg)
	assert.Equal(t, http.StatusUnprocessableEntity, code, body)
	assert.False(t, res.Applied, body)
	assert.Contains(t, res.Error, r.path+": mcpServers.demo.command: server \"demo\" cannot start", body)

	loaded := r.countLog(`msg="plugin loaded" component=plugin plugin=` + prefix)
	closed := r.countLog(`msg="plugin closed" component=plugin plugin=` + prefix)
	assert.Equal(t, loaded, closed, "every plugin loaded for the refused reload is closed")
	assert.Equal(t, "policy-default", r.state().Policy.Name, "the running policy keeps serving")
	stillServed()
}

// A reload that adds a server whose command does not exist is applied (a
// new server has no connection to lose, and is retried with backoff, as at
// start-up), but the answer and the log name the file and the setting at
// fault, which the pool's error does not; the working server keeps
// serving. Start-up warns the same way.
func TestOperatorNewServerThatCannotStartIsLocated(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	r := start(t, cfg, adminReloadsOnly)
	_, stillServed := r.watchAlice(t)

	missing := filepath.Join(t.TempDir(), "no-such-server")
	set(cfg, "mcpServers.broken", map[string]any{"command": missing})
	code, res, body := r.reloadWith(cfg)
	assert.Equal(t, http.StatusBadGateway, code, "applied, with bindings failed: %s", body)
	assert.True(t, res.Applied, body)
	want := r.path + `: mcpServers.broken.command: server "broken" cannot start; its sessions retry it with backoff: stat ` + missing + ": no such file or directory"
	assert.Contains(t, res.Warnings, want, body)
	r.waitLog(`msg="config: ` + r.path + `: mcpServers.broken.command: server \"broken\" cannot start`)
	// The reload's summary line says which bindings failed and why; the
	// reconciler does not warn once more for each of them.
	assert.True(t, r.logs.HasLine("level=WARN", `msg="reload (admin): `, `err="session \"alice\", server \"broken\": `), r.logs.String())
	assert.False(t, r.logs.HasLine("level=WARN", "acquire failed"), r.logs.String())
	stillServed()

	// Once added, it is no longer new: a reload that changes nothing else
	// does not warn again (the supervisor's retries say it).
	_, res, body = r.reloadWith(cfg)
	assert.Empty(t, res.Warnings, body)

	// At start-up.
	r2 := start(t, cfg, adminReloadsOnly)
	r2.waitLog(`msg="config: ` + r2.path + `: mcpServers.broken.command: server \"broken\" cannot start; its sessions retry it with backoff`)
}

// A server that exits at start-up (here with status 3, after a line on
// stderr) is reported with how its process ended, in /v1/state and in the
// log, not only with the go-sdk's "EOF"; its stderr is logged under its
// name.
func TestOperatorServerExitingAtStartSaysHow(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	set(cfg, "mcpServers.quitter", map[string]any{"command": "/bin/sh", "args": []string{"-c", "echo cannot open the database >&2; exit 3"}})
	r := start(t, cfg)
	r.waitLog(`msg="upstream stderr: cannot open the database" component=upstream server=quitter`)
	r.waitLog(`msg="upstream connection failed" component=pool server=quitter`)
	assert.True(t, r.logs.HasLine("upstream connection failed", "server=quitter", "the server's process ended: exit status 3"), r.logs.String())
	// Retried with backoff meanwhile: a look may find a retry under way.
	require.Eventually(t, func() bool {
		n := 0
		for _, s := range r.state().Sessions {
			for _, b := range s.Servers {
				if b.Server == "quitter" && strings.Contains(b.Error, "the server's process ended: exit status 3") {
					n++
				}
			}
		}
		return n == 2
	}, eventWithin, 20*time.Millisecond, "alice's and bob's bindings of quitter show how it ended")
	// /metrics shows them failed, though the pool holds no entry for
	// quitter: its connection was never made.
	var metrics string
	waitFor(t, eventWithin, func() bool {
		_, metrics = r.do("GET", "/metrics", adminToken, nil, nil)
		return strings.Contains(metrics, `wasmhost_bindings{state="failed"} 2`)
	}, r.logs.String, "bindings in /metrics:\n%s", lazy(func() string { return metrics }))
	assert.Contains(t, metrics, `wasmhost_bindings{state="healthy"} 2`, "alice's and bob's demo")
	// The pool lists quitter as one failed entry (both sessions would
	// share its connection) with its last error, in /v1/state and in
	// /metrics, though it holds no connection for it.
	require.Eventually(t, func() bool {
		_, metrics = r.do("GET", "/metrics", adminToken, nil, nil)
		return strings.Contains(metrics, `wasmhost_pool_entries{state="failed"} 1`)
	}, 10*time.Second, 20*time.Millisecond, "pool entries in /metrics:\n%s", metrics)
	var failed []daemon.EntryState
	require.Eventually(t, func() bool {
		failed = nil
		for _, e := range r.state().Pool {
			if e.Server == "quitter" {
				failed = append(failed, e)
			}
		}
		return len(failed) == 1 && strings.Contains(failed[0].Error, "the server's process ended: exit status 3")
	}, 10*time.Second, 20*time.Millisecond, "quitter in /v1/state's pool: %+v", failed)
	assert.Equal(t, "failed", failed[0].State)
	assert.Empty(t, failed[0].ID, "no entry holds it")
	assert.NotEmpty(t, failed[0].Identity)

	// Logs name the server, not the connection's 64-hex fingerprint: at
	// info and above, including the retries' errors; and the errors in
	// /v1/state neither.
	r.waitLog(`msg="upstream retry failed"`)
	hex64 := regexp.MustCompile(`[0-9a-f]{64}`)
	digest := regexp.MustCompile(`sha256=[0-9a-f]{64}`) // the plugin's, logged when loaded
	for line := range strings.Lines(r.logs.String()) {
		if !strings.Contains(line, "level=DEBUG") {
			assert.False(t, hex64.MatchString(digest.ReplaceAllString(line, "")), "a log line with an entry id: %s", line)
		}
	}
	assert.True(t, r.logs.HasLine("upstream retry failed", "server=quitter", `server \"quitter\" is failed`), r.logs.String())
	for _, s := range r.state().Sessions {
		for _, b := range s.Servers {
			assert.False(t, hex64.MatchString(b.Error), "session %s, server %s: %s", s.Name, b.Server, b.Error)
		}
	}

	// A client calling one of its tools by name learns that the server is
	// down, without the operator's details.
	alice := r.connect("alice", aliceToken)
	_, err := alice.call(t, "quitter__anything", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown tool "quitter__anything": server "quitter" is unavailable: it could not be reached (retried in the background)`)
	assert.NotContains(t, err.Error(), "exit status")
}

// A reload that removes a session, or changes its token, disconnects the
// session's clients without an answer to their calls under way; the log
// says so, with the session and how many clients it had.
func TestOperatorDisconnectedSessionsAreLogged(t *testing.T) {
	t.Parallel()
	cfg := baseConfig()
	r := start(t, cfg, adminReloadsOnly)
	r.connect("alice", aliceToken)
	r.connect("bob", bobToken)

	set(cfg, "sessions.bob.token", "bob-rotated-token")
	code, _, body := r.reloadWith(cfg)
	require.Equal(t, http.StatusOK, code, body)
	assert.True(t, r.logs.HasLine("level=INFO", "session token changed; its clients are disconnected", "session=bob", "clients=1"), r.logs.String())

	delete(cfg["sessions"].(map[string]any), "alice")
	code, _, body = r.reloadWith(cfg)
	require.Equal(t, http.StatusOK, code, body)
	assert.True(t, r.logs.HasLine("level=INFO", "session removed; its clients are disconnected", "session=alice", "clients=1"), r.logs.String())
	assert.NotContains(t, r.logs.String(), "bob-rotated-token")
}

// The same through the admin API: an overlay PUT whose command does not
// exist is refused before alice's working binding is touched.
func TestOperatorOverlayToMissingCommandKeepsWorkingBinding(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	r := start(t, baseConfig())
	_, stillServed := r.watchAlice(t)

	missing := filepath.Join(t.TempDir(), "no-such-server")
	entry := mustJSON(t, map[string]any{"command": missing, "includeTools": []string{"echo"}})
	code, body := r.do("PUT", "/v1/sessions/alice/servers/demo", adminToken, strings.NewReader(entry), nil)
	assert.Equal(t, http.StatusBadRequest, code, body)
	assert.Contains(t, body, "no such file or directory")
	stillServed()
}

// A reload whose config has a typo in a key (here "overides", which would
// drop alice's overrides) is refused, and POST /v1/reload answers with the
// error, its JSON path and the key meant.
func TestOperatorReloadAnswerNamesTypo(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	r := start(t, cfg, adminReloadsOnly)
	alice := cfg["sessions"].(map[string]any)["alice"].(map[string]any)
	alice["overides"] = alice["overrides"]
	delete(alice, "overrides")
	code, _, body := r.reloadWith(cfg)
	require.Equal(t, http.StatusUnprocessableEntity, code, body)
	assert.Contains(t, body, `sessions.alice.overides: unknown key; did you mean \"overrides\"?`, "the admin answer tells the operator")
}

// Overlay PUT bodies are located as files are: a syntax error gives its
// line and column, and a server name the JSON path quotes (a '.' in it)
// does not bring the wrapper document's path into the message.
func TestOperatorOverlayBodyErrorsAreLocated(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	servers := cfg["mcpServers"].(map[string]any)
	servers["my.server"] = servers["demo"]
	r := start(t, cfg)
	code, body := r.do("PUT", "/v1/sessions/alice/servers/demo", adminToken,
		strings.NewReader("{\"command\": \"x\",\n \"args\": [\"a\" \"b\"]}"), nil)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "request body:2:", "a syntax error gives its line and column: %s", body)

	code, body = r.do("PUT", "/v1/sessions/alice/servers/my.server", adminToken, strings.NewReader(`{"command": 5}`), nil)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "request body: command: expected a string")
	assert.NotContains(t, body, "mcpServers", "paths are the body's own: %s", body)
}

// Reloads of broken plugins (wrong ABI, a handshake that refuses or
// never returns, missing exports, an unknown import, bad output for {})
// are refused with the file, "policy.path" and the plugin named; the
// running policy keeps serving, and alice's client keeps its tools and
// hears no list change.
func TestOperatorBrokenPluginSwapsKeepOldPolicy(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	r := start(t, cfg, adminReloadsOnly)
	_, stillServed := r.watchAlice(t)

	for plugin, want := range map[string]string{
		"abi2":            "unsupported ABI version",
		"hs-refuse":       "bad handshake",
		"hs-loop":         "bad handshake: plugin call timed out",
		"missing-exports": "missing or mistyped export",
		"unknown-import":  "unknown import",
		"script":          "trial calls",
	} {
		path, err := filepath.Abs("../testplugins/wat/" + plugin + ".wasm")
		require.NoError(t, err)
		code, res, body := r.reloadWith(set(cfg, "policy", map[string]any{"path": path, "timeoutMs": 200}))
		assert.Equal(t, http.StatusUnprocessableEntity, code, "%s: %s", plugin, body)
		assert.False(t, res.Applied, plugin)
		assert.Contains(t, res.Error, "policy plugin refused: "+r.path+": policy.path: plugin "+`"`+path+`"`, plugin)
		assert.Contains(t, res.Error, want, plugin)
	}
	assert.Equal(t, "policy-default", r.state().Policy.Name)
	stillServed()
}

// Bad configs reloaded through the admin API are refused (422,
// "applied": false) with the file and the JSON path (or line and column),
// in the answer, /v1/state's lastReload and the log; the running config
// keeps serving the connected client on the same upstream.
func TestOperatorRefusedReloadsKeepServing(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	r := start(t, cfg, adminReloadsOnly)
	_, stillServed := r.watchAlice(t)
	good := mustJSON(t, cfg)

	cases := []struct{ name, file, want string }{
		{"syntax", strings.Replace(good, `"listen"`, `"listen" "x"`, 1), r.path + ":5:12: syntax error"},
		{"duplicate key", strings.Replace(good, `"admin": {`, `"admin": {"token": "x-0123456789abcdef", `, 1), r.path + `: admin: duplicate key "token"`},
		{"deep type", mustJSON(t, set(baseConfig(), "sessions.bob.overrides.demo.excludeTools", []any{"a", 7})), r.path + ": sessions.bob.overrides.demo.excludeTools[1]: expected a string, got a number"},
		{"unknown server", mustJSON(t, set(baseConfig(), "sessions.alice.servers", []string{"demo", "nope"})), r.path + `: sessions.alice.servers[1]: no server named "nope" in mcpServers`},
		{"override of unknown server", mustJSON(t, set(baseConfig(), "sessions.alice.overrides.nope", map[string]any{})), r.path + `: sessions.alice.overrides.nope: no server named "nope" in mcpServers`},
		{"two transports", mustJSON(t, set(baseConfig(), "mcpServers.demo.url", "http://127.0.0.1:1/mcp")), r.path + `: mcpServers.demo: expected exactly one of "command", "url" or "httpUrl", found "command" and "url"`},
		{"shared token", mustJSON(t, set(baseConfig(), "sessions.bob.token", aliceToken)), r.path + `: sessions.bob.token: the same token is used by session "alice"`},
		{"token file missing", mustJSON(t, set(baseConfig(), "sessions.bob", map[string]any{"tokenFile": "bob.token"})), r.path + `: sessions.bob.tokenFile: cannot read token file`},
	}
	for _, c := range cases {
		code, res, body := r.reloadWith(c.file)
		assert.Equal(t, http.StatusUnprocessableEntity, code, "%s: %s", c.name, body)
		assert.False(t, res.Applied, c.name)
		assert.Contains(t, res.Error, c.want, c.name)
		// The log's text handler escapes quotes: look for the part before any.
		logged := "reload refused, the running config keeps serving: config refused: " + strings.SplitN(c.want, `"`, 2)[0]
		assert.True(t, strings.Contains(r.logs.String(), logged), "%s: no log line %q", c.name, logged)
		require.NotNil(t, r.state().LastReload, c.name)
		assert.Contains(t, r.state().LastReload.Error, c.want, c.name)
	}
	stillServed()
	for _, tok := range []string{aliceToken, bobToken, adminToken} {
		assert.NotContains(t, r.logs.String(), tok)
	}
}

// A stdio server's environment values and arguments, and a "url"
// server's password and query, stay out of the log and /v1/state when the
// server cannot be started.
func TestOperatorStartFailureHidesServerSecrets(t *testing.T) {
	t.Parallel()
	cfg := baseConfig()
	set(cfg, "mcpServers", map[string]any{
		"proc": map[string]any{
			"command": filepath.Join(t.TempDir(), "missing"),
			"args":    []string{"--api-key=arg-s3cret-0123456789"},
			"env":     map[string]any{"API_KEY": "env-s3cret-0123456789"},
		},
		"web": map[string]any{
			"url":     "http://user:url-pa55word@" + closedPort(t) + "/mcp?key=url-qu3ry-s3cret",
			"headers": map[string]any{"X-Api-Key": "hdr-s3cret-0123456789"},
		},
	})
	set(cfg, "sessions.alice.overrides", map[string]any{})
	set(cfg, "sessions.bob.overrides", map[string]any{})
	r := start(t, cfg)
	r.waitLog(`server=web`)
	r.waitLog(`server=proc`)
	_, state := r.do("GET", "/v1/state", adminToken, nil, nil)
	assertNoSecrets(t, map[string]string{"the log": r.logs.String(), "/v1/state": state},
		"arg-s3cret", "env-s3cret", "url-pa55word", "url-qu3ry-s3cret", "hdr-s3cret")
	assert.Contains(t, state, "no such file or directory", "the error is still there")
}

// startPicky starts a daemon on baseConfig whose policy is picky (it
// refuses every settings object but {}), with alice and bob overriding
// nothing, and connects alice; before is what she sees, picky's one tool.
func startPicky(t *testing.T) (r *running, cfg map[string]any, alice *client, before []string) {
	t.Helper()
	cfg = baseConfig()
	set(cfg, "policy", map[string]any{"path": writePicky(t, t.TempDir())})
	set(cfg, "sessions", map[string]any{
		"alice": map[string]any{"token": aliceToken},
		"bob":   map[string]any{"token": bobToken},
	})
	r = start(t, cfg, adminReloadsOnly)
	alice = r.connect("alice", aliceToken)
	before = alice.tools(t)
	require.Len(t, before, 1, "picky shows the first tool for {}")
	return r, cfg, alice, before
}
