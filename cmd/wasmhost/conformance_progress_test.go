package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loopSuite writes a suite of one passing case and n cases on which the
// hostile plugin loops until its call times out.
func loopSuite(t *testing.T, n int) string {
	t.Helper()
	cases := []string{`{"name": "answers", "settings": {}, "canonical": ` + defaultKey + `}`}
	for i := range n {
		cases = append(cases, `{"name": "loops `+string(rune('a'+i))+`", "settings": {"mode": "loop"}, "canonical": {}}`)
	}
	dir := t.TempDir()
	suite := `{"suite": "loops", "cases": [` + strings.Join(cases, ",\n") + `]}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "loops.json"), []byte(suite), 0o644))
	return dir
}

// TestConformanceDefaultTimeoutAndProgress: without --timeout each plugin
// call may take 2 s, and a case that runs past it fails saying so; a run
// that takes longer than 3 s (two cases of at least 2 s each) shows its
// progress on standard error and leaves standard output as it is: the
// failing lines and the summary last.
func TestConformanceDefaultTimeoutAndProgress(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two plugin calls into their 2 s time limit")
	}
	dir := loopSuite(t, 2)
	start := time.Now()
	r := runBounded(t, 3*time.Minute, "conformance", "--plugin", hostileWasm, dir)
	took := time.Since(start)
	require.Equal(t, exitFail, r.code, "%s%s", r.out, r.errOut)
	fails, passed, failed := summary(t, r.out)
	assert.Equal(t, 1, passed)
	assert.Equal(t, 2, failed)
	for _, f := range fails {
		assert.Contains(t, f, "plugin call timed out (limit 2s)")
		assert.Contains(t, f, "(each call may take 2s: raise it with --timeout)")
	}
	require.GreaterOrEqual(t, took, 4*time.Second)

	// The plugin has no direct exports: each case runs once.
	last := regexp.MustCompile(`(?m)^conformance: 3/3 cases done \(2 failed\) in \d+(\.\d)?s$`)
	assert.Regexp(t, last, r.errOut, "the closing progress line")
	ticks := regexp.MustCompile(`(?m)^conformance: [0-3]/3 cases done \([0-2] failed\) after \d+(\.\d)?s(, running .*loops\.json: (answers|loops [ab]))?$`)
	assert.NotEmpty(t, ticks.FindAllString(r.errOut, -1), "a progress line after 3 s:\n%s", r.errOut)
	for _, l := range lines(r.errOut) {
		if strings.HasPrefix(l, "conformance: ") {
			assert.True(t, ticks.MatchString(l) || last.MatchString(l), "%q", l)
		}
	}
	assert.NotContains(t, r.out, "conformance: ", "progress stays off standard output")
}

// TestConformanceTimeoutFlag: --timeout sets the per-call limit, --progress
// 0 turns progress off, and -h documents both defaults.
func TestConformanceTimeoutFlag(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a plugin call into its time limit")
	}
	dir := loopSuite(t, 1)
	r := runBounded(t, 3*time.Minute, "conformance", "--plugin", hostileWasm, "--timeout", "200ms", "--progress", "0", dir)
	require.Equal(t, exitFail, r.code, "%s%s", r.out, r.errOut)
	fails, _, failed := summary(t, r.out)
	require.Equal(t, 1, failed)
	assert.Contains(t, fails[0], "plugin call timed out (limit 200ms) (each call may take 200ms: raise it with --timeout)")
	assert.NotContains(t, r.errOut, "conformance: ")

	r = runCLI(t, "", "conformance", "-h")
	require.Equal(t, exitOK, r.code)
	assert.Regexp(t, `-timeout duration\n\s+time limit per plugin call, e.g. 500ms; a case whose call runs longer fails \(default 2s\)`, r.errOut)
	assert.Regexp(t, `-progress D\n\s+show progress on standard error once the run has taken D, then every D \(0: never\) \(default 3s\)`, r.errOut)
}
