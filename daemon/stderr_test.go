//go:build unix

package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/demoserver"
)

// Before the fix, an upstream's stderr was logged line by line without a
// bound: 216 MiB of log in 10 s from one chatty upstream, and a failing
// Node upstream's 15-line stack trace made 15 log records at each retry.
// Now a burst is one record, a line is cut at 2 KiB, and a server gets at
// most 100 lines per 10 s, with one summary of what was left out; the
// other servers keep serving.
func TestChattyUpstreamStderrIsBounded(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits for the 10 s standard error interval")
	}
	self, err := os.Executable()
	require.NoError(t, err)
	if strings.Contains(self, "'") {
		t.Skipf("skipped: path %q has a quote", self)
	}
	script := filepath.Join(t.TempDir(), "chatty.sh")
	body := "#!/bin/sh\n" +
		"printf 'Error: boom\\n    at connect (db.js:1:1)\\n    at main (index.js:2:2)\\n' >&2; sleep 1\n" +
		"head -c 100000 /dev/zero | tr '\\0' x >&2; echo >&2\n" +
		"yes 'chatty line with some padding' | head -n 200000 >&2\n" +
		"exec '" + self + "'\n"
	require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
	cfg := baseConfig()
	set(cfg, "mcpServers.chatty", map[string]any{"command": script, "env": map[string]any{demoserver.ChildEnv: "1"}})
	r := start(t, cfg)

	r.waitLog(`msg="upstream stderr: Error: boom\n    at connect (db.js:1:1)\n    at main (index.js:2:2)" component=upstream server=chatty`)
	r.waitLog(`msg="upstream stderr: xxxx`)
	r.waitLog("[97952 bytes cut]")
	// The summary comes at the end of the 10 s interval.
	r.waitLog(`standard error left out: over 100 lines in 10s]`)
	logs := r.logs.String()
	// 100 lines passed: the trace's 3, the long one, about 96 of the flood
	// (a pause within the long line, on a loaded machine, makes it two).
	require.Regexp(t, `\[wasmhost: 1999\d\d more lines \(57\d{5} bytes\) of server \\"chatty\\"'s standard error left out`, logs)
	require.LessOrEqual(t, strings.Count(logs, "chatty line"), 96, "lines passed on beyond the budget")
	require.Less(t, len(logs), 1<<20, "the log grew past a MiB")
	for _, s := range r.state().Sessions {
		for _, b := range s.Servers {
			require.Equal(t, "ready", b.EntryState, "%s/%s: %s", s.Name, b.Server, b.Error)
		}
	}
}
