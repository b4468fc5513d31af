package pool_test

import (
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/pool"
)

// countingTripper counts requests.
type countingTripper struct {
	base http.RoundTripper
	n    *atomic.Int32
}

func (c countingTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.base.RoundTrip(req)
}

// TestWithRoundTripper: every HTTP transport DefaultDialer makes sends
// through the wrapper; the transport it was given is left as it was;
// other transports are not HTTP.
func TestWithRoundTripper(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sse     bool
		httpURL bool
	}{
		{name: "url/streamable"},
		{name: "url/sse", sse: true},
		{name: "httpUrl/streamable", httpURL: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := httpSpec(t, tc.sse, tc.httpURL)
			tr, err := pool.DefaultDialer(t.Context(), spec)
			require.NoError(t, err)
			var n atomic.Int32
			wrapped, ok := pool.WithRoundTripper(tr, func(base http.RoundTripper) http.RoundTripper { return countingTripper{base, &n} })
			require.True(t, ok)
			require.NotSame(t, tr, wrapped)

			cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(t.Context(), wrapped, nil)
			require.NoError(t, err)
			defer cs.Close()
			_, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo"})
			require.NoError(t, err)
			seen := n.Load()
			assert.Positive(t, seen, "requests went through the wrapper")

			// The original transport does not send through the wrapper.
			cs2, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(t.Context(), tr, nil)
			require.NoError(t, err)
			defer cs2.Close()
			_, err = cs2.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo"})
			require.NoError(t, err)
			assert.Equal(t, seen, n.Load())
		})
	}
	tr, err := pool.DefaultDialer(t.Context(), pool.Spec{Name: "local", Command: "true"})
	require.NoError(t, err)
	same, ok := pool.WithRoundTripper(tr, func(base http.RoundTripper) http.RoundTripper { panic("called") })
	assert.False(t, ok)
	assert.Same(t, tr, same)
}

// TestCheckCommandCwd: a command whose working directory is missing, or
// is a file, cannot start however real the command is; CheckCommand says
// so (ErrBadCwd, naming the directory), and so does DefaultDialer, where
// os/exec would blame the command ("fork/exec CMD: no such file or
// directory").
func TestCheckCommandCwd(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))

	ok := pool.Spec{Name: "s", Command: self, Cwd: dir}
	require.NoError(t, ok.CheckCommand())
	_, err = pool.DefaultDialer(t.Context(), ok)
	require.NoError(t, err)

	for cwd, want := range map[string]string{
		filepath.Join(dir, "missing"): "no such file or directory",
		file:                          "not a directory",
	} {
		spec := pool.Spec{Name: "s", Command: self, Cwd: cwd}
		err := spec.CheckCommand()
		require.ErrorIs(t, err, pool.ErrBadCwd, cwd)
		assert.Equal(t, pool.ErrBadCwd.Error()+": "+cwd+": "+want, err.Error())
		_, err = pool.DefaultDialer(t.Context(), spec)
		require.ErrorIs(t, err, pool.ErrBadCwd, cwd)
		assert.NotContains(t, err.Error(), self, "the command is not blamed")
	}
}

// TestCheckCommandRelativeNamesWorkingDirectory: a relative command that
// is missing is reported with the directory it was looked for in, since a
// relative "command" is not taken from the config file's directory.
func TestCheckCommandRelativeNamesWorkingDirectory(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	err := pool.Spec{Name: "s", Command: "./bin/missing"}.CheckCommand()
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Equal(t, "stat ./bin/missing: no such file or directory (a relative command is taken from the working directory, "+dir+")", err.Error())

	// With a cwd, the path named is already the one looked for.
	err = pool.Spec{Name: "s", Command: "./bin/missing", Cwd: dir}.CheckCommand()
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Equal(t, "stat "+filepath.Join(dir, "bin/missing")+": no such file or directory", err.Error())
}
