package config

import (
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeEnv returns a lookupEnv function backed by m.
func fakeEnv(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

var fullEnv = map[string]string{
	"WASMHOST_ADMIN_TOKEN": "admin-env-token-0123456789",
	"CAROL_TOKEN":          "carol-env-token-0123456789\n",
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

func boolPtr(b bool) *bool { return &b }

// wantFull is testdata/good/full.json as the loader must see it.
func wantFull() *Config {
	dir := filepath.Join("testdata", "good")
	github := &Server{
		Name:    "github",
		Command: "npx",
		Args:    []string{"-y", "@modelcontextprotocol/server-github"},
		Env:     map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": "$GITHUB_TOKEN"},
		Timeout: 30 * time.Second,
		Pooled:  true,
		Settings: Settings{
			Trust:        raw(`false`),
			IncludeTools: raw(`["create_issue","search_repositories(query, page)"]`),
			ExcludeTools: raw(`["delete_repository"]`),
		},
	}
	python := &Server{
		Name:        "pythonTools",
		Command:     "python",
		Args:        []string{"-m", "my_mcp_server", "--port", "8080"},
		Cwd:         filepath.Join(dir, "mcp-servers", "python"),
		Env:         map[string]string{"DATABASE_URL": "postgres://localhost/app", "LOG_LEVEL": "info"},
		Timeout:     15 * time.Second,
		Pooled:      true,
		Description: "In-house Python tools",
	}
	node := &Server{
		Name:     "nodeServer",
		Command:  "node",
		Args:     []string{"dist/server.js", "--verbose"},
		Cwd:      "/opt/mcp/node",
		Pooled:   true,
		Settings: Settings{Trust: raw(`true`), AlwaysLoadTools: raw(`true`)},
	}
	httpAuth := &Server{
		Name:    "httpServerWithAuth",
		HTTPURL: "http://localhost:3000/mcp",
		Headers: map[string]string{"Authorization": "Bearer static-upstream-key", "X-Custom-Header": "custom-value"},
		Timeout: 5 * time.Second,
		Pooled:  true,
	}
	sse := &Server{Name: "sseServer", URL: "https://api.example.com/sse", Pooled: false}
	cloudRun := &Server{
		Name:     "cloudRun",
		HTTPURL:  "https://my-service-xyz.a.run.app/mcp",
		Pooled:   true,
		Disabled: true,
		Settings: Settings{IncludeTools: raw(`null`)},
	}
	return &Config{
		File:   filepath.Join(dir, "full.json"),
		Listen: "127.0.0.1:9100",
		Admin:  &Admin{Token: "admin-env-token-0123456789", TokenSource: "tokenEnv WASMHOST_ADMIN_TOKEN"},
		Policy: Policy{
			Path:      filepath.Join(dir, "plugins", "policy.wasm"),
			SHA256:    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
			MemoryMiB: 64,
			Timeout:   500 * time.Millisecond,
		},
		Servers: map[string]*Server{
			"github": github, "pythonTools": python, "nodeServer": node,
			"httpServerWithAuth": httpAuth, "sseServer": sse, "cloudRun": cloudRun,
		},
		Sessions: map[string]*Session{
			"alice": {
				Name:        "alice",
				Description: "Alice's laptop",
				Token:       "alice-file-token-abcdefghijkl",
				TokenSource: "tokenFile " + filepath.Join(dir, "alice.token"),
				Names:       NamesAuto,
			},
			"bob.ci": {
				Name:        "bob.ci",
				Token:       "bob-inline-token-0123456789",
				TokenSource: "token",
				Names:       NamesAuto,
				Servers:     []string{"github", "nodeServer", "cloudRun"},
				Overrides: map[string]Override{
					"github": {Settings: Settings{
						Trust:        raw(`true`),
						IncludeTools: raw(`null`),
						ExcludeTools: raw(`["create_issue","push_files"]`),
					}},
					"nodeServer": {Settings: Settings{AlwaysLoadTools: raw(`false`)}, Disabled: boolPtr(true)},
					"cloudRun":   {Settings: Settings{IncludeTools: raw(`["list_services"]`)}, Disabled: boolPtr(false)},
				},
			},
			"carol_2": {
				Name:        "carol_2",
				Token:       "carol-env-token-0123456789",
				TokenSource: "tokenEnv CAROL_TOKEN",
				Names:       NamesAuto,
				Servers:     []string{},
			},
		},
	}
}

var wantFullWarnings = []string{
	`mcpServers.github.env.GITHUB_PERSONAL_ACCESS_TOKEN: looks like an environment variable reference; wasmhost passes values as written and does not expand variables`,
	`mcpServers.sseServer.oauth: not supported by wasmhost, ignored`,
	`mcpServers.cloudRun.authProviderType: not supported by wasmhost, ignored`,
	`mcpServers.cloudRun.targetAudience: not supported by wasmhost, ignored`,
	`mcpServers.cloudRun.targetServiceAccount: not supported by wasmhost, ignored`,
	`sessions["bob.ci"].servers[1]: server "nodeServer" is disabled`,
}

func warningLines(file string, ws []Warning) []string {
	var out []string
	for _, w := range ws {
		if w.File != file {
			out = append(out, "wrong file: "+w.String())
			continue
		}
		out = append(out, w.Path+": "+w.Message)
	}
	return out
}

var cmpConfig = cmp.Options{cmpopts.IgnoreUnexported(Session{}), cmpopts.EquateEmpty()}

func parseFull(t *testing.T) (*Config, []Warning) {
	t.Helper()
	path := filepath.Join("testdata", "good", "full.json")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	cfg, ws, err := Parse(path, data, fakeEnv(fullEnv), os.ReadFile)
	require.NoError(t, err)
	require.NotNil(t, cfg)
	return cfg, ws
}

func TestParseFull(t *testing.T) {
	cfg, ws := parseFull(t)
	if diff := cmp.Diff(wantFull(), cfg, cmpConfig); diff != "" {
		t.Errorf("config mismatch (-want +got):\n%s", diff)
	}
	// EquateEmpty hides nil versus empty; the difference matters for a
	// session's server list (nil = all servers, [] = none).
	assert.Nil(t, cfg.Sessions["alice"].Servers)
	assert.NotNil(t, cfg.Sessions["carol_2"].Servers)
	if diff := cmp.Diff(wantFullWarnings, warningLines(cfg.File, ws)); diff != "" {
		t.Errorf("warnings mismatch (-want +got):\n%s", diff)
	}
	assert.Equal(t, []string{"cloudRun", "github", "httpServerWithAuth", "nodeServer", "pythonTools", "sseServer"}, cfg.ServerNames())
	assert.Equal(t, []string{"alice", "bob.ci", "carol_2"}, cfg.SessionNames())
}

func TestLoadMatchesParse(t *testing.T) {
	for k, v := range fullEnv {
		t.Setenv(k, v)
	}
	want, wantWarnings := parseFull(t)
	got, gotWarnings, err := Load(filepath.Join("testdata", "good", "full.json"))
	require.NoError(t, err)
	if diff := cmp.Diff(want, got, cmpConfig); diff != "" {
		t.Errorf("Load differs from Parse (-Parse +Load):\n%s", diff)
	}
	assert.Equal(t, wantWarnings, gotWarnings)
}

func TestLoadMissingFile(t *testing.T) {
	_, _, err := Load(filepath.Join(t.TempDir(), "nope.json"))
	require.Error(t, err)
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.NotErrorIs(t, err, ErrInvalid)
}

func TestEffective(t *testing.T) {
	cfg, _ := parseFull(t)
	tests := []struct {
		session, server string
		wantSettings    string
		wantEnabled     bool
		wantDisabled    bool
	}{
		{"alice", "github", `{"trust":false,"includeTools":["create_issue","search_repositories(query, page)"],"excludeTools":["delete_repository"]}`, true, false},
		{"alice", "pythonTools", `{}`, true, false},
		{"alice", "nodeServer", `{"trust":true,"alwaysLoadTools":true}`, true, false},
		{"alice", "cloudRun", `{"includeTools":null}`, false, true},
		// A key present in the override replaces the base key, even with null.
		{"bob.ci", "github", `{"trust":true,"includeTools":null,"excludeTools":["create_issue","push_files"]}`, true, false},
		// Keys the override leaves out keep the base value.
		{"bob.ci", "nodeServer", `{"trust":true,"alwaysLoadTools":false}`, false, true},
		// An override can enable a server that is disabled at the base.
		{"bob.ci", "cloudRun", `{"includeTools":["list_services"]}`, true, false},
		// Not in the session's server list.
		{"bob.ci", "pythonTools", `{}`, false, false},
		{"carol_2", "github", `{"trust":false,"includeTools":["create_issue","search_repositories(query, page)"],"excludeTools":["delete_repository"]}`, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.session+"/"+tt.server, func(t *testing.T) {
			srv, settings, enabled := cfg.Sessions[tt.session].Effective(tt.server)
			require.NotNil(t, srv)
			assert.JSONEq(t, tt.wantSettings, string(settings))
			assert.Equal(t, tt.wantSettings, string(settings), "key order and bytes")
			assert.Equal(t, string(settings), string(srv.Metadata()))
			assert.Equal(t, tt.wantEnabled, enabled)
			assert.Equal(t, tt.wantDisabled, srv.Disabled)
			// Transport fields come from the base entry untouched.
			base := cfg.Servers[tt.server]
			assert.Equal(t, base.Command, srv.Command)
			assert.Equal(t, base.Args, srv.Args)
			assert.Equal(t, base.HTTPURL, srv.HTTPURL)
			// EffectiveSettings agrees, without the server copy.
			only, onlyEnabled := cfg.Sessions[tt.session].EffectiveSettings(tt.server)
			assert.Equal(t, string(settings), string(only))
			assert.Equal(t, enabled, onlyEnabled)
			// So does AppendEffectiveSettings, after what b held.
			appended, appendEnabled := cfg.Sessions[tt.session].AppendEffectiveSettings([]byte("held"), tt.server)
			assert.Equal(t, "held"+string(settings), string(appended))
			assert.Equal(t, enabled, appendEnabled)
			// So do Uses and the override's Layer, for callers keeping
			// their own copies.
			set, disabled := base.Settings, base.Disabled
			if o, ok := cfg.Sessions[tt.session].Overrides[tt.server]; ok {
				set, disabled = o.Layer(set, disabled)
			}
			assert.Equal(t, string(settings), string(set.JSON()))
			assert.Equal(t, tt.wantDisabled, disabled)
			assert.Equal(t, enabled, cfg.Sessions[tt.session].Uses(tt.server) && !disabled)
		})
	}
	_, ok := cfg.Sessions["alice"].EffectiveSettings("nope")
	assert.False(t, ok)
	appended, ok := cfg.Sessions["alice"].AppendEffectiveSettings([]byte("held"), "nope")
	assert.False(t, ok)
	assert.Equal(t, "held", string(appended))
	assert.False(t, cfg.Sessions["alice"].Uses("nope"))
	assert.True(t, cfg.Sessions["bob.ci"].Uses("nodeServer"), "listed, though disabled")
	assert.False(t, (&Session{}).Uses("github"), "a session not made by Parse knows no servers")

	srv, settings, enabled := cfg.Sessions["alice"].Effective("nope")
	assert.Nil(t, srv)
	assert.Nil(t, settings)
	assert.False(t, enabled)

	assert.Equal(t, []string{"github", "httpServerWithAuth", "nodeServer", "pythonTools", "sseServer"}, cfg.Sessions["alice"].Enabled())
	assert.Equal(t, []string{"cloudRun", "github"}, cfg.Sessions["bob.ci"].Enabled())
	assert.Empty(t, cfg.Sessions["carol_2"].Enabled())
}

func TestEffectiveReturnsCopies(t *testing.T) {
	cfg, _ := parseFull(t)
	bob := cfg.Sessions["bob.ci"]
	srv, settings, _ := bob.Effective("github")
	srv.Args[0] = "mutated"
	srv.Env["NEW"] = "x"
	srv.Settings.ExcludeTools[2] = 'X'
	settings[1] = 'X'

	again, settings2, _ := bob.Effective("github")
	assert.Equal(t, "-y", again.Args[0])
	assert.NotContains(t, again.Env, "NEW")
	assert.Equal(t, `{"trust":true,"includeTools":null,"excludeTools":["create_issue","push_files"]}`, string(settings2))
	assert.Equal(t, "-y", cfg.Servers["github"].Args[0])

	m := cfg.Servers["github"].Metadata()
	m[1] = 'X'
	assert.Equal(t, byte('"'), cfg.Servers["github"].Metadata()[1])
}

func TestServerClone(t *testing.T) {
	cfg, _ := parseFull(t)
	for _, name := range cfg.ServerNames() {
		orig := cfg.Servers[name]
		c := orig.Clone()
		if diff := cmp.Diff(orig, c); diff != "" {
			t.Fatalf("%s: clone differs (-orig +clone):\n%s", name, diff)
		}
		if len(c.Args) > 0 {
			c.Args[0] = "changed"
			assert.NotEqual(t, "changed", orig.Args[0])
		}
		if c.Env != nil {
			c.Env["ADDED"] = "1"
			assert.NotContains(t, orig.Env, "ADDED")
		}
		if c.Headers != nil {
			c.Headers["Added"] = "1"
			assert.NotContains(t, orig.Headers, "Added")
		}
		if len(c.Settings.Trust) > 0 {
			c.Settings.Trust[0] = 'X'
			assert.NotEqual(t, byte('X'), orig.Settings.Trust[0])
		}
	}
	assert.Nil(t, (*Server)(nil).Clone())
}

func TestDefaults(t *testing.T) {
	cfg, ws, err := Load(filepath.Join("testdata", "good", "minimal.json"))
	require.NoError(t, err)
	assert.Empty(t, ws)
	assert.Equal(t, DefaultListen, cfg.Listen)
	assert.Nil(t, cfg.Admin)
	assert.Equal(t, Policy{MemoryMiB: 256, Timeout: 2 * time.Second}, cfg.Policy)
	assert.Equal(t, uint64(256<<20), cfg.Policy.MemoryLimitBytes())
	demo := cfg.Servers["demo"]
	require.NotNil(t, demo)
	assert.True(t, demo.Pooled)
	assert.False(t, demo.Disabled)
	assert.Zero(t, demo.Timeout)
	assert.Equal(t, "stdio", demo.Transport())
	assert.Equal(t, `{}`, string(demo.Metadata()))
	assert.Equal(t, []string{"demo"}, cfg.Sessions["a"].Enabled())
}

func TestParseInline(t *testing.T) {
	tests := []struct {
		name  string
		input string
		check func(t *testing.T, cfg *Config)
	}{
		{
			name: "sessions before servers",
			input: `{"sessions": {"a": {"token": "0123456789abcdef", "servers": ["x"], "overrides": {"x": {"trust": true}}}},
			         "mcpServers": {"x": {"url": "https://example.com/sse"}}}`,
			check: func(t *testing.T, cfg *Config) {
				_, settings, enabled := cfg.Sessions["a"].Effective("x")
				assert.True(t, enabled)
				assert.Equal(t, `{"trust":true}`, string(settings))
				assert.Equal(t, "url", cfg.Servers["x"].Transport())
			},
		},
		{
			name: "raw values keep their escapes and lose only white space",
			input: `{"mcpServers": {"x": {"command": "c", "includeTools": [ "a\u003cb" ,
			          "\u00e9t\u00e9(x)", "tab\there" ], "excludeTools": [], "trust": null, "alwaysLoadTools": false}},
			         "sessions": {"a": {"token": "0123456789abcdef"}}}`,
			check: func(t *testing.T, cfg *Config) {
				assert.Equal(t, `{"trust":null,"alwaysLoadTools":false,"includeTools":["a\u003cb","\u00e9t\u00e9(x)","tab\there"],"excludeTools":[]}`,
					string(cfg.Servers["x"].Metadata()))
			},
		},
		{
			name:  "byte order mark",
			input: "\xef\xbb\xbf" + `{"sessions": {"a": {"token": "0123456789abcdef"}}}`,
			check: func(t *testing.T, cfg *Config) {
				assert.Equal(t, "0123456789abcdef", cfg.Sessions["a"].Token)
			},
		},
		{
			name:  "timeout zero, exponent form and upper-case pin",
			input: `{"mcpServers": {"x": {"command": "c", "timeout": 0}, "y": {"command": "c", "timeout": 1e3}}, "policy": {"timeoutMs": 2.5e2}, "sessions": {"a": {"token": "0123456789abcdef"}}}`,
			check: func(t *testing.T, cfg *Config) {
				assert.Zero(t, cfg.Servers["x"].Timeout)
				assert.Equal(t, time.Second, cfg.Servers["y"].Timeout)
				assert.Equal(t, 250*time.Millisecond, cfg.Policy.Timeout)
			},
		},
		{
			name:  "compile timeout",
			input: `{"policy": {"compileTimeoutMs": 30000}, "sessions": {"a": {"token": "0123456789abcdef"}}}`,
			check: func(t *testing.T, cfg *Config) {
				assert.Equal(t, 30*time.Second, cfg.Policy.CompileTimeout)
			},
		},
		{
			name:  "absolute paths stay as written",
			input: `{"policy": {"path": "/opt/wasmhost/p.wasm"}, "mcpServers": {"x": {"command": "c", "cwd": "/srv"}}, "sessions": {"a": {"token": "0123456789abcdef"}}}`,
			check: func(t *testing.T, cfg *Config) {
				assert.Equal(t, "/opt/wasmhost/p.wasm", cfg.Policy.Path)
				assert.Equal(t, "/srv", cfg.Servers["x"].Cwd)
			},
		},
		{
			name:  "protocol version",
			input: `{"mcpServers": {"x": {"command": "c", "protocolVersion": "2025-11-25"}, "y": {"command": "c"}}, "sessions": {"a": {"token": "0123456789abcdef"}}}`,
			check: func(t *testing.T, cfg *Config) {
				assert.Equal(t, "2025-11-25", cfg.Servers["x"].ProtocolVersion)
				assert.Empty(t, cfg.Servers["y"].ProtocolVersion, "the go-sdk's choice")
			},
		},
		{
			name:  "odd server names",
			input: `{"mcpServers": {"my server.v2": {"command": "c"}, "é": {"command": "c"}}, "sessions": {"a": {"token": "0123456789abcdef", "overrides": {"my server.v2": {"disabled": true}}}}}`,
			check: func(t *testing.T, cfg *Config) {
				assert.Equal(t, []string{"é"}, cfg.Sessions["a"].Enabled())
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, err := Parse("/etc/wasmhost/config.json", []byte(tt.input), fakeEnv(nil), failRead)
			require.NoError(t, err)
			tt.check(t, cfg)
		})
	}
}

func failRead(name string) ([]byte, error) {
	return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
}

func TestWarnings(t *testing.T) {
	input := `{
  "policy": {"path": "p.wasm"},
  "admin": {"token": "admin-token-0123456789"},
  "mcpServers": {
    "web": {"url": "https://example.com/sse", "args": ["x"], "env": {"A": "b"}, "cwd": "/", "type": "sse", "tcp": "x", "extensionName": "e", "extension": {}},
    "local": {"command": "c", "headers": {"Authorization": "Bearer ${TOKEN}"}}
  },
  "sessions": {
    "a": {"token": "tiny-tok", "servers": ["web"], "overrides": {"local": {"trust": true}}}
  }
}`
	_, ws, err := Parse("c.json", []byte(input), fakeEnv(nil), failRead)
	require.NoError(t, err)
	want := []string{
		`mcpServers.web.args: ignored for a server reached by URL`,
		`mcpServers.web.env: ignored for a server reached by URL`,
		`mcpServers.web.cwd: ignored for a server reached by URL`,
		`mcpServers.web.type: not supported by wasmhost, ignored`,
		`mcpServers.web.tcp: not supported by wasmhost, ignored`,
		`mcpServers.web.extensionName: not supported by wasmhost, ignored`,
		`mcpServers.web.extension: not supported by wasmhost, ignored`,
		`mcpServers.local.headers: ignored for a server started with "command"`,
		`mcpServers.local.headers.Authorization: looks like an environment variable reference; wasmhost passes values as written and does not expand variables`,
		`sessions.a.token: the token is shorter than 16 characters; use a long random token`,
		`sessions.a.overrides.local: the session does not use this server (see "sessions.a.servers"), so the override has no effect`,
	}
	if diff := cmp.Diff(want, warningLines("c.json", ws)); diff != "" {
		t.Errorf("warnings mismatch (-want +got):\n%s", diff)
	}
	for _, w := range ws {
		assert.NotContains(t, w.String(), "tiny-tok", "token leaked into a warning")
	}
	assert.Equal(t, "c.json: mcpServers.web.args: ignored for a server reached by URL", ws[0].String())
	for _, w := range ws {
		want := ""
		if strings.HasPrefix(w.Path, "sessions.a.") {
			want = "a"
		}
		assert.Equal(t, want, w.Session, "Session of %s", w)
	}

	_, ws, err = Parse("c.json", []byte(`{}`), fakeEnv(nil), failRead)
	require.NoError(t, err)
	assert.Equal(t, []string{"c.json: no sessions configured; the daemon will serve nothing"}, []string{ws[0].String()})
}

// TestUnknownKeysRefused: an unknown key anywhere in the file refuses the
// load, with its JSON path and the known key it is a misspelling of, if
// any. A filter key written "includeTool" was once a warning, and its
// session saw every tool.
func TestUnknownKeysRefused(t *testing.T) {
	input := `{
  "mcp": {"allowed": ["x"]},
  "polcy": {},
  "policy": {"path": "p.wasm", "memoryMB": 8, "cache": true},
  "admin": {"token": "admin-token-0123456789", "port": 1},
  "mcpServers": {
    "fs": {"command": "c", "includeTool": ["read_file"], "IncludeTools": ["a"], "colour": "red", "maxListingByte": 1}
  },
  "sessions": {
    "reader": {"token": "reader-token-0123456789", "overides": {"fs": {}}, "overrides": {"fs": {"excludeTool": ["x"], "note": 1}}},
    "writer": {"token": "writer-token-0123456789", "sever": ["fs"]}
  }
}`
	cfg, _, err := Parse("c.json", []byte(input), fakeEnv(nil), failRead)
	require.Error(t, err)
	assert.Nil(t, cfg)
	assert.ErrorIs(t, err, ErrInvalid)
	want := []string{
		`c.json: mcp: unknown key (expected one of "mcpServers", "sessions", "policy", "listen" and "admin")`,
		`c.json: polcy: unknown key; did you mean "policy"?`,
		`c.json: policy.memoryMB: unknown key; did you mean "memoryMiB"?`,
		`c.json: policy.cache: unknown key (expected one of "path", "sha256", "memoryMiB", "timeoutMs", "compileTimeoutMs" and "config")`,
		`c.json: admin.port: unknown key (expected one of "token", "tokenFile" and "tokenEnv")`,
		`c.json: mcpServers.fs.includeTool: unknown key; did you mean "includeTools"?`,
		`c.json: mcpServers.fs.IncludeTools: unknown key; did you mean "includeTools"?`,
		`c.json: mcpServers.fs.colour: unknown key (expected one of "trust", "alwaysLoadTools", "includeTools", "excludeTools", "command", "args", "env", "cwd", "url", "httpUrl", "headers", "timeout", "pooled", "bridgeInference", "protocolVersion", "maxListingBytes", "disabled", "description", "prefix" and "instructions"); a policy plugin's own key is accepted only when the plugin declares it in its handshake's settingsKeys`,
		`c.json: mcpServers.fs.maxListingByte: unknown key; did you mean "maxListingBytes"?`,
		`c.json: sessions.reader.overides: unknown key; did you mean "overrides"?`,
		`c.json: sessions.reader.overrides.fs.excludeTool: unknown key; did you mean "excludeTools"?`,
		`c.json: sessions.reader.overrides.fs.note: unknown key (expected one of "trust", "alwaysLoadTools", "includeTools", "excludeTools", "disabled", "prefix" and "instructions"); a policy plugin's own key is accepted only when the plugin declares it in its handshake's settingsKeys`,
		`c.json: sessions.writer.sever: unknown key; did you mean "servers"?`,
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("errors mismatch (-want +got):\n%s", diff)
	}
}

// TestExtraServerKeys: keys the caller declares (a plugin's own settings,
// later) are accepted in server entries and overrides and kept raw; they
// are offered as suggestions, and still refused where they were not
// declared.
func TestExtraServerKeys(t *testing.T) {
	input := []byte(`{
  "mcpServers": {"fs": {"command": "c", "maxRows": 10}},
  "sessions": {"a": {"token": "a-token-0123456789abc", "overrides": {"fs": {"maxRows": [1, 2]}}}}
}`)
	_, _, err := Parse("c.json", input, fakeEnv(nil), failRead)
	require.Error(t, err, "undeclared, the key is refused")

	cfg, ws, err := ParseWith("c.json", input, Options{LookupEnv: fakeEnv(nil), ReadFile: failRead, ServerKeys: []string{"maxRows"}})
	require.NoError(t, err)
	assert.Empty(t, ws)
	assert.Equal(t, `10`, string(cfg.Servers["fs"].Settings.Extra["maxRows"]))
	assert.Equal(t, `[1,2]`, string(cfg.Sessions["a"].Overrides["fs"].Settings.Extra["maxRows"]))
	assert.Equal(t, `10`, string(cfg.Servers["fs"].Clone().Settings.Extra["maxRows"]))

	_, _, err = ParseWith("c.json", []byte(`{"mcpServers": {"fs": {"command": "c", "maxRow": 1}}}`), Options{ServerKeys: []string{"maxRows"}})
	require.Error(t, err)
	assert.Equal(t, `c.json: mcpServers.fs.maxRow: unknown key; did you mean "maxRows"?`, err.Error())
}

// TestPluginKeysInSettings: a declared key reaches the settings object the
// plugin sees, sorted after wasmhost's own keys, and a session override
// replaces it; the server's transport is untouched.
func TestPluginKeysInSettings(t *testing.T) {
	input := []byte(`{
  "mcpServers": {"fs": {"command": "c", "readOnlyOnly": true, "trust": false, "aLimit": 3}},
  "sessions": {
    "a": {"token": "a-token-0123456789abc"},
    "b": {"token": "b-token-0123456789abc", "overrides": {"fs": {"readOnlyOnly": false}}}
  }
}`)
	cfg, _, err := ParseWith("c.json", input, Options{LookupEnv: fakeEnv(nil), ReadFile: failRead, ServerKeys: []string{"readOnlyOnly", "aLimit"}})
	require.NoError(t, err)
	got, enabled := cfg.Sessions["a"].EffectiveSettings("fs")
	require.True(t, enabled)
	assert.Equal(t, `{"trust":false,"aLimit":3,"readOnlyOnly":true}`, string(got))
	got, _ = cfg.Sessions["b"].EffectiveSettings("fs")
	assert.Equal(t, `{"trust":false,"aLimit":3,"readOnlyOnly":false}`, string(got))
	_, effective, _ := cfg.Sessions["b"].Effective("fs")
	assert.Equal(t, string(got), string(effective))
	appended, _ := cfg.Sessions["b"].AppendEffectiveSettings([]byte("held"), "fs")
	assert.Equal(t, "held"+string(got), string(appended), "plugin keys appended too")
	assert.Equal(t, `true`, string(cfg.Servers["fs"].Settings.Extra["readOnlyOnly"]), "the override does not touch the base entry")
}

// TestUndeclaredKeyNamesPlugin: a key the plugin does not declare is
// refused, and the error names the plugin that would have to declare it.
func TestUndeclaredKeyNamesPlugin(t *testing.T) {
	input := []byte(`{
  "mcpServers": {"fs": {"command": "c"}},
  "sessions": {"a": {"token": "a-token-0123456789abc", "overrides": {"fs": {"readOnlyOnly": true}}}}
}`)
	_, _, err := ParseWith("c.json", input, Options{LookupEnv: fakeEnv(nil), ReadFile: failRead, ServerKeysOwner: `policy plugin "policy-default"`})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `sessions.a.overrides.fs.readOnlyOnly: unknown key`)
	assert.Contains(t, err.Error(), `policy plugin "policy-default" would have to declare it in its handshake's settingsKeys`)

	_, _, err = ParseWith("c.json", []byte(`{"mcpServers": {"fs": {"command": "c"}}}`), Options{ServerKeys: []string{"prefix"}, ServerKeysOwner: `policy plugin "x"`})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `policy plugin "x" declares the settings key "prefix", which is wasmhost's own`)
}

// TestUncheckedKeysNeverApply: with Options.ServerKeysUnknown (the policy
// plugin's keys cannot be known), a key no one declared is a warning, not
// an error blaming the plugin, and the config is refused all the same,
// even when it has no other problem: a key left unchecked is never
// applied.
func TestUncheckedKeysNeverApply(t *testing.T) {
	input := []byte(`{
  "mcpServers": {"fs": {"command": "c"}},
  "sessions": {"a": {"token": "a-token-0123456789abc", "overrides": {"fs": {"readOnlyOnly": true}}}}
}`)
	cfg, ws, err := ParseWith("c.json", input, Options{LookupEnv: fakeEnv(nil), ReadFile: failRead, ServerKeysUnknown: true})
	require.Error(t, err)
	assert.Nil(t, cfg)
	assert.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "1 settings keys not checked")
	require.Len(t, ws, 1)
	assert.Equal(t, "sessions.a.overrides.fs.readOnlyOnly", ws[0].Path)
	assert.Contains(t, ws[0].Message, "not checked")
}

