package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// asWasm is the AssemblyScript build of the default policy: it answers as
// the embedded plugin does and compiles in a fraction of its time, for tests
// whose subject is a flag, not the plugin.
var asWasm = filepath.Join("..", "..", "testplugins", "policy-default-as", "policy-default-as.wasm")

// TestInspectCacheDir: inspect keeps the compiled plugin in --cache-dir,
// as the other commands do (by default the one kept between runs), so a
// second inspect of a large plugin does not compile it again; a directory
// it cannot use is refused with the hint the other commands give.
func TestInspectCacheDir(t *testing.T) {
	t.Parallel()
	cache := t.TempDir()
	r := runCLI(t, "", "inspect", "--cache-dir", cache, asWasm)
	require.Equal(t, exitOK, r.code, r.out+r.errOut)
	assert.True(t, strings.HasSuffix(r.out, "accepted: yes\n"), r.out)
	entries, err := os.ReadDir(cache)
	require.NoError(t, err)
	assert.NotEmpty(t, entries, "--cache-dir holds the compiled plugin")

	r = runCLI(t, "", "inspect", "--cache-dir", "/dev/null/cache", asWasm)
	assert.Equal(t, exitUsage, r.code, r.out+r.errOut)
	assert.Empty(t, r.out, "the plugin is not judged")
	assert.Contains(t, r.errOut, `cannot use the compilation cache directory "/dev/null/cache"`)
	assert.Contains(t, r.errOut, "wasmhost inspect: choose another compilation cache directory with --cache-dir DIR, or none with --cache-dir=")

	r = runCLI(t, "", "inspect", "--cache-dir=", asWasm)
	require.Equal(t, exitOK, r.code, r.out+r.errOut)

	r = runCLI(t, "", "inspect", "-h")
	assert.Contains(t, r.errOut, "-cache-dir DIR", "the help names the flag")
}
