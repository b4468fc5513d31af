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
	skipEndToEndIfShort(t)
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

// TestOverlayEquivalentSettingsCauseNoChurn: an overlay PUT or PATCH whose
// settings mean what the session has now, in other bytes (a list
// reordered, with duplicates and argument lists), on the same transport
// written differently, changes nothing the client sees: no list change, no
// reconnect.
func TestOverlayEquivalentSettingsCauseNoChurn(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	r := start(t, cfg, adminReloadsOnly)
	before, stillServed := r.watchAlice(t)
	require.Equal(t, []string{"demo__add", "demo__echo", "demo__pid"}, before)
	entry := cfg["mcpServers"].(map[string]any)["demo"].(map[string]any)

	put := mustJSON(t, map[string]any{
		"command": entry["command"], "env": entry["env"], "args": []string{}, "pooled": true,
		"trust": true, "includeTools": []string{"pid", "echo(x)", "add", "echo"},
	})
	code, body := r.do("PUT", "/v1/sessions/alice/servers/demo", adminToken, strings.NewReader(put), nil)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "0 clients notified", body)
	stillServed()

	code, body = r.do("PATCH", "/v1/sessions/alice/servers/demo", adminToken, strings.NewReader(`{"includeTools": ["add", "add", "pid", "echo"], "excludeTools": null}`), nil)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "0 clients notified", body)
	stillServed()

	code, body = r.do("DELETE", "/v1/sessions/alice/servers/demo", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "0 clients notified", body)
	stillServed()
}
