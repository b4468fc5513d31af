package daemon_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/daemon"
)

// shScriptConfig is baseConfig with the demo server started by /bin/sh
// from a script in dir, so that its args are a path, as with
// "node server.js".
func shScriptConfig(t *testing.T, dir string) map[string]any {
	t.Helper()
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	self, err := os.Executable()
	require.NoError(t, err)
	script := filepath.Join(dir, "server.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\nexec '"+self+"'\n"), 0o755))
	cfg := baseConfig()
	set(cfg, "mcpServers.demo.command", "/bin/sh")
	set(cfg, "mcpServers.demo.args", []string{script})
	return cfg
}

// A reload that points a working server's args at a path that does not
// exist is applied with that server's transport change reported failed,
// by name and with the reason, in the admin answer, the summary line and
// /v1/state: both sessions keep every tool and call it on the same
// process, and their clients hear of no list change. A reload back to the
// running args clears it.
func TestOperatorReloadToMissingArgsKeepsWorkingConnection(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := shScriptConfig(t, t.TempDir())
	r := start(t, cfg, adminReloadsOnly)
	_, stillServed := r.watchAlice(t)
	bob := r.connect("bob", bobToken)
	bobTools, bobPID := bob.tools(t), bob.pid(t)
	running := r.state().Pool[0].Identity

	good := cfg["mcpServers"].(map[string]any)["demo"].(map[string]any)["args"]
	missing := filepath.Join(t.TempDir(), "no-such-dir", "server.js")
	code, res, body := r.reloadWith(set(cfg, "mcpServers.demo.args", []string{missing}))
	assert.Equal(t, http.StatusBadGateway, code, "applied, with the transport change failed: %s", body)
	assert.True(t, res.Applied, body)
	assert.Contains(t, res.Error, `session "alice", server "demo": transport change not made, the running connection keeps serving: `, body)
	assert.Contains(t, res.Error, `session "bob", server "demo": transport change not made`, body)
	assert.Contains(t, res.Summary, `server "demo": transport not changed, 2 sessions keep the running connection: `, body)
	if assert.Len(t, res.TransportChanges, 1, body) {
		tc := res.TransportChanges[0]
		assert.Equal(t, "demo", tc.Server)
		assert.Equal(t, 0, tc.Moved)
		assert.Equal(t, 2, tc.Kept)
		assert.NotEmpty(t, tc.Error)
	}

	stillServed()
	assert.Equal(t, bobTools, bob.tools(t), "bob keeps his tools")
	assert.Equal(t, bobPID, bob.pid(t), "on the same upstream process")
	// The file watch sees the write too and may reload the same config
	// once more after the admin reload, trying the change again: wait for
	// the state that outlasts such a retry.
	var st daemon.State
	require.Eventually(t, func() bool {
		st = r.state()
		if len(st.Pool) != 1 {
			return false
		}
		for _, s := range st.Sessions {
			if len(s.Servers) != 1 || s.Servers[0].SwitchError == "" {
				return false
			}
		}
		return true
	}, eventWithin, 20*time.Millisecond, "the failed change settles: %+v", st)
	if assert.Len(t, st.Pool, 1, "the working upstream is still there, and only it") {
		assert.Equal(t, "ready", st.Pool[0].State)
		assert.Equal(t, running, st.Pool[0].Identity)
	}
	for _, s := range st.Sessions {
		require.Len(t, s.Servers, 1, s.Name)
		b := s.Servers[0]
		assert.Equal(t, running, b.Identity, "%s: the running transport", s.Name)
		assert.NotEqual(t, running, b.Desired, "%s: the desired one", s.Name)
		assert.Contains(t, b.SwitchError, "transport change not made", s.Name)
		assert.Empty(t, b.Error, s.Name)
	}
	assert.Contains(t, st.LastReload.Summary, `server "demo": transport not changed`)

	code, res, body = r.reloadWith(set(cfg, "mcpServers.demo.args", good))
	assert.Equal(t, http.StatusOK, code, body)
	assert.True(t, res.OK, body)
	assert.Empty(t, res.TransportChanges, body)
	for _, s := range r.state().Sessions {
		assert.Empty(t, s.Servers[0].SwitchError, s.Name)
		assert.Equal(t, running, s.Servers[0].Identity, s.Name)
	}
	stillServed()
}

// A reload that points a working server at another good script switches
// it over: the new process serves both sessions, the old one is gone,
// and no client hears of a list change (they see the same tools).
func TestOperatorReloadSwitchesTransport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := shScriptConfig(t, dir)
	r := start(t, cfg, adminReloadsOnly)
	alice := r.connect("alice", aliceToken)
	before, oldPID := alice.tools(t), alice.pid(t)
	alice.countChanged(100 * time.Millisecond)

	script := cfg["mcpServers"].(map[string]any)["demo"].(map[string]any)["args"].([]string)[0]
	other := filepath.Join(dir, "other.sh")
	data, err := os.ReadFile(script)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(other, data, 0o755))
	code, res, body := r.reloadWith(set(cfg, "mcpServers.demo.args", []string{other}))
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, []string{"demo"}, serversOf(res.TransportChanges), body)
	assert.Contains(t, res.Summary, `server "demo": transport changed for 2 sessions`)

	assert.Equal(t, before, alice.tools(t))
	newPID := alice.pid(t)
	assert.NotEqual(t, oldPID, newPID, "the new process serves")
	assert.Equal(t, 0, alice.countChanged(100*time.Millisecond), "no list change: the same tools")
	st := r.state()
	require.Len(t, st.Pool, 1, "the old connection is closed")
	assert.Equal(t, newPID, st.Pool[0].PID)
}

func serversOf(cs []daemon.TransportChangeResult) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Server)
	}
	return out
}
