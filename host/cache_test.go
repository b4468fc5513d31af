package host

import (
	"bytes"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cacheFiles returns the files under dir with their contents.
func cacheFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		files[path] = b
		return err
	}))
	return files
}

// TestCacheDirDamagedEntry damages every entry of a filled compilation cache
// in two ways wazero detects (a file cut short, a flipped byte in its
// header) and checks that the next load still succeeds, says so, and leaves
// entries that a third load reads without complaint.
func TestCacheDirDamagedEntry(t *testing.T) {
	for name, damage := range map[string]func([]byte) []byte{
		"truncated": func(b []byte) []byte { return b[:len(b)/2] },
		"bad magic": func(b []byte) []byte {
			b = append([]byte(nil), b...)
			b[0] ^= 0xff
			return b
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			loadWat(t, "script", Options{CacheDir: dir})
			good := cacheFiles(t, dir)
			require.NotEmpty(t, good)
			for path, b := range good {
				require.NoError(t, os.WriteFile(path, damage(b), 0o600))
			}

			rec := &recordHandler{}
			// loadWat fails the test unless the load, handshake included,
			// succeeds.
			loadWat(t, "script", Options{CacheDir: dir, Logger: slogNew(rec)})
			assert.Contains(t, rec.messages(), "WARN compilation cache entry damaged; compiling again and replacing it")
			assert.Equal(t, []string{dir}, rec.attr("cacheDir"))

			repaired := cacheFiles(t, dir)
			assert.ElementsMatch(t, slices.Collect(maps.Keys(good)), slices.Collect(maps.Keys(repaired)),
				"the repair left files behind or lost some")
			for path := range good {
				assert.False(t, bytes.Equal(damage(good[path]), repaired[path]), "%s is still damaged", path)
			}

			rec = &recordHandler{}
			loadWat(t, "script", Options{CacheDir: dir, Logger: slogNew(rec)})
			assert.NotContains(t, rec.messages(), "WARN compilation cache entry damaged; compiling again and replacing it")
		})
	}
}