// TestPolicyConfig: policy.config takes any JSON, compacted; PeekPolicy
// reads it without the rest of the file; its shown form hides every value.
func TestPolicyConfig(t *testing.T) {
	input := []byte(`{
  "policy": {"config": {"apiKey": "sk-secret-123", "hide": ["write_file"], "limit": 7, "on": true, "none": null}},
  "mcpServers": {"fs": {"command": "c", "readOnlyOnly": true}},
  "sessions": {"a": {"tokenEnv": "UNSET_TOKEN"}}
}`)
	pol, err := PeekPolicy("c.json", input)
	require.NoError(t, err, "PeekPolicy reads the policy block only: the plugin's key and the token are not its business")
	assert.Equal(t, `{"apiKey":"sk-secret-123","hide":["write_file"],"limit":7,"on":true,"none":null}`, string(pol.Config))
	assert.JSONEq(t, `{"apiKey":"REDACTED","hide":["REDACTED"],"limit":"REDACTED","on":"REDACTED","none":null}`, string(pol.RedactedConfig()))
	assert.Len(t, pol.ConfigSHA256(), 64)
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("x", "policy", pol)
	assert.NotContains(t, b.String(), "sk-secret-123")
	assert.NotContains(t, b.String(), "write_file")

	other := pol
	other.Config = json.RawMessage(`{"hide":[]}`)
	assert.False(t, pol.Equal(other))
	assert.True(t, pol.Equal(pol))
	none := pol
	none.Config = nil
	assert.Nil(t, none.RedactedConfig())

	_, err = PeekPolicy("c.json", []byte(`{"policy": {"config": 1, "path": 3}}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "policy.path")
}

func TestSuggest(t *testing.T) {
	known := []string{"includeTools", "excludeTools", "trust", "overrides"}
	for key, want := range map[string]string{
		"includeTool":   "includeTools",
		"INCLUDETOOLS":  "includeTools",
		"include_tools": "includeTools",
		"excludetool":   "excludeTools",
		"overides":      "overrides",
		"trsut":         "trust",
		"tr":            "",
		"x":             "",
		"colour":        "",
		"":              "",
	} {
		assert.Equal(t, want, suggest(key, known), "suggest(%q)", key)
	}
}

func TestErrorDetails(t *testing.T) {
	input := "{\n  \"mcpServers\": {\n    \"fs\": {\"command\": \"c\", \"args\": [\"a\", 2]},\n    \"x\": {}\n  }\n}"
	_, ws, err := Parse("dir/c.json", []byte(input), fakeEnv(nil), failRead)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrInvalid)
	assert.Empty(t, ws)

	var errs []*Error
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ce *Error
		require.True(t, errors.As(e, &ce))
		errs = append(errs, ce)
	}
	want := []*Error{
		{File: "dir/c.json", Path: "mcpServers.fs.args[1]", Line: 3, Column: 42, Msg: "expected a string, got a number"},
		{File: "dir/c.json", Path: "mcpServers.x", Line: 4, Column: 10, Msg: `expected exactly one of "command", "url" or "httpUrl", found none`},
	}
	if diff := cmp.Diff(want, errs); diff != "" {
		t.Errorf("errors mismatch (-want +got):\n%s", diff)
	}
	assert.Equal(t, "dir/c.json: mcpServers.fs.args[1]: expected a string, got a number\n"+
		`dir/c.json: mcpServers.x: expected exactly one of "command", "url" or "httpUrl", found none`, err.Error())
}

// TestServerNameToolNameWarning: a server name with characters the MCP
// specification advises against in tool names (it prefixes them) is
// accepted with a warning at its key; a plain one gets none.
func TestServerNameToolNameWarning(t *testing.T) {
	data := []byte(`{"mcpServers":{"my probe/x":{"command":"a"},"git-hub.v2_1":{"command":"b"}},"sessions":{"s":{"token":"a-token-of-twenty-chars-or-more"}}}`)
	cfg, ws, err := Parse("names.json", data, fakeEnv(nil), nil)
	require.NoError(t, err)
	assert.Len(t, cfg.Servers, 2)
	assert.Equal(t, []string{
		`mcpServers["my probe/x"]: the server name makes tool names such as "my probe/x__tool", with characters the MCP specification advises against (use letters, digits, '_', '-' and '.'); some clients refuse them`,
	}, warningLines("names.json", ws))
}
