package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestCacheWriteErrorBlamesTheDirectory: a compilation that fails because
// wazero cannot write its entry into the cache directory (read-only, full)
// is ErrCacheDir, so that the commands blame the directory, not the plugin
// (wasmhost inspect would say "accepted: no"). Errors about anything else
// stay as they are. Written against the error, not a read-only directory:
// these tests run as root, whom permissions do not stop.
func TestCacheWriteErrorBlamesTheDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	entry := filepath.Join(dir, "wazero-v1.12.0-amd64-linux", "abc.123.tmp")
	write := &fs.PathError{Op: "open", Path: entry, Err: syscall.EROFS}
	for _, err := range []error{
		fmt.Errorf("compile: %w", write),
		fmt.Errorf("compile: %v", write), // wrapped by text only, as extism may
	} {
		got := cacheWriteError(dir, err)
		assert.ErrorIs(t, got, ErrCacheDir, "%v", err)
		assert.ErrorContains(t, got, entry)
	}
	for _, err := range []error{
		errors.New("compile: invalid function[3]: type mismatch"),
		&fs.PathError{Op: "open", Path: dir + "-other/x", Err: os.ErrPermission},
		fmt.Errorf("compile: %v", &fs.PathError{Op: "open", Path: dir + "x/y", Err: os.ErrPermission}),
	} {
		assert.NotErrorIs(t, cacheWriteError(dir, err), ErrCacheDir, "%v", err)
	}
}
