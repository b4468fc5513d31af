package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/session"
)

// TestHelperDemoServer is not a test: run with WASMHOST_CLI_DEMO_HELPER=1
// it is the upstream the tests below configure (the demo-server command
// of this very binary), and it exits when its client disconnects.
func TestHelperDemoServer(t *testing.T) {
	if !demoHelper {
		t.Skip("helper process for the stdio and run tests")
	}
	code := run(context.Background(), []string{"demo-server"}, os.Stdin, os.Stdout, os.Stderr)
	os.Exit(code)
}

// demoConfig writes a config whose one upstream is this test binary running
// the demo server, with sessions alice (three tools) and bob (all but
// write_note and add_tool).
func demoConfig(t *testing.T) string {
	t.Helper()
	return demoConfigWith(t, nil)
}

// demoConfigWith is demoConfig with edit, when not nil, applied to the
// config before it is written.
func demoConfigWith(t *testing.T, edit func(cfg map[string]any)) string {
	t.Helper()
	cfg := map[string]any{
		"admin": map[string]any{"token": "admin-token-0123456789abcdef"},
		"mcpServers": map[string]any{
			"demo": map[string]any{
				"command": os.Args[0],
				"args":    []string{"-test.run=^TestHelperDemoServer$"},
				"env":     map[string]any{"WASMHOST_CLI_DEMO_HELPER": "1"},
			},
		},
		"sessions": map[string]any{
			"alice": map[string]any{"token": "alice-token-0123456789abcdef", "overrides": map[string]any{"demo": map[string]any{"includeTools": []string{"echo", "add", "pid"}}}},
			"bob":   map[string]any{"tokenEnv": bobTokenEnv, "overrides": map[string]any{"demo": map[string]any{"excludeTools": []string{"write_note", "add_tool"}}}},
		},
	}
	if edit != nil {
		edit(cfg)
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "wasmhost.json")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return path
}

// pipeClient runs the command line with args in the background, speaking
// MCP to it over its standard input and output, and returns a connected
// client session plus a func that ends the session and returns the exit
// status and standard error.
func pipeClient(t *testing.T, args ...string) (*mcp.ClientSession, func() (int, string)) {
	t.Helper()
	return pipeClientCtx(t, t.Context(), args...)
}

// pipeClientCtx is pipeClient with the context the command line runs
// under; cancelling it is the interrupt signal.
func pipeClientCtx(t *testing.T, runCtx context.Context, args ...string) (*mcp.ClientSession, func() (int, string)) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var errOut mcptest.LogBuffer
	done := make(chan int, 1)
	go func() {
		code := run(runCtx, args, inR, outW, &errOut)
		outW.Close()
		done <- code
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%v: stderr:\n%s", args, errOut.String())
		}
	})
	cl := mcp.NewClient(&mcp.Implementation{Name: "cli-test", Version: "1"}, &mcp.ClientOptions{
		Logger: slog.New(slog.DiscardHandler),
		// A client that listens for list changes, as desktop clients do,
		// keeps a subscriptions/listen request open (protocol 2026-07-28).
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {},
	})
	ctx, cancel := context.WithTimeout(t.Context(), within(t, readyWithin))
	defer cancel()
	cs, err := cl.Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	require.NoError(t, err, "stderr:\n%s", errOut.String())
	finish := func() (int, string) {
		_ = cs.Close()
		_ = inW.Close()
		select {
		case code := <-done:
			return code, errOut.String()
		case <-time.After(within(t, readyWithin)):
			t.Fatalf("%v did not exit within %v; stderr:\n%s\ngoroutines:\n%s", args, readyWithin, errOut.String(), stacks())
			return -1, ""
		}
	}
	return cs, finish
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	names, err := mcptest.ToolNames(t.Context(), cs)
	require.NoError(t, err)
	return names
}

func TestDemoServerCommand(t *testing.T) {
	t.Parallel()
	cs, finish := pipeClient(t, "demo-server")
	assert.Contains(t, toolNames(t, cs), "pid")
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
	require.NoError(t, err)
	assert.Equal(t, "x", res.Content[0].(*mcp.TextContent).Text)
	code, _ := finish()
	assert.Equal(t, exitOK, code)
}

