package daemon_test

// A policy plugin's own configuration ("policy.config", handed over in
// its handshake) and its own per-server settings keys (declared in its
// handshake's settingsKeys), with testplugins/readonly-policy: config
// {"hide": [...]} hides tools from every session, settings key
// "readOnlyOnly" shows a session only the tools annotated read-only.

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// secretInPolicyConfig is a value of policy.config that must show nowhere.
const secretInPolicyConfig = "sk-live-policy-secret-4242"

// readonlyConfig is baseConfig with readonly-policy, hiding "add", and no
// overrides: alice and bob see the same tools at first.
func readonlyConfig(t *testing.T) map[string]any {
	t.Helper()
	path, err := filepath.Abs("../testplugins/readonly-policy/readonly-policy.wasm")
	require.NoError(t, err)
	warmPlugin(t, path)
	cfg := baseConfig()
	set(cfg, "policy", map[string]any{"path": path, "config": map[string]any{"hide": []string{"add"}, "apiKey": secretInPolicyConfig}})
	set(cfg, "mcpServers.demo.readOnlyOnly", false)
	set(cfg, "sessions.alice.overrides", map[string]any{})
	set(cfg, "sessions.bob.overrides", map[string]any{})
	return cfg
}

// A reload that changes only a plugin-owned settings key is a metadata
// change: no transport starts, the upstream process stays, and only the
// sessions whose settings changed get a new view and a list_changed. A
// change of policy.config is a policy swap, which the plugin sees.
// policy.config shows redacted in /v1/state and in no log.
func TestPluginSettingsKeyAndConfig(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := readonlyConfig(t)
	r := start(t, cfg, adminReloadsOnly)
	all := []string{"demo__add_tool", "demo__echo", "demo__pid", "demo__read_note", "demo__write_note"}
	alice, bob := r.connect("alice", aliceToken), r.connect("bob", bobToken)
	require.Equal(t, all, alice.tools(t), "policy.config reached the plugin: add is hidden")
	require.Equal(t, all, bob.tools(t))
	pid := alice.pid(t)

	st := r.state()
	assert.Equal(t, "readonly-policy", st.Policy.Name)
	assert.Equal(t, []string{"readOnlyOnly"}, st.Policy.SettingsKeys)
	assert.JSONEq(t, `{"apiKey":"REDACTED","hide":["REDACTED"]}`, string(st.Policy.Config))
	assert.Len(t, st.Policy.ConfigSHA256, 64)

	// Only alice's override changes, only in the plugin's key.
	set(cfg, "sessions.alice.overrides", map[string]any{"demo": map[string]any{"readOnlyOnly": true}})
	code, res, body := r.reloadWith(cfg)
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, []string{"alice"}, res.Changed, body)
	assert.Contains(t, res.Summary, "transports 1 reused, 0 started, 0 stopped", body)
	assert.False(t, res.PolicySwapped)
	alice.waitChanged(t)
	assert.Equal(t, []string{"demo__echo", "demo__pid", "demo__read_note"}, alice.tools(t))
	assert.Equal(t, all, bob.tools(t))
	assert.Equal(t, pid, alice.pid(t), "the same upstream process")
	assert.Equal(t, 0, bob.countChanged(300*time.Millisecond), "bob's view did not change")

	// The server entry's key: bob changes, alice's override keeps hers.
	set(cfg, "mcpServers.demo.readOnlyOnly", true)
	code, res, body = r.reloadWith(cfg)
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, []string{"bob"}, res.Changed, body)
	assert.Contains(t, res.Summary, "0 started, 0 stopped", body)
	bob.waitChanged(t)
	assert.Equal(t, []string{"demo__echo", "demo__pid", "demo__read_note"}, bob.tools(t))
	assert.Equal(t, pid, bob.pid(t), "the same upstream process")
	assert.Equal(t, 0, alice.countChanged(300*time.Millisecond), "alice's view did not change")

	// policy.config alone changes: a swap; add (read-only) shows again.
	set(cfg, "policy.config", map[string]any{"hide": []string{}, "apiKey": secretInPolicyConfig})
	code, res, body = r.reloadWith(cfg)
	require.Equal(t, http.StatusOK, code, body)
	assert.True(t, res.PolicySwapped, body)
	assert.Contains(t, res.Summary, "0 started, 0 stopped", body)
	alice.waitChanged(t)
	assert.Equal(t, []string{"demo__add", "demo__echo", "demo__pid", "demo__read_note"}, alice.tools(t))
	assert.Equal(t, pid, alice.pid(t), "a swap keeps the upstream process")
	assert.JSONEq(t, `{"apiKey":"REDACTED","hide":[]}`, string(r.state().Policy.Config))

	// An overlay takes the plugin's key too, and refuses one it lacks.
	code, body = r.do("PATCH", "/v1/sessions/alice/servers/demo", adminToken, strings.NewReader(`{"readOnlyOnly": false}`), nil)
	require.Equal(t, http.StatusOK, code, body)
	alice.waitChanged(t)
	assert.Equal(t, []string{"demo__add", "demo__add_tool", "demo__echo", "demo__pid", "demo__read_note", "demo__write_note"}, alice.tools(t))
	code, body = r.do("PATCH", "/v1/sessions/alice/servers/demo", adminToken, strings.NewReader(`{"maxRows": 1}`), nil)
	assert.Equal(t, http.StatusBadRequest, code, body)
	assert.Contains(t, body, `policy plugin \"readonly-policy\" would have to declare it`)

	// With the file no longer using the key, alice's overlay still does:
	// a swap to a plugin without it is refused.
	delete(cfg["mcpServers"].(map[string]any)["demo"].(map[string]any), "readOnlyOnly")
	set(cfg, "sessions.alice.overrides", map[string]any{})
	set(cfg, "policy", map[string]any{})
	code, res, body = r.reloadWith(cfg)
	assert.Equal(t, http.StatusUnprocessableEntity, code, body)
	assert.False(t, res.Applied, body)
	assert.Contains(t, res.Error, `plugin "policy-default" does not declare the settings key "readOnlyOnly", which the runtime overlays of sessions alice use`, body)
	assert.Equal(t, "readonly-policy", r.state().Policy.Name, "the running plugin keeps serving")

	_, stateBody := r.do("GET", "/v1/state", adminToken, nil, nil)
	assert.NotContains(t, stateBody, secretInPolicyConfig)
	assert.NotContains(t, r.logs.String(), secretInPolicyConfig)
}

