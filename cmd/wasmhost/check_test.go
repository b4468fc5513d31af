package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheckGoodConfig: a config the daemon would load passes, with its
// warnings, and exits 0.
func TestCheckGoodConfig(t *testing.T) {
	t.Parallel()
	path := demoConfigWith(t, func(cfg map[string]any) {
		cfg["mcpServers"].(map[string]any)["demo"].(map[string]any)["oauth"] = map[string]any{}
	})
	r := runCLI(t, "", "check", "--config", path)
	assert.Equal(t, exitOK, r.code, r.out+r.errOut)
	assert.Equal(t, "warning: "+path+": mcpServers.demo.oauth: not supported by wasmhost, ignored\n"+path+": ok\n", r.out)
}

// TestCheckReportsEveryProblem: each problem is one line with the file and
// JSON path, the exit status is 1, and nothing is served or started.
func TestCheckReportsEveryProblem(t *testing.T) {
	t.Parallel()
	path := demoConfigWith(t, func(cfg map[string]any) {
		sessions := cfg["sessions"].(map[string]any)
		o := sessions["alice"].(map[string]any)["overrides"].(map[string]any)["demo"].(map[string]any)
		o["includeTool"] = o["includeTools"]
		delete(o, "includeTools")
		bob := sessions["bob"].(map[string]any)
		bob["overides"] = bob["overrides"]
		delete(bob, "overrides")
		cfg["listen"] = "127.0.0.1:http-ish"
	})
	r := runCLI(t, "", "check", "--config", path)
	assert.Equal(t, exitFail, r.code, r.out+r.errOut)
	assert.Equal(t, []string{
		path + `: listen: the port must be a number from 0 to 65535`,
		path + `: sessions.alice.overrides.demo.includeTool: unknown key; did you mean "includeTools"?`,
		path + `: sessions.bob.overides: unknown key; did you mean "overrides"?`,
	}, lines(r.out))
}

// TestCheckMakesThePolicysTrialCalls: a plugin that loads but refuses the
// settings the sessions have fails the check, naming each binding and the
// JSON path of its settings, as a reload bringing it would be refused; a
// plugin file that cannot be read fails it at policy.path.
func TestCheckMakesThePolicysTrialCalls(t *testing.T) {
	t.Parallel()
	picky, err := os.ReadFile("../../testplugins/wat/picky.wasm")
	require.NoError(t, err)
	pickyPath := filepath.Join(t.TempDir(), "picky.wasm")
	require.NoError(t, os.WriteFile(pickyPath, picky, 0o600))

	path := demoConfigWith(t, func(cfg map[string]any) {
		cfg["policy"] = map[string]any{"path": pickyPath}
	})
	r := runCLI(t, "", "check", "--config", path, "--cache-dir=")
	assert.Equal(t, exitFail, r.code, r.out+r.errOut)
	out := lines(r.out)
	require.Len(t, out, 2, r.out)
	assert.True(t, strings.HasPrefix(out[0], path+`: sessions.alice.overrides.demo over mcpServers.demo: session "alice", server "demo": the policy refuses the settings`), out[0])
	assert.True(t, strings.HasPrefix(out[1], path+`: sessions.bob.overrides.demo over mcpServers.demo: session "bob", server "demo": the policy refuses the settings`), out[1])

	path = demoConfigWith(t, func(cfg map[string]any) {
		cfg["policy"] = map[string]any{"path": "nope.wasm"}
	})
	r = runCLI(t, "", "check", "--config", path, "--cache-dir=")
	assert.Equal(t, exitFail, r.code, r.out+r.errOut)
	assert.True(t, strings.HasPrefix(r.out, path+": policy.path: plugin "), r.out)
	assert.Len(t, lines(r.out), 1)
}

// TestCheckWithABrokenPolicyBlockLeavesPluginKeysUnchecked: when the
// policy block itself is refused (a malformed pin), the plugin is not
// loaded and its settingsKeys are unknown: its own keys in server entries
// are not reported as unknown keys, which would send the operator after
// a plugin that does declare them. They are named in a warning instead.
func TestCheckWithABrokenPolicyBlockLeavesPluginKeysUnchecked(t *testing.T) {
	t.Parallel()
	plugin, err := filepath.Abs(readonlyWasm)
	require.NoError(t, err)
	path := demoConfigWith(t, func(cfg map[string]any) {
		cfg["policy"] = map[string]any{"path": plugin, "sha256": "3f1c"}
		cfg["mcpServers"].(map[string]any)["demo"].(map[string]any)["readOnlyOnly"] = true
	})
	r := runCLI(t, "", "check", "--config", path, "--cache-dir=")
	assert.Equal(t, exitFail, r.code, r.out+r.errOut)
	assert.Equal(t, []string{
		"warning: " + path + ": mcpServers.demo.readOnlyOnly: not checked: the policy block is refused, and the plugin it names may declare this key in its settingsKeys",
		path + ": policy.sha256: expected 64 hexadecimal digits (a SHA-256 digest)",
	}, lines(r.out))
}

func TestCheckUsage(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "check")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "--config is required")
	r = runCLI(t, "", "help", "check")
	assert.Equal(t, exitOK, r.code)
	assert.Contains(t, r.errOut, "usage: wasmhost check --config FILE")
	assert.Contains(t, r.errOut, "one line per problem")
	r = runCLI(t, "", "check", "--config", filepath.Join(t.TempDir(), "missing.json"))
	assert.Equal(t, exitFail, r.code)
	assert.Contains(t, r.out, "missing.json")
}