// TestDemoServerRefusesArguments: an argument demo-server does not take
// is named in the error, not only answered with the usage.
func TestDemoServerRefusesArguments(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "demo-server", "extra")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, `wasmhost demo-server: unexpected argument "extra"`)
	assert.Empty(t, r.out, "standard output is reserved for MCP")
}

func TestStdioServesOneSession(t *testing.T) {
	t.Parallel()
	path := demoConfig(t)
	cs, finish := pipeClient(t, "stdio", "--config", path, "--session", "alice", "--log-level", "info")
	waitFor(t, eventWithin, func() bool { return len(toolNames(t, cs)) == 3 }, noLogs, "alice's three tools")
	assert.Equal(t, []string{"add", "echo", "pid"}, toolNames(t, cs))
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "add", Arguments: map[string]any{"a": 1, "b": 2}})
	require.NoError(t, err)
	assert.Equal(t, "3", res.Content[0].(*mcp.TextContent).Text)
	_, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "write_note", Arguments: map[string]any{"name": "x"}})
	require.Error(t, err, "hidden tools are refused")
	code, stderr := finish()
	assert.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stderr, "started: 1 session changed", "logs go to standard error")
}

// TestStdioReloadsTheConfigFile: stdio mode watches its config file as the
// daemon does: a change to its session's settings reaches its client
// (list_changed, the new tool) on the same upstream process.
func TestStdioReloadsTheConfigFile(t *testing.T) {
	t.Parallel()
	edit := func(tools ...string) func(cfg map[string]any) {
		return func(cfg map[string]any) {
			cfg["sessions"].(map[string]any)["alice"].(map[string]any)["overrides"] = map[string]any{"demo": map[string]any{"includeTools": tools}}
		}
	}
	path := demoConfigWith(t, edit("echo", "add", "pid"))
	cs, finish := pipeClient(t, "stdio", "--config", path, "--session", "alice", "--log-level", "info")
	waitFor(t, eventWithin, func() bool { return len(toolNames(t, cs)) == 3 }, noLogs, "alice's three tools")
	pid := func() string {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "pid"})
		require.NoError(t, err)
		return mcptest.Text(res)
	}
	before := pid()

	again := demoConfigWith(t, edit("echo", "add", "pid", "read_note"))
	b, err := os.ReadFile(again)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o600))
	waitFor(t, eventWithin, func() bool { return slices.Contains(toolNames(t, cs), "read_note") }, noLogs, "read_note after the reload")
	assert.Equal(t, before, pid(), "the same upstream process")
	code, stderr := finish()
	assert.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stderr, "reload (watch config): 1 session changed (alice)")
}

// TestStdioAnnouncesTheVersionItPrints: clients see the version
// `wasmhost version` prints, not a placeholder.
func TestStdioAnnouncesTheVersionItPrints(t *testing.T) {
	t.Parallel()
	path := demoConfig(t)
	cs, finish := pipeClient(t, "stdio", "--config", path, "--session", "alice")
	assert.Equal(t, wasmhostVersion(), cs.InitializeResult().ServerInfo.Version)
	code, stderr := finish()
	assert.Equal(t, exitOK, code, stderr)
}

// TestStdioWarnsAboutItsSessionOnly: stdio mode serves one session, so the
// config's warnings about the other sessions are not its operator's concern.
func TestStdioWarnsAboutItsSessionOnly(t *testing.T) {
	t.Parallel()
	path := demoConfigWith(t, func(cfg map[string]any) {
		sessions := cfg["sessions"].(map[string]any)
		sessions["alice"].(map[string]any)["token"] = "short-alice"
		sessions["bob"].(map[string]any)["servers"] = []string{}
		cfg["mcpServers"].(map[string]any)["demo"].(map[string]any)["oauth"] = map[string]any{}
	})

	cs, finish := pipeClient(t, "stdio", "--config", path, "--session", "alice")
	assert.NotEmpty(t, toolNames(t, cs))
	code, stderr := finish()
	assert.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stderr, "sessions.alice.token: the token is shorter than 16 characters")
	assert.Contains(t, stderr, "mcpServers.demo.oauth: not supported by wasmhost, ignored", "warnings about the whole file stay")
	assert.NotContains(t, stderr, "sessions.bob", "another session's warning")
}

