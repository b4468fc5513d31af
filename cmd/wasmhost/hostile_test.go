package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/conformance"
)

// The misbehaving Go plugins of testplugins/hostile-go (see its README).
var (
	hostileWasm          = filepath.Join("..", "..", "testplugins", "hostile-go", "hostile", "hostile.wasm")
	nondeterministicWasm = filepath.Join("..", "..", "testplugins", "hostile-go", "nondeterministic", "nondeterministic.wasm")
	defaultSuite         = filepath.Join("..", "..", "conformance", "golden", "default")
)

// runBounded runs the command line like runCLI, but fails the test if it
// has not returned within limit (plus a grace period for the command to
// notice its context ending) and checks the context did not end first.
func runBounded(t *testing.T, limit time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	done := make(chan result, 1)
	go func() {
		var out, errOut bytes.Buffer
		code := run(ctx, args, strings.NewReader(""), &out, &errOut)
		done <- result{code: code, out: out.String(), errOut: errOut.String()}
	}()
	select {
	case r := <-done:
		require.NoError(t, ctx.Err(), "wasmhost %s ran past %v", strings.Join(args, " "), limit)
		return r
	case <-time.After(limit + 30*time.Second):
		t.Fatalf("wasmhost %s hung", strings.Join(args, " "))
		return result{}
	}
}

var summaryLine = regexp.MustCompile(`^([0-9]+) passed, ([0-9]+) failed$`)

// summary checks the report's shape (one line per failing case, then the
// summary alone; WARN lines, about inputs the plugin does not want, are
// left out) and returns the failing lines and the two counts.
func summary(t *testing.T, out string) (fails []string, passed, failed int) {
	t.Helper()
	l := lines(out)
	m := summaryLine.FindStringSubmatch(l[len(l)-1])
	require.NotNil(t, m, "last line %q", l[len(l)-1])
	_, _ = fmt.Sscan(m[1], &passed)
	_, _ = fmt.Sscan(m[2], &failed)
	for _, f := range l[:len(l)-1] {
		if !strings.HasPrefix(f, "WARN ") {
			fails = append(fails, f)
		}
	}
	for _, f := range fails {
		require.True(t, strings.HasPrefix(f, "FAIL "), "not a FAIL line: %q", f)
	}
	require.Len(t, fails, failed)
	return fails, passed, failed
}

// tagSuite writes a copy of the golden files of the default suite named in
// files (all of them when files is nil) into a new directory, with "mode"
// (and "in" when not empty) added to every settings object that is a JSON
// object, in settings, same and differ; limit > 0 keeps only the first
// limit cases of each file. The default policy ignores the two keys, so the
// tagged suite holds for a plugin that answers like it. untagged holds the
// cases ("FILE: CASE") left without a tag: their settings are not objects.
func tagSuite(t *testing.T, mode, in string, limit int, files ...string) (dir string, untagged map[string]bool) {
	t.Helper()
	if files == nil {
		paths, err := filepath.Glob(filepath.Join(defaultSuite, "*.json"))
		require.NoError(t, err)
		for _, p := range paths {
			files = append(files, filepath.Base(p))
		}
	}
	tag := fmt.Sprintf(`"mode":%q`, mode)
	if in != "" {
		tag += fmt.Sprintf(`,"in":%q`, in)
	}
	tagged := false
	tagOne := func(raw json.RawMessage) json.RawMessage {
		trimmed := bytes.TrimSpace(raw)
		if len(trimmed) == 0 || trimmed[0] != '{' {
			return raw
		}
		tagged = true
		rest := bytes.TrimSpace(trimmed[1:])
		if rest[0] == '}' {
			return json.RawMessage("{" + tag + "}")
		}
		return json.RawMessage("{" + tag + "," + string(rest))
	}
	dir, untagged = t.TempDir(), map[string]bool{}
	for _, name := range files {
		b, err := os.ReadFile(filepath.Join(defaultSuite, name))
		require.NoError(t, err)
		var suite map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(b, &suite))
		var cases []map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(suite["cases"], &cases))
		if limit > 0 && len(cases) > limit {
			cases = cases[:limit]
		}
		for _, c := range cases {
			tagged = false
			if s, ok := c["settings"]; ok {
				c["settings"] = tagOne(s)
			}
			for _, group := range []string{"same", "differ"} {
				g, ok := c[group]
				if !ok {
					continue
				}
				var items []json.RawMessage
				require.NoError(t, json.Unmarshal(g, &items))
				for i := range items {
					items[i] = tagOne(items[i])
				}
				c[group], err = json.Marshal(items)
				require.NoError(t, err)
			}
			if !tagged {
				var caseName string
				require.NoError(t, json.Unmarshal(c["name"], &caseName))
				untagged[name+": "+caseName] = true
			}
		}
		suite["cases"], err = json.Marshal(cases)
		require.NoError(t, err)
		out, err := json.Marshal(suite)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), out, 0o644))
	}
	return dir, untagged
}

