package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTokensNeverPrinted(t *testing.T) {
	cfg, ws := parseFull(t)
	secrets := []string{
		"admin-env-token-0123456789", "alice-file-token-abcdefghijkl",
		"bob-inline-token-0123456789", "carol-env-token-0123456789",
	}

	var out bytes.Buffer
	for _, w := range ws {
		out.WriteString(w.String() + "\n")
	}
	for _, v := range []any{cfg, *cfg, cfg.Admin, *cfg.Admin, cfg.Sessions, cfg.Sessions["bob.ci"], *cfg.Sessions["bob.ci"]} {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
			fmt.Fprintf(&out, verb+"\n", v)
		}
	}
	logger := slog.New(slog.NewJSONHandler(&out, nil))
	text := slog.New(slog.NewTextHandler(&out, nil))
	for _, name := range cfg.SessionNames() {
		s := cfg.Sessions[name]
		logger.Info("session", "session", s, "value", *s)
		text.Info("session", "session", s)
	}
	logger.Info("admin", "admin", cfg.Admin)
	js, err := json.Marshal(cfg)
	require.NoError(t, err)
	out.Write(js)

	for _, s := range secrets {
		assert.NotContains(t, out.String(), s)
	}
	// The output still says something useful.
	assert.Contains(t, out.String(), `session "bob.ci" (token in the config file)`)
	assert.Contains(t, out.String(), `"tokenSource":"tokenEnv CAROL_TOKEN"`)
	assert.Contains(t, out.String(), `"token":"REDACTED"`)
}

func TestServerLogValueHidesSecrets(t *testing.T) {
	cfg, _ := parseFull(t)
	var out bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&out, nil))
	srv := cfg.Servers["httpServerWithAuth"].Clone()
	srv.HTTPURL = "https://user:pa55word@example.com/mcp?key=qu3ry"
	logger.Info("server", "server", srv, "github", cfg.Servers["github"])
	fmt.Fprintf(&out, "%v %+v %#v\n", srv, *srv, srv)

	for _, s := range []string{"static-upstream-key", "pa55word", "qu3ry", "$GITHUB_TOKEN"} {
		assert.NotContains(t, out.String(), s)
	}
	assert.Contains(t, out.String(), `"headers":["Authorization","X-Custom-Header"]`)
	assert.Contains(t, out.String(), `"env":["GITHUB_PERSONAL_ACCESS_TOKEN"]`)
	assert.Contains(t, out.String(), `server "httpServerWithAuth" (httpUrl)`)
}

func TestTokenMatches(t *testing.T) {
	cfg, _ := parseFull(t)
	alice, bob := cfg.Sessions["alice"], cfg.Sessions["bob.ci"]
	assert.True(t, alice.TokenMatches("alice-file-token-abcdefghijkl"))
	assert.False(t, alice.TokenMatches("bob-inline-token-0123456789"))
	assert.False(t, alice.TokenMatches(""))
	assert.False(t, alice.TokenMatches("alice-file-token-abcdefghijk"))
	assert.True(t, bob.TokenMatches("bob-inline-token-0123456789"), "inline tokens are trimmed")
	assert.True(t, cfg.Admin.TokenMatches("admin-env-token-0123456789"))
	assert.False(t, cfg.Admin.TokenMatches("alice-file-token-abcdefghijkl"))
	assert.False(t, (&Session{}).TokenMatches(""), "a session without a token matches nothing")
}