// TestStdioLocatesACommandThatCannotStart: a server whose command is not
// there is named with the config file, the JSON path and the directory a
// relative command was looked for in, as the daemon names it, and stdio
// keeps serving the session.
func TestStdioLocatesACommandThatCannotStart(t *testing.T) {
	t.Parallel()
	path := aliceConfig(t, "broken", map[string]any{"command": "./bin/missing"})
	wd, err := os.Getwd()
	require.NoError(t, err)

	cs, finish := pipeClient(t, "stdio", "--config", path, "--session", "alice")
	assert.Empty(t, toolNames(t, cs))
	code, stderr := finish()
	assert.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stderr, `config: `+path+`: mcpServers.broken.command: server \"broken\" cannot start; its sessions retry it with backoff: stat ./bin/missing: no such file or directory (a relative command is taken from the working directory, `+wd+`)`)
}

// TestStdioSaysHowAServerExited: a server whose process exits during the
// handshake is reported with its exit status, not only the go-sdk's EOF.
func TestStdioSaysHowAServerExited(t *testing.T) {
	t.Parallel()
	path := aliceConfig(t, "quitter", map[string]any{"command": "/bin/sh", "args": []string{"-c", "exit 3"}})

	cs, finish := pipeClient(t, "stdio", "--config", path, "--session", "alice")
	assert.Empty(t, toolNames(t, cs))
	code, stderr := finish()
	assert.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stderr, "the server's process ended: exit status 3", stderr)
}

// aliceConfig writes a config whose one server, name, is entry and whose
// one session is alice, with an inline token.
func aliceConfig(t *testing.T, name string, entry map[string]any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"mcpServers": map[string]any{name: entry},
		"sessions":   map[string]any{"alice": map[string]any{"token": "alice-token-0123456789abcdef"}},
	})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "wasmhost.json")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return path
}

// slowStdio starts `wasmhost stdio` on a session of the slow upstream and
// returns its client, a func that interrupts it, and pipeClient's finish.
func slowStdio(t *testing.T) (*mcp.ClientSession, context.CancelFunc, func() (int, string)) {
	t.Helper()
	return slowStdioWith(t, map[string]any{"command": os.Args[0], "env": map[string]any{mcptest.SlowEnv: "1"}})
}

// slowStdioWith is slowStdio with the given config entry for "slow".
func slowStdioWith(t *testing.T, entry map[string]any) (*mcp.ClientSession, context.CancelFunc, func() (int, string)) {
	t.Helper()
	path := aliceConfig(t, "slow", entry)
	runCtx, interrupt := context.WithCancel(t.Context())
	t.Cleanup(interrupt)
	cs, finish := pipeClientCtx(t, runCtx, "stdio", "--config", path, "--session", "alice", "--log-level", "info")
	waitFor(t, eventWithin, func() bool {
		names, err := mcptest.ToolNames(t.Context(), cs)
		return err == nil && slices.Contains(names, "slow")
	}, noLogs, "the slow tool listed")
	return cs, interrupt, finish
}

// slowCall starts a call of the slow tool that sleeps ms (see
// mcptest.StartSlow).
func slowCall(t *testing.T, cs *mcp.ClientSession, ms int) <-chan *mcp.CallToolResult {
	t.Helper()
	return mcptest.StartSlow(t, cs, "slow", ms, 0)
}

// TestStdioSignalAnswersCallsUnderWay: at a signal, stdio mode refuses new
// calls and lets the one under way finish and be answered before it exits.
func TestStdioSignalAnswersCallsUnderWay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and signals wasmhost processes")
	}
	cs, interrupt, finish := slowStdio(t)
	answered := slowCall(t, cs, 1500)
	interrupt()
	late := filepath.Join(t.TempDir(), "late")
	require.Eventually(t, func() bool {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"mark": late, "ms": 1}})
		return err == nil && res.IsError && strings.Contains(mcptest.Text(res), session.ErrDraining.Error())
	}, 5*time.Second, 10*time.Millisecond, "a new call is refused while draining")
	select {
	case res := <-answered:
		require.NotNil(t, res)
		assert.False(t, res.IsError, mcptest.Text(res))
		assert.Equal(t, "slept", mcptest.Text(res))
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
	start := time.Now()
	code, stderr := finish()
	assert.Equal(t, exitOK, code, stderr)
	assert.Less(t, time.Since(start), stdioDrainGrace, "the client's open subscriptions/listen does not hold the stop up")
	assert.Contains(t, stderr, "stopping: answering the calls under way")
}