// A key that neither wasmhost nor the plugin declares is refused, as any
// unknown key, and the error names the plugin that would have to declare
// it; a swap to a plugin that does not declare a key in use is refused,
// naming the sessions that use it. What ran keeps serving.
func TestPluginSettingsKeyRefusals(t *testing.T) {
	t.Parallel()
	cfg := readonlyConfig(t)
	set(cfg, "sessions.alice.overrides", map[string]any{"demo": map[string]any{"readOnlyOnly": true}})
	r := start(t, cfg, adminReloadsOnly)
	alice := r.connect("alice", aliceToken)
	want := []string{"demo__echo", "demo__pid", "demo__read_note"}
	require.Equal(t, want, alice.tools(t))

	set(cfg, "sessions.bob.overrides", map[string]any{"demo": map[string]any{"readOnlyOnlyy": true}})
	code, res, body := r.reloadWith(cfg)
	assert.Equal(t, http.StatusUnprocessableEntity, code, body)
	assert.False(t, res.Applied, body)
	assert.Contains(t, res.Error, "config refused", body)
	assert.Contains(t, res.Error, `sessions.bob.overrides.demo.readOnlyOnlyy: unknown key; did you mean "readOnlyOnly"?`, body)
	set(cfg, "sessions.bob.overrides", map[string]any{"demo": map[string]any{"maxRows": 3}})
	_, res, body = r.reloadWith(cfg)
	assert.Contains(t, res.Error, `policy plugin "readonly-policy" would have to declare it in its handshake's settingsKeys`, body)
	set(cfg, "sessions.bob.overrides", map[string]any{})

	// The embedded default policy does not declare readOnlyOnly.
	set(cfg, "policy", map[string]any{})
	code, res, body = r.reloadWith(cfg)
	assert.Equal(t, http.StatusUnprocessableEntity, code, body)
	assert.False(t, res.Applied, body)
	assert.Contains(t, res.Error, "policy plugin refused", body)
	assert.Contains(t, res.Error, `plugin "policy-default" does not declare the settings key "readOnlyOnly"`, body)
	assert.True(t, strings.Contains(res.Error, "sessions alice, bob use"), "both use the server entry's key: %s", body)
	assert.Equal(t, "readonly-policy", r.state().Policy.Name, "the running plugin keeps serving")
	assert.Equal(t, want, alice.tools(t))
}
