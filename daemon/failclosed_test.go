package daemon_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/daemon"
	"github.com/wasmhost/wasmhost/internal/mcptest"
)

// A running daemon whose config file gets a filter key misspelt
// ("includeTool") refuses the reload, naming the key and the one meant;
// the session keeps its three tools and hears of no list change. The
// misspelling used to be a warning, and the reload showed the session
// every tool.
func TestFailClosedTypoInFilterKeyRefusesReload(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	r := start(t, cfg, adminReloadsOnly)
	before, stillServed := r.watchAlice(t)
	require.Equal(t, []string{"demo__add", "demo__echo", "demo__pid"}, before)

	override := cfg["sessions"].(map[string]any)["alice"].(map[string]any)["overrides"].(map[string]any)["demo"].(map[string]any)
	override["includeTool"] = override["includeTools"]
	delete(override, "includeTools")
	code, res, body := r.reloadWith(cfg)
	require.Equal(t, http.StatusUnprocessableEntity, code, body)
	assert.False(t, res.Applied)
	assert.Contains(t, res.Error, r.path+`: sessions.alice.overrides.demo.includeTool: unknown key; did you mean "includeTools"?`)
	stillServed()

	alice := r.connect("alice", aliceToken)
	assert.Equal(t, before, alice.tools(t), "a new client of the session sees what the old config gives")
	res2, err := alice.call(t, "demo__write_note", map[string]any{"text": "x"})
	if err == nil {
		assert.True(t, res2.IsError, "a tool outside the filter cannot be called: %s", resultText(res2))
	}
}

// The same typo at start-up, and an "overides" misspelling, refuse the
// start with the JSON path and the key meant.
func TestFailClosedTypoRefusesStartup(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"includeTool": `sessions.alice.overrides.demo.includeTool: unknown key; did you mean "includeTools"?`,
		"overides":    `sessions.alice.overides: unknown key; did you mean "overrides"?`,
	} {
		cfg := baseConfig()
		alice := cfg["sessions"].(map[string]any)["alice"].(map[string]any)
		if key == "overides" {
			alice["overides"] = alice["overrides"]
			delete(alice, "overrides")
		} else {
			o := alice["overrides"].(map[string]any)["demo"].(map[string]any)
			o["includeTool"] = o["includeTools"]
			delete(o, "includeTools")
		}
		path := filepath.Join(t.TempDir(), "wasmhost.json")
		writeConfig(t, path, cfg)
		logs := &mcptest.LogBuffer{}
		d, err := daemon.New(daemon.Options{ConfigPath: path, Logger: slog.New(slog.NewTextHandler(logs, nil)), CacheDir: cacheDir()})
		require.NoError(t, err)
		err = d.Run(t.Context())
		require.ErrorIs(t, err, daemon.ErrConfigInvalid, logs.String())
		require.ErrorIs(t, err, config.ErrInvalid)
		assert.Contains(t, err.Error(), path+": "+want)
	}
}

// An overlay PUT is validated as a file entry is: an unknown key is
// refused (400) with the key meant, and nothing changes. An overlay for a
// server or session the config does not have is refused with 404 naming
// it, not added.
func TestFailClosedOverlayPut(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	r := start(t, cfg)
	before, stillServed := r.watchAlice(t)
	entry := cfg["mcpServers"].(map[string]any)["demo"].(map[string]any)

	typo := mustJSON(t, map[string]any{"command": entry["command"], "env": entry["env"], "includeTool": []string{"echo"}})
	code, body := r.do("PUT", "/v1/sessions/alice/servers/demo", adminToken, strings.NewReader(typo), nil)
	assert.Equal(t, http.StatusBadRequest, code, body)
	assert.Contains(t, body, `request body: includeTool: unknown key; did you mean \"includeTools\"?`)

	good := mustJSON(t, map[string]any{"command": entry["command"], "env": entry["env"], "includeTools": []string{"echo"}})
	code, body = r.do("PUT", "/v1/sessions/alice/servers/dmeo", adminToken, strings.NewReader(good), nil)
	assert.Equal(t, http.StatusNotFound, code, body)
	assert.Contains(t, body, `no server named \"dmeo\"`)
	code, body = r.do("PUT", "/v1/sessions/nobody/servers/demo", adminToken, strings.NewReader(good), nil)
	assert.Equal(t, http.StatusNotFound, code, body)
	assert.Contains(t, body, `no session named \"nobody\"`)
	code, body = r.do("PATCH", "/v1/sessions/alice/servers/dmeo", adminToken, strings.NewReader(`{"trust": false}`), nil)
	assert.Equal(t, http.StatusNotFound, code, body)
	assert.Contains(t, body, `no server named \"dmeo\"`)
	code, body = r.do("PATCH", "/v1/sessions/nobody/servers/demo", adminToken, strings.NewReader(`{"trust": false}`), nil)
	assert.Equal(t, http.StatusNotFound, code, body)
	assert.Contains(t, body, `no session named \"nobody\"`)

	assert.Equal(t, before, r.connect("alice", aliceToken).tools(t))
	for _, b := range r.state().Sessions {
		for _, s := range b.Servers {
			assert.NotEqual(t, "dmeo", s.Server, "no binding was added for the misspelt server")
		}
	}
	stillServed()
}

