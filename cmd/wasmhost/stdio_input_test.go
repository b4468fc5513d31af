package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStdioPolicyErrorsNameTheSetting: a policy plugin stdio mode cannot
// load is reported, as the daemon reports it (and as config errors are),
// by file and the JSON path of the setting at fault: policy.path for a
// plugin file that is missing, policy.sha256 for one that does not match
// its pin, policy for the embedded default plugin.
func TestStdioPolicyErrorsNameTheSetting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
		return path
	}
	const session = `"sessions": {"a": {"token": "a-token-0123456789abcdef"}}`
	missing := write("missing.json", `{"policy": {"path": "nope.wasm"}, `+session+`}`)
	pin := write("pin.json", `{"policy": {"sha256": "`+strings.Repeat("0", 64)+`"}, `+session+`}`)
	for _, tc := range []struct{ path, want string }{
		{missing, missing + ": policy.path: "},
		{pin, pin + ": policy.sha256: "},
	} {
		r := runCLI(t, "", "stdio", "--config", tc.path, "--session", "a")
		assert.Equal(t, exitUsage, r.code, r.errOut)
		assert.Contains(t, r.errOut, tc.want)
		assert.Empty(t, r.out, "standard output is reserved for MCP")
	}
}