// TestConformanceHostilePlugin runs the golden suite against the hostile
// plugin with every settings object tagged with one misbehaviour: the
// command reports each case's failure on one line and exits 1, never
// crashing or hanging. Tagged "good" or "slow" (a busy loop that finishes
// inside the limit), the plugin passes, which shows the tagging keeps the
// suite's meaning.
func TestConformanceHostilePlugin(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the hostile Go plugin's misbehaviours")
	}
	const limit = 5 * time.Minute
	// Calls that must succeed get a generous limit (a fresh instance of a
	// Go plugin under -race on a loaded machine); the loop gets a short one.
	const defaultTimeout = "1m"
	heavy := []string{"trust.json", "prompts-resources.json"} // canonical, same, differ and project cases
	tests := []struct {
		mode, in string
		timeout  string
		bound    time.Duration // the whole command's (0: limit)
		limit    int           // cases per file (0: all)
		files    []string      // nil: the whole suite
		msg      []string      // every failing line says one of these
	}{
		{mode: "good"},
		{mode: "slow", limit: 2, files: heavy},
		{mode: "panic", msg: []string{"plugin trapped"}},
		{mode: "panic", in: "project", files: heavy, msg: []string{"plugin trapped"}},
		// The bomb grows memory to the 64 MiB cap: under -race on a loaded
		// machine that took longer than a short call limit, which would
		// end it before the memory limit this case is about.
		{mode: "bomb", timeout: "2m", bound: 10 * time.Minute, limit: 2, files: heavy, msg: []string{"plugin trapped"}},
		{mode: "recurse", limit: 2, files: heavy, msg: []string{"plugin trapped"}},
		{mode: "loop", timeout: "300ms", limit: 2, files: heavy, msg: []string{"plugin call timed out (limit 300ms)"}},
		// Writing 16 MiB from a Go guest under -race took more than 20 s on
		// a loaded machine, and the call then timed out before the output
		// limit refused it: the limit must be what ends it.
		{mode: "big", timeout: "2m", bound: 10 * time.Minute, limit: 2, files: heavy, msg: []string{"bytes of output, limit 16777216"}},
		{mode: "shape", files: heavy, msg: []string{"results for", "out of range"}},
		{mode: "fields", in: "canonicalize", files: heavy, msg: []string{"neither a key (keys are never empty) nor an error"}},
	}
	for _, tt := range tests {
		t.Run(tt.mode+"/"+tt.in, func(t *testing.T) {
			t.Parallel()
			dir, untagged := tagSuite(t, tt.mode, tt.in, tt.limit, tt.files...)
			timeout := tt.timeout
			if timeout == "" {
				timeout = defaultTimeout
			}
			jsonFile := filepath.Join(t.TempDir(), "report.json")
			bound := tt.bound
			if bound == 0 {
				bound = limit
			}
			r := runBounded(t, bound, "conformance", "--plugin", hostileWasm, "--memory-mib", "64",
				"--timeout", timeout, "--json", jsonFile, dir)
			fails, passed, failed := summary(t, r.out)
			t.Logf("%d passed, %d failed", passed, failed)
			if tt.msg == nil {
				require.Equal(t, exitOK, r.code, "%s%s", r.out, r.errOut)
				assert.Positive(t, passed)
				return
			}
			require.Equal(t, exitFail, r.code, "%s%s", r.out, r.errOut)
			require.Positive(t, failed)
			for _, f := range fails {
				found := false
				for _, m := range tt.msg {
					found = found || strings.Contains(f, m)
				}
				assert.True(t, found, "%q says none of %q", f, tt.msg)
			}

			var rep conformance.Report
			b, err := os.ReadFile(jsonFile)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &rep))
			assert.Equal(t, "hostile", rep.Policy.Name)
			for _, res := range rep.Results {
				switch {
				case untagged[filepath.Base(res.File)+": "+res.Case]:
					assert.True(t, res.Passed, "untagged: %s", res)
				case tt.in == "project":
					assert.Equal(t, res.Kind == conformance.KindProject, !res.Passed, "%s", res)
				case tt.mode == "fields":
					assert.Equal(t, res.Kind == conformance.KindProject, res.Passed, "%s", res)
				default:
					assert.False(t, res.Passed, "%s", res)
				}
			}
		})
	}
}

