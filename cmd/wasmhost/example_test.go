package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
)

// teamAccess is the example plugin a team would deploy (examples/team-access).
var teamAccess = filepath.Join("..", "..", "examples", "team-access")

// TestExampleTeamAccess: the example's config (wasmhost.json) loads as the
// daemon loads it, with its pinned plugin, its policy.config and the
// settings keys the plugin owns (wasmhost check); its golden suite passes
// against the committed .wasm with the suite's configuration, as its
// Makefile runs it; and each session of the config, served in stdio mode
// with the demo server as upstream, sees the tools its team, its
// read-only setting and its overrides give it, under the names the
// plugin gives them, and calls them by those names.
func TestExampleTeamAccess(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("compiles the example plugin and serves it in stdio mode")
	}
	config := filepath.Join(teamAccess, "wasmhost.json")
	r := runCLI(t, "", "check", "--config", config)
	require.Equal(t, exitOK, r.code, r.out+r.errOut)
	l := lines(r.out)
	assert.Equal(t, config+": ok", l[len(l)-1])
	for _, w := range l[:len(l)-1] {
		// ./bin/wasmhost, the demo upstream, is relative to where the
		// daemon runs: the repository's root.
		assert.Regexp(t, `^warning: .*mcpServers\.demo\.command: server "demo" cannot start`, w)
	}

	wasm := filepath.Join(teamAccess, "team-access.wasm")
	golden := filepath.Join(teamAccess, "golden")
	r = runCLI(t, "", "conformance", "--plugin", wasm, "--plugin-config", "@"+filepath.Join(teamAccess, "testdata", "plugin-config.json"), golden)
	require.Equal(t, exitOK, r.code, r.out+r.errOut)
	assert.Equal(t, fmt.Sprintf("%d passed, 0 failed\n", goldenCases(t, golden)), r.out)

	// The config as it is, but for the upstream's command (the demo
	// server in this test binary) and the plugin's path (absolute, since
	// the copy is elsewhere).
	b, err := os.ReadFile(config)
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(b, &cfg))
	abs, err := filepath.Abs(wasm)
	require.NoError(t, err)
	cfg["policy"].(map[string]any)["path"] = abs
	demo := cfg["mcpServers"].(map[string]any)["demo"].(map[string]any)
	demo["command"], demo["args"] = os.Args[0], []string{"-test.run=^TestHelperDemoServer$"}
	demo["env"] = map[string]any{"WASMHOST_CLI_DEMO_HELPER": "1"}
	b, err = json.Marshal(cfg)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "wasmhost.json")
	require.NoError(t, os.WriteFile(path, b, 0o600))

	for session, want := range map[string]struct {
		tools, prompts []string
		call           mcp.CallToolParams
	}{
		// read_note is exposed as read (the config's names): a call of
		// read reaches the upstream's read_note.
		"reader": {[]string{"echo", "read"}, []string{"summarize"}, mcp.CallToolParams{Name: "read", Arguments: map[string]any{"name": "welcome"}}},
		"writer": {[]string{"echo", "read", "write_note"}, []string{"summarize"}, mcp.CallToolParams{Name: "write_note", Arguments: map[string]any{"name": "n", "text": "x"}}},
		"ops":    {[]string{"add", "add_tool", "pid"}, []string{"greet"}, mcp.CallToolParams{Name: "pid", Arguments: map[string]any{}}},
	} {
		t.Run(session, func(t *testing.T) {
			cs, finish := pipeClient(t, "stdio", "--config", path, "--session", session)
			assert.Equal(t, want.tools, toolNames(t, cs))
			prompts, err := cs.ListPrompts(t.Context(), nil)
			require.NoError(t, err)
			var names []string
			for _, p := range prompts.Prompts {
				names = append(names, p.Name)
			}
			slices.Sort(names)
			assert.Equal(t, want.prompts, names)
			res, err := cs.CallTool(t.Context(), &want.call)
			require.NoError(t, err)
			assert.False(t, res.IsError, "%s", mcptest.Text(res))
			if session == "reader" {
				assert.Contains(t, mcptest.Text(res)+fmt.Sprint(res.StructuredContent), "Hello from the wasmhost demo server.")
			}
			code, stderr := finish()
			assert.Equal(t, exitOK, code, stderr)
		})
	}
}