// TestStdioSignalWaitsForLargeAnswers: a stop serves until the answer of a
// call under way is written, however long encoding it takes after the call
// returned (an 8 MiB answer is encoded twice, for tens of milliseconds).
func TestStdioSignalWaitsForLargeAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and signals wasmhost processes")
	}
	// What is tested is that the stop waits for the answer to be written,
	// not how fast 8 MiB crosses three JSON codecs: under -race on a loaded
	// machine that took more than the default 10 s grace.
	grace := stdioDrainGrace
	stdioDrainGrace = 5 * time.Minute
	t.Cleanup(func() { stdioDrainGrace = grace })
	cs, interrupt, finish := slowStdio(t)
	const pad = 8 << 20
	answered := mcptest.StartSlow(t, cs, "slow", 300, pad)
	interrupt()
	select {
	case res := <-answered:
		require.NotNil(t, res)
		assert.False(t, res.IsError)
		assert.Len(t, mcptest.Text(res), len("slept")+pad)
	case <-time.After(stdioDrainGrace):
		_, stderr := finish()
		t.Fatalf("no answer; stderr:\n%s", stderr)
	}
	code, stderr := finish()
	assert.Equal(t, exitOK, code, stderr)
}

// TestStdioSignalCutsLongCallsShort: a call that outlives the drain's grace
// is cut short by closing its upstream, and still gets an answer, an error;
// the process does not wait for the upstream to finish.
func TestStdioSignalCutsLongCallsShort(t *testing.T) {
	grace := stdioDrainGrace
	stdioDrainGrace = 300 * time.Millisecond
	t.Cleanup(func() { stdioDrainGrace = grace })
	cs, interrupt, finish := slowStdio(t)
	answered := slowCall(t, cs, 60_000)
	start := time.Now()
	interrupt()
	select {
	case res := <-answered:
		require.NotNil(t, res)
		assert.True(t, res.IsError, "cut short: %s", mcptest.Text(res))
	case <-time.After(10 * time.Second):
		_, stderr := finish()
		t.Fatalf("no answer; stderr:\n%s", stderr)
	}
	code, stderr := finish()
	assert.Equal(t, exitOK, code, stderr)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Contains(t, stderr, "shutdown: calls cut short")
}

// TestStdioCallTimeout: stdio mode bounds forwarded calls by the server
// entry's "timeout", as the daemon does.
func TestStdioCallTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 5 s call timeout; run without -short")
	}
	// The timeout also bounds the upstream's start, which took more than
	// 500 ms on a loaded machine; 5 s against a call of 5 minutes still
	// tells a bounded call from an unbounded one.
	cs, _, finish := slowStdioWith(t, map[string]any{"command": os.Args[0], "env": map[string]any{mcptest.SlowEnv: "1"}, "timeout": 5000})
	start := time.Now()
	select {
	case res := <-slowCall(t, cs, 300_000):
		require.NotNil(t, res)
		assert.True(t, res.IsError, mcptest.Text(res))
		assert.Contains(t, mcptest.Text(res), session.ErrTimeout.Error())
	case <-time.After(2 * time.Minute):
		t.Fatal("the call was not bounded by the entry's timeout")
	}
	assert.Less(t, time.Since(start), 2*time.Minute)
	code, stderr := finish()
	assert.Equal(t, exitOK, code, stderr)
}