// TestConformanceNondeterministicPlugin: the public suite run against a
// plugin whose keys change from call to call fails, and every failing case
// says it is nondeterministic; projections (deterministic) pass.
func TestConformanceNondeterministicPlugin(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the public suite against a Go plugin")
	}
	jsonFile := filepath.Join(t.TempDir(), "report.json")
	r := runBounded(t, 5*time.Minute, "conformance", "--plugin", nondeterministicWasm, "--timeout", "1m", "--json", jsonFile, defaultSuite)
	require.Equal(t, exitFail, r.code, "%s%s", r.out, r.errOut)
	fails, passed, failed := summary(t, r.out)
	require.Positive(t, failed)
	assert.Positive(t, passed)
	for _, f := range fails {
		assert.Contains(t, f, "nondeterministic", "%q", f)
	}

	var rep conformance.Report
	b, err := os.ReadFile(jsonFile)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	assert.Equal(t, "nondeterministic", rep.Policy.Name)
	for _, res := range rep.Results {
		switch res.Kind {
		case conformance.KindCanonical, conformance.KindSame, conformance.KindDiffer:
			assert.False(t, res.Passed, "a key was computed twice: %s", res)
		default:
			assert.True(t, res.Passed, "%s", res)
		}
	}
}

// TestKeyHostileModules: `wasmhost key` on the hostile modules of issue 25
// (testplugins/wat) under the reproducers' limits refuses each one in one
// line within the timeout plus a margin, and the process lives on.
// Package host's TestHostileModulesContained bounds their memory.
func TestKeyHostileModules(t *testing.T) {
	for _, tc := range []struct{ plugin, msg string }{
		{"table-grow-unbounded", "module past a load limit: "},
		{"table-huge-max", "module past a load limit: "},
		{"start-loop", "start function: plugin call timed out (limit 500ms)"},
	} {
		t.Run(tc.plugin, func(t *testing.T) {
			path := filepath.Join("..", "..", "testplugins", "wat", tc.plugin+".wasm")
			start := time.Now()
			r := runBounded(t, 30*time.Second, "key", "--plugin", path, "--memory-mib", "16", "--timeout", "500ms", "{}")
			assert.NotZero(t, r.code)
			assert.Contains(t, r.errOut, tc.msg)
			assert.Len(t, lines(r.errOut), 1, "a one-line refusal: %s", r.errOut)
			assert.Less(t, time.Since(start), 500*time.Millisecond+5*time.Second)
		})
	}
}