// An overlay PATCH is a JSON merge patch over the entry the session has
// now: the file's entry with the session's override, or its overlay. A
// partial body works; a typo in it is refused; a patch that widens the
// filter is config like any other and goes through the same checks; DELETE
// brings the file's entry back.
func TestOverlayPatch(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	r := start(t, cfg)
	alice := r.connect("alice", aliceToken)
	require.Equal(t, []string{"demo__add", "demo__echo", "demo__pid"}, alice.tools(t))
	patch := func(session, body string) (int, string) {
		t.Helper()
		return r.do("PATCH", "/v1/sessions/"+session+"/servers/demo", adminToken, strings.NewReader(body), nil)
	}

	// Over the file's entry with alice's override: only includeTools
	// changes, her trust stays.
	code, body := patch("alice", `{"includeTools": ["echo"]}`)
	require.Equal(t, http.StatusOK, code, body)
	alice.waitChanged(t)
	assert.Equal(t, []string{"demo__echo"}, alice.tools(t))
	trusted := func() any {
		tools, err := alice.cs.ListTools(t.Context(), nil)
		require.NoError(t, err)
		require.NotEmpty(t, tools.Tools)
		return tools.Tools[0].Meta["wasmhost/trust"]
	}
	assert.Equal(t, true, trusted(), "the override's trust is kept")

	// A typo is refused, nothing changes.
	code, body = patch("alice", `{"includeTool": ["echo", "add"]}`)
	assert.Equal(t, http.StatusBadRequest, code, body)
	assert.Contains(t, body, `request body: includeTool: unknown key; did you mean \"includeTools\"?`)
	code, body = patch("alice", `{"includeTools": ["echo"], "includeTools": []}`)
	assert.Equal(t, http.StatusBadRequest, code, body)
	assert.Contains(t, body, `duplicate key`)
	code, body = patch("alice", `{"includeTools": [`)
	assert.Equal(t, http.StatusBadRequest, code, body)
	assert.Contains(t, body, `request body:`)
	code, body = patch("alice", `{"includeTools": "echo"}`)
	assert.Equal(t, http.StatusBadRequest, code, body)
	assert.Contains(t, body, `request body: includeTools: expected an array of strings or null`)
	// Naming and instructions come from the file: an overlay that would
	// change them is refused, not accepted and ignored.
	code, body = patch("alice", `{"instructions": true}`)
	assert.Equal(t, http.StatusBadRequest, code, body)
	assert.Contains(t, body, `request body: \"instructions\" cannot be changed by an overlay`)
	code, body = patch("alice", `{"prefix": "x_"}`)
	assert.Equal(t, http.StatusBadRequest, code, body)
	assert.Contains(t, body, `request body: \"prefix\" cannot be changed by an overlay`)
	assert.Equal(t, []string{"demo__echo"}, alice.tools(t))

	// Over the overlay: removing the filter (null) widens, as config.
	code, body = patch("alice", `{"includeTools": null, "trust": false}`)
	require.Equal(t, http.StatusOK, code, body)
	alice.waitChanged(t)
	assert.Contains(t, alice.tools(t), "demo__write_note")
	assert.Equal(t, false, trusted())

	// DELETE: the file's entry and override are back.
	code, body = r.do("DELETE", "/v1/sessions/alice/servers/demo", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, code, body)
	alice.waitChanged(t)
	assert.Equal(t, []string{"demo__add", "demo__echo", "demo__pid"}, alice.tools(t))

	// bob's override (excludeTools) is the base of his patch.
	bob := r.connect("bob", bobToken)
	code, body = patch("bob", `{"includeTools": ["echo", "write_note"]}`)
	require.Equal(t, http.StatusOK, code, body)
	bob.waitChanged(t)
	assert.Equal(t, []string{"demo__echo"}, bob.tools(t), "bob's excludeTools still applies")
	var res struct{ Session, Server string }
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	assert.Equal(t, "bob", res.Session)
}