// TestStdioRejectsBatchesAt20250618: stdio mode serves the go-sdk's own
// connection, which learns the negotiated protocol version and so refuses a
// JSON-RPC batch from protocol 2025-06-18 on (a wrapper around it would
// hide the version and let batches through).
func TestStdioRejectsBatchesAt20250618(t *testing.T) {
	t.Parallel()
	path := demoConfig(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var errOut mcptest.LogBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(t.Context(), []string{"stdio", "--config", path, "--session", "alice"}, inR, outW, &errOut)
		outW.Close()
	}()
	lines := bufio.NewScanner(outR)
	lines.Buffer(nil, 1<<20)
	send := func(msg string) {
		t.Helper()
		_, err := io.WriteString(inW, msg+"\n")
		require.NoError(t, err)
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	require.True(t, lines.Scan(), errOut.String())
	require.Contains(t, lines.Text(), `"protocolVersion":"2025-06-18"`)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`[{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","id":3,"method":"ping"}]`)
	// The go-sdk ends the session over it; a wrapped connection answered
	// both pings.
	served := make(chan bool, 1)
	go func() {
		answered := false
		for lines.Scan() {
			answered = answered || strings.Contains(lines.Text(), `"result"`)
		}
		served <- answered
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("stdio did not exit: the batch was served and the session went on")
	}
	assert.False(t, <-served, "the batch was served")
	assert.Contains(t, errOut.String(), "batching is not supported")
}

func TestStdioRefusals(t *testing.T) {
	t.Parallel()
	path := demoConfig(t)
	r := runCLI(t, "", "stdio", "--config", path, "--session", "carol")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, `no session named "carol"`)
	assert.Empty(t, r.out, "standard output is reserved for MCP")

	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"mcpServers": {"x": {"command": ""}}}`), 0o600))
	r = runCLI(t, "", "stdio", "--config", bad, "--session", "a")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, bad+": mcpServers.x.command")

	r = runCLI(t, "", "stdio", "--config", path)
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "--session is required")
	r = runCLI(t, "", "stdio", "--session", "alice")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "--config is required")
	r = runCLI(t, "", "run")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "--config is required")
	r = runCLI(t, "", "run", "--config", path, "extra")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, `unexpected argument "extra"`)
}

func TestRunPrintsSessionsAndStops(t *testing.T) {
	t.Parallel()
	path := demoConfig(t)
	for _, print := range []bool{false, true} {
		args := []string{"run", "--config", path, "--listen", "127.0.0.1:0"}
		if print {
			args = append(args, "--print-tokens")
		}
		got, errOut := runUntil(t, "session bob", args...)
		assert.Contains(t, got, "/v1/state   /metrics   /healthz")
		assert.Contains(t, got, "/mcp/alice")
		assert.Contains(t, got, "/mcp/bob")
		assert.NotContains(t, got, "bob-token-0123456789abcdef", "a token from the environment is never printed")
		assert.Contains(t, got, "token from tokenEnv WASMHOST_TEST_BOB_TOKEN")
		if print {
			assert.Contains(t, got, "token alice-token-0123456789abcdef")
		} else {
			assert.NotContains(t, got, "alice-token-0123456789abcdef")
			assert.Contains(t, got, "/mcp/alice   (token inline in the config; --print-tokens shows it)")
		}
		assert.NotContains(t, errOut, "alice-token-0123456789abcdef", "tokens are never logged")
	}
}

// TestRunAddressInUseSaysWhatToDo: a listen address another process holds
// is refused with the way out, not only the system's error.
func TestRunAddressInUseSaysWhatToDo(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	r := runCLI(t, "", "run", "--config", demoConfig(t), "--listen", taken.Addr().String())
	assert.Equal(t, exitFail, r.code)
	assert.Contains(t, r.errOut, "address already in use")
	assert.Contains(t, r.errOut, "wasmhost run: another process (a wasmhost already running?) listens there: stop it, or listen elsewhere with --listen 127.0.0.1:PORT")
	assert.Empty(t, r.out)
}

// TestRunBannerWithoutAdmin: without an "admin" block the banner does not
// point at admin endpoints that answer 404; it says the admin API is off.
func TestRunBannerWithoutAdmin(t *testing.T) {
	t.Parallel()
	path := demoConfigWith(t, func(cfg map[string]any) { delete(cfg, "admin") })

	got, _ := runUntil(t, "Ctrl-C stops", "run", "--config", path, "--listen", "127.0.0.1:0")
	assert.NotContains(t, got, "/v1/state")
	assert.NotContains(t, got, "/metrics")
	assert.Contains(t, got, `/healthz   (admin API disabled: the config has no "admin" block)`)
}

func TestRunRefusals(t *testing.T) {
	t.Parallel()
	path := demoConfig(t)
	r := runCLI(t, "", "run", "--config", path, "--listen", "0.0.0.0:0")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "--allow-remote")

	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"listen": "nowhere"}`), 0o600))
	r = runCLI(t, "", "run", "--config", bad)
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, bad+": listen: expected host:port")

	r = runCLI(t, "", "run")
	assert.Equal(t, exitUsage, r.code)
}

