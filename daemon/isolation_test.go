package daemon_test

// Isolation probes over the wire: tokens, streamable HTTP session ids,
// requests before initialize, batches, large bodies and reloads. Probes
// TestTokensAndRebindingChecks already makes (alice's token on bob's URL, no
// token, an unknown session, the admin token on a session, session tokens
// on GET /v1/state, POST /v1/reload and GET /metrics) are not repeated.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/demoserver"
)

// carolToken has aliceToken as a prefix.
const carolToken = aliceToken + "-carol"

// isolationConfig is baseConfig plus carol, who sees every demo tool.
func isolationConfig() map[string]any {
	cfg := baseConfig()
	cfg["sessions"].(map[string]any)["carol"] = map[string]any{"token": carolToken}
	return cfg
}

// rawPost posts body to path with the given Authorization header value
// ("" for none), Mcp-Session-Id and Mcp-Protocol-Version ("" for none).
func (r *running) rawPost(path, auth, sessionID, version string, body io.Reader) (*http.Response, string) {
	r.t.Helper()
	return r.raw(http.MethodPost, path, auth, sessionID, version, body)
}

func (r *running) raw(method, path, auth, sessionID, version string, body io.Reader) (*http.Response, string) {
	r.t.Helper()
	req, err := http.NewRequest(method, r.d.URL()+path, body)
	require.NoError(r.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if sessionID != "" {
		req.Header.Set("Mcp-Session-Id", sessionID)
	}
	if version != "" {
		req.Header.Set("Mcp-Protocol-Version", version)
	}
	resp, err := r.http.Do(req)
	require.NoError(r.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func initBody(version string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, version)
}

// rawSession initializes a client of session over raw HTTP with protocol
// version and returns its Mcp-Session-Id.
func (r *running) rawSession(session, token, version string) string {
	r.t.Helper()
	resp, body := r.rawPost("/mcp/"+session, "Bearer "+token, "", "", strings.NewReader(initBody(version)))
	require.Equal(r.t, http.StatusOK, resp.StatusCode, body)
	id := resp.Header.Get("Mcp-Session-Id")
	require.NotEmpty(r.t, id)
	resp, body = r.rawPost("/mcp/"+session, "Bearer "+token, id, version, strings.NewReader(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	require.Equal(r.t, http.StatusAccepted, resp.StatusCode, body)
	return id
}

// An rpcMessage is one JSON-RPC response read off an HTTP answer.
type rpcMessage struct {
	ID     any             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *jsonrpc.Error  `json:"error"`
}

// rpcMessages decodes the JSON-RPC messages of an answer: a JSON body, or
// the data lines of a server-sent event stream, each an object or a batch.
func rpcMessages(t *testing.T, body string) []rpcMessage {
	t.Helper()
	var datas []string
	if b := strings.TrimSpace(body); strings.HasPrefix(b, "{") || strings.HasPrefix(b, "[") {
		datas = append(datas, b)
	}
	for line := range strings.SplitSeq(body, "\n") {
		if d, ok := strings.CutPrefix(line, "data:"); ok {
			datas = append(datas, strings.TrimSpace(d))
		}
	}
	var out []rpcMessage
	for _, d := range datas {
		if strings.HasPrefix(d, "[") {
			var batch []rpcMessage
			require.NoError(t, json.Unmarshal([]byte(d), &batch), d)
			out = append(out, batch...)
			continue
		}
		var m rpcMessage
		require.NoError(t, json.Unmarshal([]byte(d), &m), d)
		out = append(out, m)
	}
	return out
}

// byID returns the message with JSON-RPC id id.
func byID(t *testing.T, msgs []rpcMessage, id float64) rpcMessage {
	t.Helper()
	for _, m := range msgs {
		if m.ID == id {
			return m
		}
	}
	t.Fatalf("no answer with id %v in %+v", id, msgs)
	return rpcMessage{}
}

// noteExists reports whether c (which sees read_note) can read note name.
func noteExists(t *testing.T, c *client, name string) bool {
	t.Helper()
	res, err := c.call(t, "demo__read_note", map[string]any{"name": name})
	require.NoError(t, err)
	return !res.IsError
}

// TestIsolationAuthorizationHeaders: only "Bearer <the session's own
// token>" opens a session (the scheme is case-insensitive, RFC 9110
// 11.1); a token that is a prefix or an extension of another, another
// session's, a case variant, another scheme, or a malformed header get the
// one 401 an unknown session gets. Admin endpoints that change things
// refuse session tokens, and change nothing.
func TestIsolationAuthorizationHeaders(t *testing.T) {
	t.Parallel()
	r := start(t, isolationConfig())
	alice := r.connect("alice", aliceToken)
	pid := alice.pid(t)
	init := initBody("2025-06-18")

	unknownResp, unknownBody := r.rawPost("/mcp/nobody", "Bearer "+aliceToken, "", "", strings.NewReader(init))
	require.Equal(t, http.StatusUnauthorized, unknownResp.StatusCode)
	assert.Equal(t, `Bearer realm="wasmhost"`, unknownResp.Header.Get("WWW-Authenticate"))

	for _, auth := range []string{"Bearer " + aliceToken, "bearer " + aliceToken, "BEARER " + aliceToken, "Bearer   " + aliceToken} {
		resp, body := r.rawPost("/mcp/alice", auth, "", "", strings.NewReader(init))
		assert.Equal(t, http.StatusOK, resp.StatusCode, "%q: %s", auth, body)
	}
	refused := map[string][]string{
		"alice": {
			"", "Bearer", "Bearer ", aliceToken, "Basic " + aliceToken, "Token " + aliceToken, "Bearer\t" + aliceToken,
			"Bearer " + aliceToken[:len(aliceToken)-1], "Bearer " + aliceToken + "x", "Bearer " + strings.ToUpper(aliceToken),
			"Bearer " + carolToken, "Bearer " + bobToken, "Bearer " + adminToken, "Bearer " + aliceToken + " " + aliceToken,
		},
		"carol": {"Bearer " + aliceToken, "Bearer " + carolToken[:len(carolToken)-1], "Bearer " + carolToken[len(carolToken)-6:]},
		"ALICE": {"Bearer " + aliceToken},
	}
	for session, auths := range refused {
		for _, auth := range auths {
			resp, body := r.rawPost("/mcp/"+session, auth, "", "", strings.NewReader(init))
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s %q", session, auth)
			assert.Equal(t, unknownBody, body, "%s %q: the same answer as an unknown session", session, auth)
			assert.Equal(t, unknownResp.Header.Get("WWW-Authenticate"), resp.Header.Get("WWW-Authenticate"), "%s %q", session, auth)
		}
	}

	// The admin endpoints that change things refuse every session token.
	self, err := os.Executable()
	require.NoError(t, err)
	entry := mustJSON(t, map[string]any{"command": self, "env": map[string]any{demoserver.ChildEnv: "1"}})
	for _, tok := range []string{aliceToken, bobToken, carolToken} {
		for _, req := range []struct{ method, path, body string }{
			{"PUT", "/v1/sessions/alice/servers/demo", entry},
			{"DELETE", "/v1/sessions/alice/servers/demo", ""},
			{"POST", "/v1/servers/demo/restart", ""},
		} {
			resp, _ := r.raw(req.method, req.path, "Bearer "+tok, "", "", strings.NewReader(req.body))
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s %s", req.method, req.path)
			assert.Equal(t, `Bearer realm="wasmhost-admin"`, resp.Header.Get("WWW-Authenticate"))
		}
	}
	assert.Equal(t, []string{"demo__add", "demo__echo", "demo__pid"}, alice.tools(t), "no overlay was put")
	assert.Equal(t, pid, alice.pid(t), "no restart was made")
}

// TestIsolationStreamableHTTP: an Mcp-Session-Id belongs to its session's
// endpoint: another session's id is not found, whatever the token, and
// cannot be closed from there; a call before initialize, or hidden in a
// batch (protocol 2025-03-26 still allows batches), is refused like any
// other and never reaches the upstream; a body over the go-sdk's 4 MiB is
// refused with 413, and one without a token with 401.
func TestIsolationStreamableHTTP(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	r := start(t, isolationConfig())
	carol := r.connect("carol", carolToken)
	const v = "2025-06-18"
	aliceID := r.rawSession("alice", aliceToken, v)
	bobID := r.rawSession("bob", bobToken, v)
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`

	// bob's id on alice's endpoint, with alice's token: not found.
	resp, body := r.rawPost("/mcp/alice", "Bearer "+aliceToken, bobID, v, strings.NewReader(list))
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, body)
	assert.Equal(t, "session not found\n", body)
	resp, body = r.raw("GET", "/mcp/alice", "Bearer "+aliceToken, bobID, v, nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, body)
	resp, body = r.raw("DELETE", "/mcp/alice", "Bearer "+aliceToken, bobID, v, nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, body)
	// bob's id on bob's endpoint with alice's token, and alice's own id
	// with bob's token: 401.
	resp, _ = r.rawPost("/mcp/bob", "Bearer "+aliceToken, bobID, v, strings.NewReader(list))
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = r.raw("DELETE", "/mcp/bob", "Bearer "+aliceToken, bobID, v, nil)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = r.rawPost("/mcp/alice", "Bearer "+bobToken, aliceID, v, strings.NewReader(list))
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	// bob's connection is intact and sees bob's tools; alice's sees hers.
	for _, c := range []struct{ session, token, id, want string }{
		{"bob", bobToken, bobID, "demo__read_note"},
		{"alice", aliceToken, aliceID, "demo__pid"},
	} {
		resp, body = r.rawPost("/mcp/"+c.session, "Bearer "+c.token, c.id, v, strings.NewReader(list))
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		m := byID(t, rpcMessages(t, body), 1)
		require.Nil(t, m.Error)
		assert.Contains(t, string(m.Result), `"`+c.want+`"`, c.session)
	}
	resp, body = r.rawPost("/mcp/bob", "Bearer "+bobToken, bobID, v, strings.NewReader(list))
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.NotContains(t, body, "demo__write_note")

	// A call before initialize (no session id): refused, not run.
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"demo__write_note","arguments":{"name":"preinit","text":"x"}}}`
	resp, body = r.rawPost("/mcp/carol", "Bearer "+carolToken, "", "", strings.NewReader(call))
	m := byID(t, rpcMessages(t, body), 1)
	require.NotNil(t, m.Error, "status %d: %s", resp.StatusCode, body)
	assert.Contains(t, m.Error.Message, `method "tools/call" is invalid during session initialization`)
	assert.Nil(t, m.Result)
	// Nor with the per-request protocol's _meta, which skips the go-sdk's
	// initialization gate where it is served (stateless HTTP, stdio).
	newCall := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"demo__write_note","arguments":{"name":"preinit","text":"x"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	resp, body = r.rawPost("/mcp/carol", "Bearer "+carolToken, "", "2026-07-28", strings.NewReader(newCall))
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
	m = byID(t, rpcMessages(t, body), 1)
	require.NotNil(t, m.Error, body)
	assert.Equal(t, int64(mcp.CodeUnsupportedProtocolVersion), m.Error.Code, body)
	assert.False(t, noteExists(t, carol, "preinit"), "a call before initialize ran")

	// A batch mixing a visible and hidden calls (2025-03-26 allows batches;
	// from 2025-06-18 they are refused as a whole).
	old := r.rawSession("alice", aliceToken, "2025-03-26")
	batch := `[
		{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":"ok"}}},
		{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"demo__write_note","arguments":{"name":"batch","text":"x"}}},
		{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"demo__summarize","arguments":{"name":"welcome"}}},
		{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"write_note","arguments":{"name":"batch","text":"x"}}}
	]`
	resp, body = r.rawPost("/mcp/alice", "Bearer "+aliceToken, old, "2025-03-26", strings.NewReader(batch))
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	msgs := rpcMessages(t, body)
	require.Len(t, msgs, 4, body)
	ok := byID(t, msgs, 1)
	require.Nil(t, ok.Error)
	assert.Contains(t, string(ok.Result), `"text":"ok"`)
	for id, want := range map[float64]string{2: `unknown tool "demo__write_note"`, 3: `unknown prompt "demo__summarize"`, 4: `unknown tool "write_note"`} {
		m := byID(t, msgs, id)
		require.NotNil(t, m.Error, "id %v", id)
		assert.Equal(t, jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: want}, jsonrpc.Error{Code: m.Error.Code, Message: m.Error.Message}, "id %v", id)
	}
	assert.False(t, noteExists(t, carol, "batch"), "a hidden call in a batch ran")
	resp, body = r.rawPost("/mcp/alice", "Bearer "+aliceToken, aliceID, v, strings.NewReader(batch))
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
	assert.False(t, noteExists(t, carol, "batch"))

	// Very large bodies.
	huge := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"demo__echo","arguments":{"text":"` + strings.Repeat("x", 5<<20) + `"}}}`
	resp, body = r.rawPost("/mcp/alice", "Bearer "+aliceToken, aliceID, v, bytes.NewReader([]byte(huge)))
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%.200s", body)
	resp, _ = r.rawPost("/mcp/alice", "", aliceID, v, bytes.NewReader([]byte(huge)))
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	// The session still answers.
	resp, body = r.rawPost("/mcp/alice", "Bearer "+aliceToken, aliceID, v, strings.NewReader(list))
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
}

// TestIsolationReloadHidesAtOnce: once POST /v1/reload or an overlay PUT
// has answered, a call of the tool it hid is refused as unknown, by the
// client already connected, with no wait for list_changed.
func TestIsolationReloadHidesAtOnce(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	r := start(t, cfg)
	alice := r.connect("alice", aliceToken)
	bob := r.connect("bob", bobToken)
	_, err := alice.call(t, "demo__echo", map[string]any{"text": "before"})
	require.NoError(t, err)

	writeConfig(t, r.path, set(cfg, "sessions.alice.overrides.demo.includeTools", []string{"add", "pid"}))
	code, body := r.do("POST", "/v1/reload", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, code, body)
	_, err = alice.call(t, "demo__echo", map[string]any{"text": "after"})
	requireUnknownTool(t, err, "demo__echo")
	assert.True(t, noteExists(t, bob, "welcome"))

	self, err := os.Executable()
	require.NoError(t, err)
	entry := mustJSON(t, map[string]any{"command": self, "env": map[string]any{demoserver.ChildEnv: "1"}, "excludeTools": []string{"read_note"}})
	code, body = r.do("PUT", "/v1/sessions/bob/servers/demo", adminToken, strings.NewReader(entry), nil)
	require.Equal(t, http.StatusOK, code, body)
	_, err = bob.call(t, "demo__read_note", map[string]any{"name": "welcome"})
	requireUnknownTool(t, err, "demo__read_note")
	res, err := alice.call(t, "demo__add", map[string]any{"a": 1, "b": 2})
	require.NoError(t, err)
	assert.False(t, res.IsError, resultText(res))
}

func requireUnknownTool(t *testing.T, err error, name string) {
	t.Helper()
	var werr *jsonrpc.Error
	require.ErrorAs(t, err, &werr, name)
	assert.Equal(t, jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", name)}, *werr)
}
