package daemon_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/demoserver"
)

// TestTokenEnvsNotInUpstreamEnv: a stdio upstream inherits the daemon's
// environment without the variables it reads tokens from ("tokenEnv"),
// the admin token's and the sessions'; a variable the server's own "env"
// sets still reaches it.
func TestTokenEnvsNotInUpstreamEnv(t *testing.T) {
	const adminSecret = "admin-secret-from-env-0123456789"
	const bobSecret = "bob-secret-from-env-0123456789"
	t.Setenv("WASMHOST_TEST_ADMIN_TOKEN", adminSecret)
	t.Setenv("WASMHOST_TEST_BOB_TOKEN", bobSecret)
	self, err := os.Executable()
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "env.txt")
	cfg := baseConfig()
	set(cfg, "admin", map[string]any{"tokenEnv": "WASMHOST_TEST_ADMIN_TOKEN"})
	delete(cfg["sessions"].(map[string]any)["bob"].(map[string]any), "token")
	set(cfg, "sessions.bob.tokenEnv", "WASMHOST_TEST_BOB_TOKEN")
	set(cfg, "mcpServers.demo", map[string]any{
		"command": "/bin/sh",
		"args":    []string{"-c", `env > "$0.tmp" && mv "$0.tmp" "$0"; exec "$1"`, out, self},
		"env":     map[string]any{demoserver.ChildEnv: "1", "WASMHOST_TEST_BOB_TOKEN": "given-on-purpose"},
	})
	r := start(t, cfg)
	c := r.connect("bob", bobSecret)
	_ = c.tools(t)
	var env []byte
	require.Eventually(t, func() bool { env, _ = os.ReadFile(out); return len(env) > 0 }, eventWithin, 20*time.Millisecond)
	s := "\n" + string(env)
	require.NotContains(t, s, adminSecret, "the admin token reached the upstream's environment")
	require.NotContains(t, s, bobSecret, "a session token reached the upstream's environment")
	require.Contains(t, s, "\nWASMHOST_TEST_BOB_TOKEN=given-on-purpose\n", "the server's own env is passed")
	require.Contains(t, s, "\nPATH=", "the rest of the environment is inherited")
}