// TestRunRefusesDebounceNotPositive: a --debounce of 0 or less is refused
// before anything starts, rather than taken for the default without a
// word. (Without the check the daemon would serve until ctx ends.)
func TestRunRefusesDebounceNotPositive(t *testing.T) {
	t.Parallel()
	path := demoConfig(t)
	for flag, want := range map[string]string{
		"-1s": "wasmhost run: --debounce -1s: must be more than 0 (default 200ms)",
		"0":   "wasmhost run: --debounce 0s: must be more than 0 (default 200ms)",
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		var out, errOut mcptest.LogBuffer
		code := run(ctx, []string{"run", "--config", path, "--listen", "127.0.0.1:0", "--debounce", flag}, strings.NewReader(""), &out, &errOut)
		cancel()
		assert.Equal(t, exitUsage, code, flag)
		assert.Contains(t, errOut.String(), want)
		assert.Empty(t, out.String(), "nothing was served")
	}
}

// TestRunRefusesHTTPTimeoutsNotPositive: --idle-timeout and
// --read-header-timeout of 0 or less are refused before anything starts,
// rather than taken for the default without a word.
func TestRunRefusesHTTPTimeoutsNotPositive(t *testing.T) {
	t.Parallel()
	path := demoConfig(t)
	for _, c := range []struct{ flag, value, want string }{
		{"--idle-timeout", "0", "wasmhost run: --idle-timeout 0s: must be more than 0 (default 2m0s)"},
		{"--idle-timeout", "-1s", "wasmhost run: --idle-timeout -1s: must be more than 0 (default 2m0s)"},
		{"--read-header-timeout", "0", "wasmhost run: --read-header-timeout 0s: must be more than 0 (default 10s)"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		var out, errOut mcptest.LogBuffer
		code := run(ctx, []string{"run", "--config", path, "--listen", "127.0.0.1:0", c.flag, c.value}, strings.NewReader(""), &out, &errOut)
		cancel()
		assert.Equal(t, exitUsage, code, c.flag)
		assert.Contains(t, errOut.String(), c.want)
		assert.Empty(t, out.String(), "nothing was served")
	}
}

// TestRunConnectionFlags: --max-conns and --max-conns-per-ip reach the
// daemon: with one connection allowed, a second is answered 503.
func TestRunConnectionFlags(t *testing.T) {
	t.Parallel()
	for _, flag := range []string{"--max-conns", "--max-conns-per-ip"} {
		path := demoConfig(t)
		ctx, cancel := context.WithCancel(t.Context())
		var o, e mcptest.LogBuffer
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"run", "--config", path, "--listen", "127.0.0.1:0", flag, "1"}, strings.NewReader(""), &o, &e)
		}()
		waitFor(t, readyWithin, func() bool { return strings.Contains(o.String(), "Ctrl-C stops") }, e.String, "the banner")
		addr := strings.TrimPrefix(strings.Fields(o.String())[3], "http://") // "wasmhost listening on http://ADDR"
		first, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		second, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		require.NoError(t, second.SetReadDeadline(time.Now().Add(within(t, eventWithin))))
		answer, _ := io.ReadAll(second)
		assert.True(t, strings.HasPrefix(string(answer), "HTTP/1.1 503 Service Unavailable\r\n"), "%s 1: %q", flag, answer)
		first.Close()
		second.Close()
		cancel()
		select {
		case code := <-done:
			assert.Equal(t, exitOK, code, e.String())
		case <-time.After(within(t, readyWithin)):
			t.Fatalf("run did not stop within %v; stderr:\n%s\ngoroutines:\n%s", readyWithin, e.String(), stacks())
		}
	}
}

