package daemon_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/demoserver"
)

// tokenEnvs are the variables TestTokenEnvsNotInUpstreamEnv's config reads
// tokens from (tokenEnv), set once for the process by TestMain: a test
// that sets the environment cannot run in parallel.
var tokenEnvs = map[string]string{
	"WASMHOST_TEST_ADMIN_TOKEN": "admin-secret-from-env-0123456789",
	"WASMHOST_TEST_BOB_TOKEN":   "bob-secret-from-env-0123456789",
}

// TestTokenEnvsNotInUpstreamEnv: a stdio upstream inherits the daemon's
// environment without the variables it reads tokens from ("tokenEnv"),
// the admin token's and the sessions'; a variable the server's own "env"
// sets still reaches it.
func TestTokenEnvsNotInUpstreamEnv(t *testing.T) {
	t.Parallel()
	// TestMain set the two variables (tokenEnvs), so that this test may
	// run in parallel.
	adminSecret, bobSecret := tokenEnvs["WASMHOST_TEST_ADMIN_TOKEN"], tokenEnvs["WASMHOST_TEST_BOB_TOKEN"]
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
