package daemon_test

// Renames and descriptions (abi/SPEC.md section 5.3) end to end, with
// testplugins/rename-policy: policy.config says how tools and prompts are
// renamed and redescribed, and the plugin-owned settings key "shortNames"
// says which sessions get that.

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/view"
)

// renameConfig is baseConfig with rename-policy, renaming echo to "say"
// (with a description of its own) and the prompt summarize to "sum", and
// no overrides: at first neither alice nor bob has shortNames.
func renameConfig(t *testing.T) map[string]any {
	t.Helper()
	path, err := filepath.Abs("../testplugins/rename-policy/rename-policy.wasm")
	require.NoError(t, err)
	warmPlugin(t, path)
	cfg := baseConfig()
	set(cfg, "policy", map[string]any{"path": path, "config": map[string]any{
		"tools":   map[string]any{"echo": map[string]any{"name": "say", "description": "Say it back."}},
		"prompts": map[string]any{"summarize": map[string]any{"name": "sum", "description": "Sum a note up."}},
	}})
	set(cfg, "sessions.alice.overrides", map[string]any{})
	set(cfg, "sessions.bob.overrides", map[string]any{})
	return cfg
}

// toolsByName lists c's tools by exposed name.
func toolsByName(t *testing.T, c *client) map[string]*mcp.Tool {
	t.Helper()
	res, err := c.cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	out := make(map[string]*mcp.Tool, len(res.Tools))
	for _, tool := range res.Tools {
		out[tool.Name] = tool
	}
	return out
}

// promptsByName lists c's prompts by exposed name.
func promptsByName(t *testing.T, c *client) map[string]*mcp.Prompt {
	t.Helper()
	res, err := c.cs.ListPrompts(t.Context(), nil)
	require.NoError(t, err)
	out := make(map[string]*mcp.Prompt, len(res.Prompts))
	for _, p := range res.Prompts {
		out[p.Name] = p
	}
	return out
}

