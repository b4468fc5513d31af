package daemon_test

import (
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/daemon"
	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/internal/mcptest"
)

// TestRefusedReloadSaysWhere refuses reloads for a missing policy plugin,
// a pin that does not match and an invalid config: each refusal names the
// config file and the JSON path at fault, and the config's warnings (a
// mistyped key) are logged with it.
func TestRefusedReloadSaysWhere(t *testing.T) {
	t.Parallel()
	cfg := baseConfig()
	r := start(t, cfg)
	// The admin endpoint reloads at once (the watcher may start after
	// Ready) and logs like any reload.
	reload := func(cfg map[string]any) string {
		t.Helper()
		before := len(r.logs.String())
		writeConfig(t, r.path, cfg)
		code, body := r.do("POST", "/v1/reload", adminToken, nil, nil)
		require.Equal(t, http.StatusUnprocessableEntity, code, body)
		return r.logs.String()[before:] // this reload's lines
	}

	// A policy path that cannot be read.
	set(cfg, "policy", map[string]any{"path": "nope.wasm"})
	logs := reload(cfg)
	assert.Contains(t, logs, "policy plugin refused: "+r.path+": policy.path: plugin ")

	// A pin the embedded default plugin does not match.
	set(cfg, "policy", map[string]any{"sha256": strings.Repeat("0", 64)})
	logs = reload(cfg)
	assert.Contains(t, logs, "policy plugin refused: "+r.path+": policy.sha256: ")

	// An invalid config: every error is named, and its warnings are
	// logged too.
	set(cfg, "policy", map[string]any{})
	set(cfg, "sesions", map[string]any{})
	set(cfg, "listen", 5)
	cfg["mcpServers"].(map[string]any)["demo"].(map[string]any)["oauth"] = map[string]any{}
	logs = reload(cfg)
	assert.Contains(t, logs, r.path+": sesions: unknown key; did you mean \\\"sessions\\\"?")
	assert.Contains(t, logs, "config refused: "+r.path+": listen: expected a string")
	assert.Contains(t, logs, "config: "+r.path+": mcpServers.demo.oauth: not supported by wasmhost, ignored")
	assert.Equal(t, "policy-default", r.state().Policy.Name)
}

// TestStartupRefusalsSayWhere checks that a refused start-up names the
// config file and JSON path of a refused policy plugin, and logs the
// config's warnings even when the config is invalid.
func TestStartupRefusalsSayWhere(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "wasmhost.json")
	runWith := func(cfg any, listen string) (string, error) {
		t.Helper()
		writeConfig(t, path, cfg)
		logs := &mcptest.LogBuffer{}
		d, err := daemon.New(daemon.Options{ConfigPath: path, Listen: listen, Logger: slog.New(slog.NewTextHandler(logs, nil)), CacheDir: cacheDir()})
		require.NoError(t, err)
		err = d.Run(t.Context())
		return logs.String(), err
	}

	logs, err := runWith(`{"mcpServers": {"x": {"command": "c", "oauth": {}}}, "sessions": {"a": {"token": 5}}, "sesions": {}}`, "")
	require.ErrorIs(t, err, config.ErrInvalid)
	require.ErrorIs(t, err, daemon.ErrConfigInvalid)
	assert.Contains(t, err.Error(), path+`: sesions: unknown key; did you mean "sessions"?`)
	assert.Contains(t, logs, "config: "+path+": mcpServers.x.oauth: not supported by wasmhost, ignored")

	_, err = runWith(set(baseConfig(), "policy", map[string]any{"path": "nope.wasm"}), "")
	require.ErrorIs(t, err, daemon.ErrPolicyRefused)
	assert.Contains(t, err.Error(), path+": policy.path: plugin \"")

	_, err = runWith(set(baseConfig(), "policy", map[string]any{"sha256": strings.Repeat("0", 64)}), "")
	require.ErrorIs(t, err, daemon.ErrPolicyRefused)
	assert.Contains(t, err.Error(), path+": policy.sha256: ")

	// A memory limit below what the plugin declares.
	_, err = runWith(set(baseConfig(), "policy", map[string]any{"memoryMiB": 1}), "")
	require.ErrorIs(t, err, daemon.ErrPolicyRefused)
	assert.Contains(t, err.Error(), path+": policy.memoryMiB: ")

	for _, listen := range []string{"nonsense", "127.0.0.1:99999", "127.0.0.1:nope"} {
		_, err = runWith(baseConfig(), listen)
		require.ErrorIs(t, err, daemon.ErrBadListen, listen)
	}
}

// TestStartupCacheDirRefusalIsNotTheConfigs: a compilation cache directory
// that cannot be used (Options.CacheDir, wasmhost's --cache-dir, by default
// in the user's cache directory) stops the start, with the directory
// named; the error does not send the operator to the config's "policy"
// setting, which is not at fault.
func TestStartupCacheDirRefusalIsNotTheConfigs(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "wasmhost.json")
	writeConfig(t, path, baseConfig())
	d, err := daemon.New(daemon.Options{ConfigPath: path, Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler), CacheDir: "/dev/null/cache"})
	require.NoError(t, err)
	err = d.Run(t.Context())
	require.ErrorIs(t, err, daemon.ErrPolicyRefused)
	require.ErrorIs(t, err, host.ErrCacheDir)
	assert.Contains(t, err.Error(), `cannot use the compilation cache directory "/dev/null/cache"`)
	assert.NotContains(t, err.Error(), path+": policy", "the config is not at fault")
}

// TestStartupListenRefusalsSayWhere: a listen address from the config that
// is not loopback, or is taken, is located like a config error (file and
// "listen"); one given in Options.Listen is named as such.
func TestStartupListenRefusalsSayWhere(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	path := filepath.Join(t.TempDir(), "wasmhost.json")
	run := func(listen, override string) error {
		t.Helper()
		writeConfig(t, path, set(baseConfig(), "listen", listen))
		d, err := daemon.New(daemon.Options{ConfigPath: path, Listen: override, Logger: slog.New(slog.DiscardHandler), CacheDir: cacheDir()})
		require.NoError(t, err)
		return d.Run(t.Context())
	}

	err := run("10.1.2.3:8750", "")
	require.ErrorIs(t, err, daemon.ErrNotLoopback)
	assert.Contains(t, err.Error(), path+`: listen: "10.1.2.3:8750": refusing to listen on a non-loopback address`)

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	addr := taken.Addr().String()
	err = run(addr, "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), path+`: listen: "`+addr+`": `)
	assert.Contains(t, err.Error(), "address already in use")

	err = run("127.0.0.1:0", addr)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `listen "`+addr+`": `)
	assert.NotContains(t, err.Error(), path, "the config's listen is not the one refused")
}
