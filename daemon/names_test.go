package daemon_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/demoserver"
)

// TestDefaultNamesAndInstructions: a session with the default naming and
// one server offers its tools under their own names, and its clients get
// the server's instructions where the server entry allows them. A reload
// adding a server with clashing tools tells the client, the old names
// become unknown (never a route to the new server), both servers' tools
// are there prefixed, and a new client gets both servers' instructions. A
// reload to "prefixed" names renames the rest.
func TestDefaultNamesAndInstructions(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	demo := cfg["mcpServers"].(map[string]any)["demo"].(map[string]any)
	demo["instructions"] = true
	set(cfg, "sessions.alice.names", defaultNames)
	set(cfg, "sessions.alice.servers", []string{"demo"})
	set(cfg, "sessions.bob.overrides.demo.instructions", false)
	r := start(t, cfg)

	alice := r.connect("alice", aliceToken)
	assert.Equal(t, []string{"add", "echo", "pid"}, alice.tools(t))
	assert.Equal(t, demoserver.Instructions, alice.cs.InitializeResult().Instructions)
	pidOf := func(name string) int {
		t.Helper()
		res, err := alice.call(t, name, map[string]any{})
		require.NoError(t, err, name)
		require.False(t, res.IsError, resultText(res))
		pid, err := strconv.Atoi(resultText(res))
		require.NoError(t, err)
		return pid
	}
	pid := pidOf("pid")
	bob := r.connect("bob", bobToken)
	assert.Empty(t, bob.cs.InitializeResult().Instructions, "bob's override keeps demo's instructions from his session")

	demo2 := map[string]any{"command": demo["command"], "env": demo["env"], "instructions": true}
	set(cfg, "mcpServers.demo2", demo2)
	set(cfg, "sessions.alice.servers", []string{"demo", "demo2"})
	set(cfg, "sessions.alice.overrides.demo2", map[string]any{"includeTools": []string{"pid"}})
	writeConfig(t, r.path, cfg)
	alice.waitChanged(t)
	require.Eventually(t, func() bool {
		names := alice.tools(t)
		return len(names) == 4 && names[0] == "add"
	}, 60*time.Second, 20*time.Millisecond, "tools after the reload")
	assert.Equal(t, []string{"add", "demo2__pid", "demo__pid", "echo"}, alice.tools(t))
	_, err := alice.call(t, "pid", map[string]any{})
	require.ErrorContains(t, err, `unknown tool "pid"`)
	assert.Equal(t, pid, pidOf("demo__pid"))
	assert.NotEqual(t, pid, pidOf("demo2__pid"), "demo2 is another process")

	again := r.connect("alice", aliceToken)
	assert.Equal(t, "## demo\n"+demoserver.Instructions+"\n\n## demo2\n"+demoserver.Instructions, again.cs.InitializeResult().Instructions)
	assert.Equal(t, demoserver.Instructions, alice.cs.InitializeResult().Instructions, "a connected client keeps what it got")

	// A reload changing the session's naming renames its tools, and tells
	// its clients.
	alice.countChanged(0)
	set(cfg, "sessions.alice.names", "prefixed")
	writeConfig(t, r.path, cfg)
	alice.waitChanged(t)
	require.Eventually(t, func() bool { return len(alice.tools(t)) == 4 && alice.tools(t)[0] == "demo2__pid" },
		60*time.Second, 20*time.Millisecond, "tools after the reload")
	assert.Equal(t, []string{"demo2__pid", "demo__add", "demo__echo", "demo__pid"}, alice.tools(t))
}
