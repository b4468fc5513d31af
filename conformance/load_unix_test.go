//go:build unix

package conformance

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
)

// TestLoadRefusesNonRegularSuiteFiles: a *.json entry of a suite directory
// that is not a regular file (a named pipe, met as itself or through a
// symbolic link, as a contributed suite may hold one to /dev/stdin or a
// pipe) stops the load with an error naming it, rather than blocking the
// runner for ever on a read no writer will end. Before, Load opened it
// and waited.
func TestLoadRefusesNonRegularSuiteFiles(t *testing.T) {
	for _, viaLink := range []bool{false, true} {
		tmp := t.TempDir()
		suites := filepath.Join(tmp, "suites")
		require.NoError(t, os.MkdirAll(suites, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(suites, "a.json"), []byte(`{"suite":"s","cases":[]}`), 0o644))
		fifo := filepath.Join(suites, "b.json")
		if viaLink {
			fifo = filepath.Join(tmp, "pipe")
			require.NoError(t, os.Symlink(fifo, filepath.Join(suites, "b.json")))
		}
		require.NoError(t, syscall.Mkfifo(fifo, 0o644))

		done := make(chan error, 1)
		go func() {
			_, err := Load(suites)
			done <- err
		}()
		select {
		case err := <-done:
			require.Error(t, err)
			assert.Contains(t, err.Error(), "b.json")
			assert.Contains(t, err.Error(), "not a regular file")
		case <-time.After(mcptest.Within(t, mcptest.EventWithin)):
			// Let the blocked open go on, so that nothing outlives the test.
			w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err == nil {
				_ = w.Close()
			}
			<-done
			t.Fatalf("Load of a directory holding a named pipe %s (via link: %v) blocked", filepath.Base(fifo), viaLink)
		}
	}
}
