package host

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/wasmmeter"
	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"
)

// TestMeteredModuleKept: a load with a cache directory keeps the metered
// module there under the plugin's digest, and a later load runs what it
// finds there (shown by planting another plugin's metered module under the
// default's name); an entry that does not check out is ignored and written
// again.
func TestMeteredModuleKept(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the default plugin into a fresh cache")
	}
	ctx := context.Background()
	dir := t.TempDir()
	load := func() string {
		t.Helper()
		p, err := loadEmbeddedDefault(ctx, Options{CacheDir: dir})
		require.NoError(t, err)
		defer p.Close(ctx)
		return p.Handshake().Name
	}
	require.Equal(t, "policy-default", load())
	entry := meteredPath(dir, policydefault.SHA256)
	kept, ok := readMetered(entry)
	require.True(t, ok, "no entry at %s", entry)
	want, err := wasmmeter.Instrument(policydefault.Wasm, meterBudget)
	require.NoError(t, err)
	require.Equal(t, want, kept)

	other, err := os.ReadFile(filepath.Join("..", "testplugins", "prefix-policy", "prefix-policy.wasm"))
	require.NoError(t, err)
	planted, err := wasmmeter.Instrument(other, meterBudget)
	require.NoError(t, err)
	require.NoError(t, writeMetered(entry, planted))
	assert.Equal(t, "prefix-policy", load(), "the kept entry is what runs")

	for name, damage := range map[string]func([]byte) []byte{
		"flipped byte": func(b []byte) []byte { b[len(b)/2] ^= 1; return b },
		"cut short":    func(b []byte) []byte { return b[:len(b)/3] },
		"empty":        func([]byte) []byte { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, writeMetered(entry, want))
			b, err := os.ReadFile(entry)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(entry, damage(b), 0o600))
			_, ok := readMetered(entry)
			require.False(t, ok, "a damaged entry checks out")
			assert.Equal(t, "policy-default", load())
			kept, ok := readMetered(entry)
			require.True(t, ok, "the entry was not written again")
			assert.Equal(t, want, kept)
		})
	}
}
