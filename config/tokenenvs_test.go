package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTokenEnvs: the variables the admin block and the sessions read
// their tokens from, sorted, once each; inline and file tokens name none.
func TestTokenEnvs(t *testing.T) {
	env := map[string]string{"ADMIN_T": "admin-token-0123456789", "A_T": "alice-token-0123456789", "B_T": "bob-token-0123456789"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, _, err := Parse("c.json", []byte(`{
		"admin": {"tokenEnv": "ADMIN_T"},
		"mcpServers": {"x": {"command": "x"}},
		"sessions": {
			"b": {"tokenEnv": "B_T"},
			"a": {"tokenEnv": "A_T"},
			"c": {"token": "carol-token-0123456789"}
		}}`), lookup, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"ADMIN_T", "A_T", "B_T"}, cfg.TokenEnvs())
}