// TestCacheDirRefusalNamesTheFlag: run and stdio with a compilation cache
// directory that cannot be used say which directory and how to choose
// another, and do not blame the config's "policy" setting.
func TestCacheDirRefusalNamesTheFlag(t *testing.T) {
	t.Parallel()
	path := demoConfig(t)
	for _, args := range [][]string{
		{"run", "--config", path, "--listen", "127.0.0.1:0", "--cache-dir", "/dev/null/cache"},
		{"stdio", "--config", path, "--session", "alice", "--cache-dir", "/dev/null/cache"},
	} {
		r := runCLI(t, "", args...)
		assert.Equal(t, exitUsage, r.code, args[0])
		assert.Contains(t, r.errOut, `cannot use the compilation cache directory "/dev/null/cache"`, args[0])
		assert.Contains(t, r.errOut, "wasmhost "+args[0]+": choose another compilation cache directory with --cache-dir DIR, or none with --cache-dir=", args[0])
		assert.NotContains(t, r.errOut, path+": policy", "%s: the config is not at fault", args[0])
	}
}

func TestExampleConfigIsValid(t *testing.T) {
	t.Parallel()
	cfg, warnings, err := config.Load("../../examples/demo.json")
	require.NoError(t, err)
	assert.Empty(t, warnings)
	assert.Equal(t, []string{"alice", "bob"}, cfg.SessionNames())
	require.Equal(t, []string{"demo"}, cfg.ServerNames())
	demo := cfg.Servers["demo"]
	assert.Equal(t, "./bin/wasmhost", demo.Command, "make run starts it from the repository root")
	assert.Equal(t, []string{"demo-server"}, demo.Args)
	assert.True(t, demo.Pooled, "both sessions share one process")
	_, a, _ := cfg.Sessions["alice"].Effective("demo")
	_, b, _ := cfg.Sessions["bob"].Effective("demo")
	assert.NotEqual(t, string(a), string(b), "the sessions have different policies")
	assert.Equal(t, "token", cfg.Sessions["alice"].TokenSource, "inline demo tokens, printed by make run")
}

// TestRunStartupInputErrorsExitUsage checks that run, like stdio, exits
// with exitUsage when its input cannot be read or is refused: a config file
// that is missing or invalid, a policy plugin that is missing or does not
// match its pin, a malformed or non-loopback listen address.
func TestRunStartupInputErrorsExitUsage(t *testing.T) {
	t.Parallel()
	path := demoConfig(t)
	dir := t.TempDir()
	missingPolicy := filepath.Join(dir, "missing-policy.json")
	require.NoError(t, os.WriteFile(missingPolicy, []byte(`{"policy": {"path": "nope.wasm"}}`), 0o600))
	badPin := filepath.Join(dir, "bad-pin.json")
	require.NoError(t, os.WriteFile(badPin, []byte(`{"policy": {"sha256": "`+strings.Repeat("0", 64)+`"}}`), 0o600))
	invalid := filepath.Join(dir, "invalid.json")
	require.NoError(t, os.WriteFile(invalid, []byte(`{"sessions": {"a": {"token": 5}}}`), 0o600))

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing config", []string{"--config", filepath.Join(dir, "nonexistent.json")}, "nonexistent.json: no such file"},
		{"invalid config", []string{"--config", invalid}, invalid + ": sessions.a.token"},
		{"missing policy", []string{"--config", missingPolicy}, missingPolicy + ": policy.path: "},
		{"pin mismatch", []string{"--config", badPin}, badPin + ": policy.sha256: "},
		{"malformed listen", []string{"--config", path, "--listen", "nonsense"}, `listen "nonsense"`},
		{"bad port", []string{"--config", path, "--listen", "127.0.0.1:99999"}, `listen "127.0.0.1:99999"`},
		{"remote listen", []string{"--config", path, "--listen", "0.0.0.0:0"}, "--allow-remote"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, "", append([]string{"run"}, tc.args...)...)
			assert.Equal(t, exitUsage, r.code, r.errOut)
			assert.Contains(t, r.errOut, tc.want)
			assert.Empty(t, r.out, "nothing was served")
		})
	}
}

