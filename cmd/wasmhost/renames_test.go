package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInspectRenames: inspect says when a plugin opts into renames, and
// `wasmhost project` states its renames and descriptions in the golden
// form.
func TestInspectRenames(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("compiles the rename test plugin")
	}
	plugin := "../../testplugins/rename-policy/rename-policy.wasm"
	r := runCLI(t, "", "inspect", plugin)
	require.Equal(t, exitOK, r.code, r.out+r.errOut)
	assert.Contains(t, r.out, "handshake: rename-policy 1.0.0 (abi 1), renames\n")

	snap := `{"tools": [{"name": "echo", "description": "Echo."}], "prompts": [{"name": "summarize"}, {"name": "greet"}]}`
	r = runCLI(t, snap, "project", "--plugin", plugin, "--plugin-config", `{"tools": {"echo": {"name": "say", "description": "Say it."}}, "prompts": {"summarize": {"name": "sum"}}}`,
		"--settings", `{"shortNames": true}`, "--snapshot", "-")
	require.Equal(t, exitOK, r.code, r.out+r.errOut)
	assert.JSONEq(t, `{"tools": [{"name": "echo", "trust": false, "alwaysLoad": false, "rename": "say", "description": "Say it."}],
	  "prompts": [{"name": "summarize", "rename": "sum"}, "greet"], "resources": []}`, r.out)
}
