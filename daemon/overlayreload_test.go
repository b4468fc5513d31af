package daemon_test

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/demoserver"
)

// TestOverlayOfServerTheReloadRemovesGoes: a reload that removes a server
// from mcpServers removes it from every session, an overlay's included: an
// overlay changes a configured server, it never keeps one the file no
// longer has (docs/security.md: the admin token cannot add a server the
// config does not have).
func TestOverlayOfServerTheReloadRemovesGoes(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end to end (a daemon, an upstream process, the default plugin); -short keeps a faster test of this area; run without -short")
	}
	self, err := os.Executable()
	require.NoError(t, err)
	cfg := baseConfig()
	cfg["mcpServers"].(map[string]any)["extra"] = map[string]any{
		"command": self, "env": map[string]any{demoserver.ChildEnv: "1", "EXTRA": "1"},
	}
	r := start(t, cfg, adminReloadsOnly)
	alice := r.connect("alice", aliceToken)
	require.Contains(t, alice.tools(t), "extra__echo")

	entry := mustJSON(t, map[string]any{"command": self, "env": map[string]any{demoserver.ChildEnv: "1", "EXTRA": "1"}, "includeTools": []string{"echo"}})
	code, body := r.do("PUT", "/v1/sessions/alice/servers/extra", adminToken, strings.NewReader(entry), nil)
	require.Equal(t, http.StatusOK, code, body)

	delete(cfg["mcpServers"].(map[string]any), "extra")
	code, res, body := r.reloadWith(cfg)
	require.Equal(t, http.StatusOK, code, body)
	assert.True(t, res.OK, body)
	for _, tool := range alice.tools(t) {
		assert.False(t, strings.HasPrefix(tool, "extra__"), "alice still sees %s of the removed server", tool)
	}
	res2, err := alice.call(t, "extra__echo", map[string]any{"text": "x"})
	if err == nil {
		assert.True(t, res2.IsError, "a removed server's tool is still callable: %s", resultText(res2))
	}
	for _, s := range r.state().Sessions {
		for _, b := range s.Servers {
			assert.NotEqual(t, "extra", b.Server, "session %s keeps a binding of the removed server", s.Name)
		}
	}
}