// runUntil runs the command args until its standard output has until,
// stops it as Ctrl-C does, checks that it ends well, and returns what it
// wrote to standard output and standard error.
func runUntil(t *testing.T, until string, args ...string) (out, errOut string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var o, e mcptest.LogBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, strings.NewReader(""), &o, &e) }()
	waitFor(t, readyWithin, func() bool { return strings.Contains(o.String(), until) }, e.String, "%q on standard output (it has %q)", until, &o)
	cancel()
	select {
	case code := <-done:
		assert.Equal(t, exitOK, code, e.String())
	case <-time.After(within(t, readyWithin)):
		t.Fatalf("run did not stop within %v; stderr:\n%s\ngoroutines:\n%s", readyWithin, e.String(), stacks())
	}
	return o.String(), e.String()
}

// TestStdioPluginConfigAndSettingsKeys: stdio mode reads the policy block
// first, hands policy.config to the plugin and accepts the settings keys
// the plugin declares (testplugins/readonly-policy: config "hide" hides
// tools, "readOnlyOnly" keeps the read-only ones).
func TestStdioPluginConfigAndSettingsKeys(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("compiles the read-only test plugin and serves it in stdio mode")
	}
	plugin, err := filepath.Abs(readonlyWasm)
	require.NoError(t, err)
	warmPlugin(t, plugin)
	path := demoConfigWith(t, func(cfg map[string]any) {
		cfg["policy"] = map[string]any{"path": plugin, "config": map[string]any{"hide": []string{"pid"}}}
		cfg["sessions"].(map[string]any)["alice"].(map[string]any)["overrides"] = map[string]any{"demo": map[string]any{"readOnlyOnly": true}}
		cfg["sessions"].(map[string]any)["bob"].(map[string]any)["overrides"] = map[string]any{}
	})
	cs, finish := pipeClient(t, "stdio", "--config", path, "--session", "alice")
	want := []string{"add", "echo", "read_note"}
	require.Eventually(t, func() bool { return len(toolNames(t, cs)) == len(want) }, 20*time.Second, 20*time.Millisecond)
	assert.Equal(t, want, toolNames(t, cs))
	code, stderr := finish()
	assert.Equal(t, exitOK, code, stderr)
}

// TestConformancePluginConfig: --plugin-config hands the plugin its
// configuration, as policy.config does in a config file, so a plugin that
// reads one can be tested (testplugins/readonly-policy hides the tools its
// config names).
func TestConformancePluginConfig(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a conformance suite against several plugin configs; TestConformanceFails and TestConformanceExit2 stay in -short; run without -short")
	}
	dir := t.TempDir()
	suite := `{"suite": "config", "cases": [{"name": "hidden by config", "settings": {"readOnlyOnly": false},
  "snapshot": {"tools": [{"name": "a", "inputSchema": {"type": "object"}}, {"name": "b", "inputSchema": {"type": "object"}}]},
  "project": {"tools": [{"name": "a", "trust": false, "alwaysLoad": false}]}}]}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(suite), 0o600))
	plugin, err := filepath.Abs(readonlyWasm)
	require.NoError(t, err)
	warmPlugin(t, plugin)
	r := runCLI(t, "", "conformance", "--plugin", plugin, "--plugin-config", `{"hide": ["b"]}`, dir)
	assert.Equal(t, exitOK, r.code, r.out+r.errOut)
	assert.Equal(t, "1 passed, 0 failed\n", r.out)
	r = runCLI(t, "", "conformance", "--plugin", plugin, dir)
	assert.Equal(t, exitFail, r.code, r.out+r.errOut)

	// @FILE reads the configuration from a file.
	cfg := filepath.Join(t.TempDir(), "plugin-config.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"hide": ["b"]}`), 0o600))
	r = runCLI(t, "", "conformance", "--plugin", plugin, "--plugin-config", "@"+cfg, dir)
	assert.Equal(t, exitOK, r.code, r.out+r.errOut)
	r = runCLI(t, "", "conformance", "--plugin", plugin, "--plugin-config", "@"+cfg+".missing", dir)
	assert.Equal(t, exitUsage, r.code, r.out+r.errOut)
	assert.Contains(t, r.errOut, "--plugin-config: open "+cfg+".missing")
}
