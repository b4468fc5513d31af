//go:build unix

package host

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCacheDirOthersCannotWrite: a cache directory that every user may
// write, that another user owns, or whose group (not this process's) may
// write is refused before anything in it is read (an entry there chooses
// the code the host runs, whatever the pin); one its own group may write
// is used; a missing one is made for this user alone.
func TestCacheDirOthersCannotWrite(t *testing.T) {
	// A small plugin: the directory checks come before any compiling,
	// and what the plugin is does not change them (the default plugin
	// took 40 s to compile into two fresh caches under -race).
	ctx := context.Background()
	wasm := watWasm(t, "script")
	base := t.TempDir()
	mkdir := func(name string, perm os.FileMode) string {
		dir := filepath.Join(base, name)
		require.NoError(t, os.Mkdir(dir, 0o700))
		require.NoError(t, os.Chmod(dir, perm))
		return dir
	}
	refused := func(dir, why string) {
		t.Helper()
		_, err := Load(ctx, "script", wasm, Options{CacheDir: dir})
		require.ErrorIs(t, err, ErrCacheDir)
		require.ErrorContains(t, err, why)
	}
	used := func(dir string) {
		t.Helper()
		p, err := Load(ctx, "script", wasm, Options{CacheDir: dir})
		require.NoError(t, err)
		require.NoError(t, p.Close(ctx))
		require.NotEmpty(t, cacheFiles(t, dir), "nothing compiled into %s", dir)
	}

	refused(mkdir("shared", 0o777), "every user may write it")
	refused(mkdir("sticky", 0o777|os.ModeSticky), "every user may write it")
	used(mkdir("own-group", 0o770)) // made with this process's group

	if os.Geteuid() == 0 {
		theirs := mkdir("theirs", 0o755)
		require.NoError(t, os.Chown(theirs, 65534, 65534))
		refused(theirs, "owned by user 65534")

		group := mkdir("their-group", 0o770)
		require.NoError(t, os.Chown(group, 0, 65534))
		refused(group, "group 65534 may write it")
	}

	fresh := filepath.Join(base, "fresh", "cache")
	used(fresh)
	fi, err := os.Stat(fresh)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
}