// TestRenamesEndToEnd: (a) a reload that changes only the plugin-owned key
// of one session churns no transport and changes only that session's
// view, with a list_changed to its client only; (b) the session sees the
// plugin's names and descriptions (the session's prefix on top), a call
// of an exposed name reaches the upstream under its own name, and the
// upstream's name no longer answers; (c) a swap to a plugin config whose
// renames collide, or break MCP's naming rule, is refused as bad output
// and the running projection keeps serving.
func TestRenamesEndToEnd(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := renameConfig(t)
	r := start(t, cfg, adminReloadsOnly)
	promptsChanged := make(chan struct{}, 100)
	alice := r.connect("alice", aliceToken, func(o *mcp.ClientOptions) {
		o.PromptListChangedHandler = func(context.Context, *mcp.PromptListChangedRequest) { promptsChanged <- struct{}{} }
	})
	bob := r.connect("bob", bobToken)
	all := []string{"demo__add", "demo__add_tool", "demo__echo", "demo__pid", "demo__read_note", "demo__write_note"}
	require.Equal(t, all, alice.tools(t), "without shortNames nothing is renamed")
	require.Equal(t, all, bob.tools(t))
	pid := alice.pid(t)
	assert.True(t, r.state().Policy.Renames, "the state shows the plugin opted into renames")

	// (a) Only alice's override changes, only in the plugin's key.
	set(cfg, "sessions.alice.overrides", map[string]any{"demo": map[string]any{"shortNames": true}})
	code, res, body := r.reloadWith(cfg)
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, []string{"alice"}, res.Changed, body)
	assert.Contains(t, res.Summary, "transports 1 reused, 0 started, 0 stopped", body)
	assert.False(t, res.PolicySwapped)
	alice.waitChanged(t)
	renamed := []string{"demo__add", "demo__add_tool", "demo__pid", "demo__read_note", "demo__say", "demo__write_note"}
	assert.Equal(t, renamed, alice.tools(t))
	assert.Equal(t, all, bob.tools(t))
	assert.Equal(t, pid, alice.pid(t), "the same upstream process")
	assert.Equal(t, 0, bob.countChanged(300*time.Millisecond), "bob's view did not change")
	select {
	case <-promptsChanged:
	case <-time.After(within(t, eventWithin)):
		t.Fatalf("alice heard no prompts/list_changed within %v", eventWithin)
	}

	// (b) What alice sees, and where her calls go.
	tools := toolsByName(t, alice)
	require.Contains(t, tools, "demo__say")
	assert.Equal(t, "Say it back.", tools["demo__say"].Description)
	assert.NotContains(t, tools["demo__say"].Meta, view.MetaUpstreamName, "the upstream's name stays in the session")
	assert.Equal(t, "Add two numbers.", tools["demo__add"].Description, "tools not configured keep theirs")
	assert.Equal(t, "Echo the given text.", toolsByName(t, bob)["demo__echo"].Description)
	out, err := alice.call(t, "demo__say", map[string]any{"text": "renamed hello"})
	require.NoError(t, err)
	require.False(t, out.IsError, resultText(out))
	assert.Equal(t, "renamed hello", resultText(out), "the upstream's echo answered")
	_, err = alice.call(t, "demo__echo", map[string]any{"text": "x"})
	require.Error(t, err, "the upstream's own name is not alice's")
	assert.Contains(t, err.Error(), `unknown tool "demo__echo"`)
	out, err = bob.call(t, "demo__echo", map[string]any{"text": "bob's echo"})
	require.NoError(t, err)
	assert.Equal(t, "bob's echo", resultText(out))

	// The operator's tools route names the upstream's tool behind a rename.
	code, body = r.do("GET", "/v1/sessions/alice/servers/demo/tools", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, code, body)
	var listed struct{ Tools []reconcile.ToolState }
	require.NoError(t, json.Unmarshal([]byte(body), &listed), body)
	assert.Contains(t, listed.Tools, reconcile.ToolState{Name: "say", UpstreamName: "echo"}, body)

	prompts := promptsByName(t, alice)
	require.Contains(t, prompts, "demo__sum", "prompts: %v", slices.Collect(mapKeys(prompts)))
	assert.NotContains(t, prompts, "demo__summarize")
	assert.Equal(t, "Sum a note up.", prompts["demo__sum"].Description)
	assert.NotContains(t, prompts["demo__sum"].Meta, view.MetaUpstreamName)
	_, err = alice.call(t, "demo__write_note", map[string]any{"name": "todo", "text": "ship it"})
	require.NoError(t, err)
	got, err := alice.cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "demo__sum", Arguments: map[string]string{"name": "todo"}})
	require.NoError(t, err, "prompts/get of the exposed name reaches the upstream's summarize")
	require.NotEmpty(t, got.Messages)
	assert.Contains(t, got.Messages[0].Content.(*mcp.TextContent).Text, "ship it")
	comp, err := alice.cs.Complete(t.Context(), &mcp.CompleteParams{
		Ref:      &mcp.CompleteReference{Type: "ref/prompt", Name: "demo__sum"},
		Argument: mcp.CompleteParamsArgument{Name: "name", Value: ""},
	})
	require.NoError(t, err, "completion/complete of the exposed prompt name reaches the upstream")
	require.NotNil(t, comp)

	// (c) A swap whose renames collide: echo and pid would both be "pid".
	stillServed := func() {
		t.Helper()
		assert.Equal(t, renamed, alice.tools(t))
		out, err := alice.call(t, "demo__say", map[string]any{"text": "still here"})
		require.NoError(t, err)
		assert.Equal(t, "still here", resultText(out))
		assert.Equal(t, pid, alice.pid(t))
		assert.Equal(t, 0, alice.countChanged(300*time.Millisecond), "no list change reached alice")
	}
	good := cfg["policy"].(map[string]any)["config"]
	set(cfg, "policy.config", map[string]any{"tools": map[string]any{"echo": map[string]any{"name": "pid"}}})
	code, res, body = r.reloadWith(cfg)
	assert.Equal(t, http.StatusUnprocessableEntity, code, body)
	assert.False(t, res.Applied, body)
	assert.Contains(t, res.Error, `are both exposed as "pid"`, body)
	assert.Contains(t, res.Error, `session "alice", server "demo"`, body)
	stillServed()

	// ... or break MCP's naming rule.
	set(cfg, "policy.config", map[string]any{"tools": map[string]any{"echo": map[string]any{"name": "say it"}}})
	code, res, body = r.reloadWith(cfg)
	assert.Equal(t, http.StatusUnprocessableEntity, code, body)
	assert.False(t, res.Applied, body)
	assert.Contains(t, res.Error, `outside the MCP tool-name rule`, body)
	stillServed()

	// The good config again is no change at all.
	set(cfg, "policy.config", good)
	code, _, body = r.reloadWith(cfg)
	require.Equal(t, http.StatusOK, code, body)
	stillServed()
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestRenamesBadOutputFailsClosed: when a settings change makes the plugin
// rename badly (here two tools to one name, for the sessions with
// shortNames), the session whose settings those are sees nothing of the
// server, as with any bad output; the other session keeps its view and
// hears of no change.
func TestRenamesBadOutputFailsClosed(t *testing.T) {
	t.Parallel()
	cfg := renameConfig(t)
	set(cfg, "policy.config", map[string]any{"tools": map[string]any{"echo": map[string]any{"name": "pid"}}})
	r := start(t, cfg, adminReloadsOnly)
	alice, bob := r.connect("alice", aliceToken), r.connect("bob", bobToken)
	all := []string{"demo__add", "demo__add_tool", "demo__echo", "demo__pid", "demo__read_note", "demo__write_note"}
	require.Equal(t, all, alice.tools(t), "without shortNames the plugin renames nothing")
	require.Equal(t, all, bob.tools(t))

	// The reload applies (the plugin takes the settings) and reports the
	// binding its plugin answered badly for.
	set(cfg, "sessions.alice.overrides", map[string]any{"demo": map[string]any{"shortNames": true}})
	code, res, body := r.reloadWith(cfg)
	require.Equal(t, http.StatusBadGateway, code, body)
	assert.True(t, res.Applied, body)
	assert.Equal(t, []string{"alice"}, res.Changed, body)
	assert.Contains(t, res.Error, `session "alice", server "demo"`, body)
	assert.Contains(t, res.Error, `bad output: project: tools[2] ("echo") and tools[3] ("pid") are both exposed as "pid"`, body)
	assert.Contains(t, res.Summary, "transports 1 reused, 0 started, 0 stopped; ", body)
	alice.waitChanged(t)
	assert.Empty(t, alice.tools(t), "alice's view failed closed")
	assert.Equal(t, all, bob.tools(t))
	assert.Equal(t, 0, bob.countChanged(300*time.Millisecond), "bob's view did not change")

	// Back without the key, alice sees the server again.
	set(cfg, "sessions.alice.overrides", map[string]any{})
	code, _, body = r.reloadWith(cfg)
	require.Equal(t, http.StatusOK, code, body)
	alice.waitChanged(t)
	assert.Equal(t, all, alice.tools(t))
}
