package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNamingAndInstructionsKeys: a session's "names", and a server's or
// override's "prefix" and "instructions", are read, layered override over
// server, and refused when malformed.
func TestNamingAndInstructionsKeys(t *testing.T) {
	cfg, ws, err := Parse("c.json", []byte(`{
		"mcpServers": {
			"a": {"command": "a", "prefix": "A_", "instructions": true},
			"b": {"command": "b"},
			"c": {"command": "c", "prefix": ""}
		},
		"sessions": {
			"s": {"token": "0123456789abcdef", "names": "bare",
			      "overrides": {"a": {"instructions": false}, "b": {"prefix": "bee.", "instructions": true}}},
			"t": {"token": "fedcba9876543210"}
		}}`), fakeEnv(nil), failRead)
	require.NoError(t, err)
	assert.Empty(t, ws)
	s, u := cfg.Sessions["s"], cfg.Sessions["t"]
	assert.Equal(t, NamesBare, s.Names)
	assert.Equal(t, NamesAuto, u.Names, "the default")
	for _, tc := range []struct {
		sess         *Session
		server       string
		prefix       string
		fixed, instr bool
	}{
		{s, "a", "A_", true, false},
		{s, "b", "bee.", true, true},
		{s, "c", "", true, false},
		{u, "a", "A_", true, true},
		{u, "b", "", false, false},
	} {
		p, fixed := tc.sess.Prefix(tc.server)
		assert.Equal(t, tc.prefix, p, "%s/%s", tc.sess.Name, tc.server)
		assert.Equal(t, tc.fixed, fixed, "%s/%s", tc.sess.Name, tc.server)
		assert.Equal(t, tc.instr, tc.sess.Instructions(tc.server), "%s/%s", tc.sess.Name, tc.server)
	}

	for _, tc := range []struct{ in, want string }{
		{`{"mcpServers": {"a": {"command": "a", "prefix": "a b"}}}`, `mcpServers.a.prefix: prefix has ' '`},
		{`{"mcpServers": {"a": {"command": "a", "prefix": "` + string(make([]byte, 0)) + `xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}}`, `over 32`},
		{`{"mcpServers": {"a": {"command": "a", "instructions": "yes"}}}`, `mcpServers.a.instructions: expected a boolean`},
		{`{"mcpServers": {"a": {"command": "a"}}, "sessions": {"s": {"token": "0123456789abcdef", "names": "short"}}}`, `sessions.s.names: expected "auto", "prefixed" or "bare", got "short"`},
		{`{"mcpServers": {"a": {"command": "a"}}, "sessions": {"s": {"token": "0123456789abcdef", "overrides": {"a": {"prefix": 3}}}}}`, `sessions.s.overrides.a.prefix: expected a string`},
	} {
		_, _, err := Parse("c.json", []byte(tc.in), fakeEnv(nil), failRead)
		require.Error(t, err, tc.in)
		assert.Contains(t, err.Error(), tc.want, tc.in)
	}
}
