package redact

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/config"
)

func TestSetRedactsURLSecretsHeadersAndTokens(t *testing.T) {
	var s Set
	assert.Equal(t, "nothing yet", s.String("nothing yet"), "an empty set changes nothing")
	s.AddConfig(&config.Config{
		Servers: map[string]*config.Server{
			"q":   {HTTPURL: "https://user:pa55w0rd!@api.example.com/mcp?api_key=k3y-0123456789&region=eu-west"},
			"h":   {URL: "http://h.example.com/sse", Headers: map[string]string{"Authorization": "Bearer t0ken-abcdef", "X-Short": "1"}},
			"cmd": {Command: "npx"},
		},
		Sessions: map[string]*config.Session{"alice": {Token: "alice-session-token"}},
		Admin:    &config.Admin{Token: "admin-token-xyz"},
	})

	// net/http's error quotes the URL with its query (and the password
	// stripped); the go-sdk wraps it, sometimes with %v.
	u, err := url.Parse("https://user:pa55w0rd!@api.example.com/mcp?api_key=k3y-0123456789&region=eu-west")
	require.NoError(t, err)
	inner := &url.Error{Op: "Post", URL: u.Redacted(), Err: errors.New("connection refused")}
	for _, e := range []error{
		fmt.Errorf("connect: %w", inner),
		fmt.Errorf("calling tool: %v", inner),
		errors.New("status 401 for api_key=k3y-0123456789 with Bearer t0ken-abcdef"),
		errors.New(`{"url":"https://user:pa55w0rd!@api.example.com/mcp?api_key=k3y-0123456789\u0026region=eu-west"}`),
		errors.New("tokens alice-session-token admin-token-xyz"),
	} {
		red := s.Error(e)
		for _, secret := range []string{"k3y-0123456789", "pa55w0rd", "t0ken-abcdef", "alice-session-token", "admin-token-xyz", "region=eu-west"} {
			assert.NotContains(t, red.Error(), secret, "from %q", e)
		}
		assert.Contains(t, red.Error(), Mask)
		assert.ErrorIs(t, red, e, "the redacted error still unwraps to the original")
	}
	var uerr *url.Error
	assert.ErrorAs(t, s.Error(fmt.Errorf("connect: %w", inner)), &uerr)

	// Short values are not secrets; text without secrets is left alone.
	assert.Equal(t, "X-Short: 1, npx", s.String("X-Short: 1, npx"))
	plain := errors.New("dial tcp: connection refused")
	assert.Same(t, plain, s.Error(plain))
	assert.Nil(t, s.Error(nil))
}

func TestHandlerRedactsRecords(t *testing.T) {
	var s Set
	s.Add("s3cret-value")
	var buf bytes.Buffer
	log := slog.New(s.Handler(slog.NewTextHandler(&buf, nil))).With("fixed", "with s3cret-value")
	log.Info("message s3cret-value", "err", errors.New("wrapped s3cret-value"), "str", "s3cret-value",
		slog.Group("g", "inner", "s3cret-value"), "n", 7, "stringer", url.URL{Host: "s3cret-value"})
	out := buf.String()
	assert.NotContains(t, out, "s3cret-value")
	assert.Contains(t, out, "n=7")
	assert.Contains(t, out, `err="wrapped `+Mask+`"`)
	assert.Contains(t, out, `g.inner=`+Mask)
}

// TestSetWrite: Write writes what String returns, for text with secrets,
// without, and with an empty set.
func TestSetWrite(t *testing.T) {
	var s Set
	write := func(text string) string {
		var b bytes.Buffer
		n, err := s.Write(&b, []byte(text))
		require.NoError(t, err)
		assert.Equal(t, b.Len(), n)
		return b.String()
	}
	assert.Equal(t, "no secret here", write("no secret here"), "an empty set changes nothing")
	s.Add("hunter2-password", "token-0123456789")
	for _, text := range []string{
		"no secret here",
		`{"token":"token-0123456789","p":"hunter2-password","again":"token-0123456789"}`,
		"token-0123456789",
		"",
	} {
		assert.Equal(t, s.String(text), write(text), "text %q", text)
	}
	assert.NotContains(t, write("x token-0123456789 y"), "token-0123456789")
}
