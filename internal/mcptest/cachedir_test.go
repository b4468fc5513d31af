package mcptest

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCacheDir: a directory files can be made in is used as it is, and
// created if missing; none, or a path that cannot be a directory, gives a
// temporary directory that the returned func removes.
func TestCacheDir(t *testing.T) {
	usable := filepath.Join(t.TempDir(), "a", "cache")
	dir, done := CacheDir(usable)
	assert.Equal(t, usable, dir)
	done()
	assert.DirExists(t, usable, "the shared cache is never removed")
	entries, err := os.ReadDir(usable)
	require.NoError(t, err)
	assert.Empty(t, entries, "the probe file is left behind")

	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	for _, bad := range []string{"", file, filepath.Join(file, "below")} {
		dir, done := CacheDir(bad)
		assert.NotEqual(t, bad, dir)
		assert.DirExists(t, dir)
		done()
		assert.NoDirExists(t, dir, "the temporary cache outlives its run")
	}
}

// TestOnceByKey: f runs once per key however many callers race for it, and
// every caller of a key gets its error, the later ones too.
func TestOnceByKey(t *testing.T) {
	var (
		o    OnceByKey
		runs atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, 16)
	)
	boom := errors.New("boom")
	for i := range 16 {
		key := []string{"good", "bad"}[i%2]
		wg.Go(func() {
			errs <- o.Do(key, func() error {
				runs.Add(1)
				if key == "bad" {
					return boom
				}
				return nil
			})
		})
	}
	wg.Wait()
	close(errs)
	var failed int
	for err := range errs {
		if err != nil {
			assert.ErrorIs(t, err, boom)
			failed++
		}
	}
	assert.Equal(t, 8, failed, "every caller of the failing key hears of it")
	assert.Equal(t, int64(2), runs.Load())
}
