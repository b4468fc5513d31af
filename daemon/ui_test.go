package daemon_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/daemon"
	"github.com/wasmhost/wasmhost/reconcile"
)

// TestUIShellCarriesNoData: the page's HTML, script and style are served
// without a token, with a strict CSP, and carry nothing of the daemon's
// state; the data endpoints it reads need the admin token.
func TestUIShellCarriesNoData(t *testing.T) {
	t.Parallel()
	r := start(t, baseConfig())
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/app.css"} {
		resp, err := r.http.Get(r.d.URL() + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "require-trusted-types-for 'script'"} {
			assert.Contains(t, csp, want, path)
		}
		assert.NotContains(t, csp, "unsafe", path)
		assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), path)
		for _, secret := range []string{"alice", "bob", adminToken, "demo"} {
			assert.NotContains(t, string(body), secret, "%s carries no data", path)
		}
	}
	resp, err := r.http.Get(r.d.URL() + "/ui/nothing-here")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)

	code, _ := r.do("GET", "/v1/sessions/alice/servers/demo/tools", "", nil, nil)
	assert.Equal(t, http.StatusUnauthorized, code)
	code, _ = r.do("GET", "/v1/sessions/alice/servers/demo/tools", aliceToken, nil, nil)
	assert.Equal(t, http.StatusUnauthorized, code, "a session's token is not the admin's")
}

// TestUIDataEndpoints: the binding tools endpoint lists what a session
// sees of a server with its flags; /v1/state counts the trusted tools of
// each binding, lists each session's clients, each entry's restarts, and
// the latest reloads, newest first and at most 20.
func TestUIDataEndpoints(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	r := start(t, baseConfig())
	r.connect("alice", aliceToken)

	var got struct {
		Tools []reconcile.ToolState `json:"tools"`
	}
	code, body := r.do("GET", "/v1/sessions/alice/servers/demo/tools", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	assert.ElementsMatch(t, []reconcile.ToolState{{Name: "echo", Trust: true}, {Name: "add", Trust: true}, {Name: "pid", Trust: true}}, got.Tools)
	code, body = r.do("GET", "/v1/sessions/bob/servers/demo/tools", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	var names []string
	for _, tool := range got.Tools {
		assert.False(t, tool.Trust, tool.Name)
		names = append(names, tool.Name)
	}
	assert.ElementsMatch(t, []string{"echo", "add", "read_note", "pid"}, names)

	code, body = r.do("GET", "/v1/sessions/carol/servers/demo/tools", adminToken, nil, nil)
	assert.Equal(t, http.StatusNotFound, code)
	assert.Contains(t, body, `no session \"carol\"`)
	code, body = r.do("GET", "/v1/sessions/alice/servers/nope/tools", adminToken, nil, nil)
	assert.Equal(t, http.StatusNotFound, code)
	assert.Contains(t, body, `has no server \"nope\"`)

	st := r.state()
	trusted := map[string]int{}
	for _, s := range st.Sessions {
		for _, b := range s.Servers {
			trusted[s.Name] += b.Trusted
		}
		if s.Name == "alice" {
			require.Len(t, s.ClientList, 1)
			assert.Equal(t, "e2e-alice", s.ClientList[0].Name)
		} else {
			assert.Empty(t, s.ClientList)
		}
	}
	assert.Equal(t, map[string]int{"alice": 3, "bob": 0}, trusted)
	assert.Empty(t, st.Reloads)
	require.Len(t, st.Pool, 1)
	assert.Zero(t, st.Pool[0].Restarts)

	code, body = r.send("POST", "/v1/servers/demo/restart", "")
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, 1, r.state().Pool[0].Restarts)

	for range 22 {
		code, body := r.send("POST", "/v1/reload", "")
		require.Equal(t, http.StatusOK, code, body)
	}
	st = r.state()
	require.Len(t, st.Reloads, 20, "at most 20 reloads are kept")
	assert.Equal(t, st.LastReload, st.Reloads[0], "newest first")
	for i, res := range st.Reloads {
		assert.Equal(t, "admin", res.Trigger)
		if i > 0 {
			assert.False(t, res.At.After(st.Reloads[i-1].At), "newest first")
		}
	}
	// A reload that changes a filter is listed with its summary.
	writeConfig(t, r.path, set(baseConfig(), "sessions.bob.overrides.demo.excludeTools", []string{"write_note", "add_tool", "add"}))
	changed := -1
	waitFor(t, eventWithin, func() bool {
		st = r.state()
		changed = slices.IndexFunc(st.Reloads, func(res *daemon.ReloadResult) bool { return slices.Equal(res.Changed, []string{"bob"}) })
		return changed >= 0
	}, r.logs.String, "the watch's reload listed")
	require.Len(t, st.Reloads, 20)
	assert.Contains(t, st.Reloads[changed].Summary, "1 session changed (bob)")
	for _, res := range st.Reloads[:changed+1] {
		assert.NotEqual(t, "admin", res.Trigger, "newer than every admin reload")
	}
}
