package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/conformance"
	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/internal/procgroup"
	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"
)

// demoHelper is set in a child of this binary that serves as an upstream
// (TestHelperDemoServer): WASMHOST_CLI_DEMO_HELPER=1 in its environment.
// TestMain sets that variable in this process for the children every test
// starts, so tests may run in parallel without t.Setenv.
var demoHelper bool

// bobTokenEnv holds bob's token in demoConfig's sessions (tokenEnv), set
// once for the whole process.
const (
	bobTokenEnv = "WASMHOST_TEST_BOB_TOKEN"
	bobToken    = "bob-token-0123456789abcdef"
)

// TestMain points the compilation cache at the one kept between runs
// (host.DefaultCacheDir), which the daemon's and host's tests share, for
// this binary and every process it starts, so the default plugin compiles
// once, not once per command or per run; a test whose subject is the cache
// gives a directory of its own. It sets the environment the tests'
// children need once, before any test runs.
func TestMain(m *testing.M) {
	procgroup.Main() // this binary supervises the upstreams it runs, as wasmhost does
	mcptest.RunSlowIfChild()
	if os.Getenv(asCLIEnv) == "1" {
		// This binary stands in for wasmhost in a scaffold's make test
		// (cliWrapper): the command line, with the cache dir it was given.
		os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	if os.Getenv("WASMHOST_CLI_DEMO_HELPER") == "1" {
		// This binary is a child serving as an upstream (TestHelperDemoServer
		// exits the process): it uses its parent's cache, if any.
		demoHelper = true
		os.Exit(m.Run())
	}
	os.Setenv("WASMHOST_CLI_DEMO_HELPER", "1") // for the children: the upstreams `run -- CMD` starts inherit it
	os.Setenv(bobTokenEnv, bobToken)
	// No usable user cache directory (none, or read-only): one for this run.
	dir, removeCache := mcptest.CacheDir(host.DefaultCacheDir())
	os.Setenv(host.CacheDirEnv, dir)
	// The embedded plugin is compiled into the cache once, before any
	// test runs: tests run in parallel, and each (and each process one
	// starts) would otherwise compile it (minutes of CPU under -race)
	// while the cache does not hold it yet. With the cache warm it costs
	// one load. A failure is left to the tests to report.
	if p, err := loadDefault(context.Background(), host.Options{CacheDir: dir}); err == nil {
		_ = p.Close(context.Background())
	}
	code := m.Run()
	removeCache()
	os.Exit(code)
}

// readonlyWasm is testplugins/readonly-policy, a Go plugin.
var readonlyWasm = filepath.Join("..", "..", "testplugins", "readonly-policy", "readonly-policy.wasm")

// warmed runs warmPlugin's compilation once per plugin path.
var warmed mcptest.OnceByKey

// warmPlugin compiles the plugin at path (absolute) into the shared cache
// once per test process: tests in parallel that run the same Go plugin
// wait for that one compilation (minutes of CPU under -race) instead of
// each compiling it while the cache lacks it. With the cache warm it
// costs one load.
func warmPlugin(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, warmed.Do(path, func() error {
		p, err := host.LoadFile(context.Background(), path, host.Options{CacheDir: host.DefaultCacheDir(), CallTimeout: time.Minute})
		if err != nil {
			return err
		}
		return p.Close(context.Background())
	}), "compile %s", path)
}

// result is one in-process run of the command line.
type result struct {
	code        int
	out, errOut string
}

func runCLI(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(t.Context(), args, strings.NewReader(stdin), &out, &errOut)
	return result{code: code, out: out.String(), errOut: errOut.String()}
}

const defaultKey = `{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}`

// notWasm writes a file that is not a WebAssembly module.
func notWasm(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "plugin.wasm")
	require.NoError(t, os.WriteFile(p, []byte("this is not wasm\n"), 0o644))
	return p
}

// defaultWasmFile writes the embedded default plugin to a file.
func defaultWasmFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy-default.wasm")
	require.NoError(t, os.WriteFile(p, policydefault.Wasm, 0o644))
	return p
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestUsage(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "usage: wasmhost COMMAND")

	r = runCLI(t, "", "help")
	assert.Equal(t, exitOK, r.code)
	for _, c := range commands {
		assert.Contains(t, r.out, "  "+c.name+" ")
	}

	r = runCLI(t, "", "help", "key")
	assert.Equal(t, exitOK, r.code)
	assert.Contains(t, r.errOut, "usage: wasmhost key", "help COMMAND is COMMAND -h")
	for _, h := range []string{"help", "-h", "--help"} {
		r = runCLI(t, "", "help", h)
		assert.Equal(t, exitOK, r.code, "help %s", h)
		assert.Contains(t, r.out, "usage: wasmhost COMMAND", "help %s is help", h)
	}
	r = runCLI(t, "", "help", "frobnicate")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, `unknown command "frobnicate"`)

	r = runCLI(t, "", "frobnicate")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, `unknown command "frobnicate"`)

	r = runCLI(t, "", "key", "-h")
	assert.Equal(t, exitOK, r.code)
	assert.Contains(t, r.errOut, "-plugin FILE")

	r = runCLI(t, "", "key", "--no-such-flag")
	assert.Equal(t, exitUsage, r.code)

	// A command without flags shows no empty flags section.
	r = runCLI(t, "", "digest", "-h")
	assert.Equal(t, exitOK, r.code)
	assert.Equal(t, "usage: wasmhost digest FILE\n", r.errOut)
	r = runCLI(t, "", "demo-server", "-h")
	assert.Equal(t, exitOK, r.code)
	assert.Equal(t, "usage: wasmhost demo-server\n", r.errOut)
}

func TestKey(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "key", "{}")
	require.Equal(t, exitOK, r.code, r.errOut)
	assert.Equal(t, "canonical: "+defaultKey+"\nkey: "+defaultKey+"\n", r.out)

	r = runCLI(t, ` {"includeTools": ["b", "a(x)", "b"], "trust": false} `+"\n", "key", "-")
	require.Equal(t, exitOK, r.code, r.errOut)
	want := `{"trust":false,"alwaysLoadTools":false,"includeTools":["a","b"],"excludeTools":[]}`
	assert.Equal(t, "canonical: "+want+"\nkey: "+want+"\n", r.out)

	// Flags may follow arguments.
	settingsFile := filepath.Join(t.TempDir(), "s.json")
	require.NoError(t, os.WriteFile(settingsFile, []byte(`{"alwaysLoadTools": true}`), 0o644))
	r = runCLI(t, "", "key", "@"+settingsFile, "--json")
	require.Equal(t, exitOK, r.code, r.errOut)
	var got struct {
		Canonical json.RawMessage `json:"canonical"`
		Key       string          `json:"key"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &got))
	want = `{"trust":null,"alwaysLoadTools":true,"includeTools":null,"excludeTools":[]}`
	assert.Equal(t, want, got.Key)
	assert.JSONEq(t, want, string(got.Canonical))

	// No argument reads standard input too.
	r = runCLI(t, "{}", "key")
	require.Equal(t, exitOK, r.code, r.errOut)
	assert.Contains(t, r.out, "key: "+defaultKey)
}

// TestCompileTimeoutFlag: --compile-timeout reaches the host, so an
// operator can bound a plugin's compilation past the module limits. The
// plugin is the small AssemblyScript one: a compilation the timeout
// abandons runs on to its end in the background, which for the embedded
// plugin under -race is minutes of CPU.
func TestCompileTimeoutFlag(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "key", "--plugin", asWasm, "--cache-dir", "", "--compile-timeout", "1ns", "{}")
	assert.NotEqual(t, exitOK, r.code, r.errOut)
	assert.Contains(t, r.errOut, "not compiled within the compile timeout of 1ns")

	r = runCLI(t, "", "key", "--compile-timeout", "-1s", "{}")
	assert.NotEqual(t, exitOK, r.code)
	assert.Contains(t, r.errOut, "--compile-timeout -1s: must be from 0")
}

func TestKeyErrors(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "key", `{"trust": "false"}`)
	assert.Equal(t, exitFail, r.code)
	assert.Empty(t, r.out)
	assert.Contains(t, r.errOut, "wasmhost key: settings refused: trust: expected a boolean or null, got a string")

	r = runCLI(t, "", "key", `{"trust": `)
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "settings are not valid JSON: at byte 9: unexpected end of JSON input")

	r = runCLI(t, "", "key", `{"trust": tru}`)
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "settings are not valid JSON: at byte 14: invalid character '}' in literal true (expecting 'e')")

	// Nothing on standard input: say where settings go, not that "" is
	// bad JSON.
	r = runCLI(t, "", "key")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, `wasmhost key: no settings: give them as an argument ('{"trust":true}'), as @FILE, or on standard input`)

	r = runCLI(t, "", "key", "@/does/not/exist.json")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "/does/not/exist.json")

	r = runCLI(t, "", "key", "{}", "{}")
	assert.Equal(t, exitUsage, r.code)

	r = runCLI(t, "", "key", "--plugin", notWasm(t), "{}")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "load plugin")
	assert.Contains(t, r.errOut, host.ErrNotWasm.Error())

	r = runCLI(t, "", "key", "--pin", strings.Repeat("0", 64), "{}")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, host.ErrDigestMismatch.Error())
}

// TestKeyWithPluginFlags: the plugin flags reach the host. The plugin is
// the AssemblyScript build of the default policy (same answers), which
// compiles into the fresh cache in a fraction of the embedded one's time.
func TestKeyWithPluginFlags(t *testing.T) {
	t.Parallel()
	wasm, err := os.ReadFile(asWasm)
	require.NoError(t, err)
	cache := t.TempDir()
	r := runCLI(t, "", "key", "--plugin", asWasm, "--pin", sha256Hex(wasm),
		"--memory-mib", "64", "--timeout", "5s", "--cache-dir", cache, `{"excludeTools": ["z", "a"]}`)
	require.Equal(t, exitOK, r.code, r.errOut)
	assert.Contains(t, r.out, `key: {"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":["a","z"]}`)
	entries, err := os.ReadDir(cache)
	require.NoError(t, err)
	assert.NotEmpty(t, entries, "--cache-dir holds the compiled plugin")

	r = runCLI(t, "", "key", "--memory-mib", "1", "{}")
	assert.Equal(t, exitUsage, r.code, "a 1 MiB cap cannot hold the default plugin")
	assert.Contains(t, r.errOut, "load plugin")

	// --timeout takes what a config's policy.timeoutMs takes.
	for _, bad := range []string{"-1s", "500us", "700s"} {
		r = runCLI(t, "", "key", "--timeout", bad, "{}")
		assert.Equal(t, exitUsage, r.code, bad)
		assert.Contains(t, r.errOut, "--timeout", bad)
		assert.Contains(t, r.errOut, "must be from 1ms to 10m0s", bad)
	}
}

// What a plugin writes to standard output or error reaches the terminal
// with --log-level debug, so an author can debug with prints.
func TestKeyLogLevelDebugShowsPluginOutput(t *testing.T) {
	t.Parallel()
	script, err := filepath.Abs("../../testplugins/wat/script.wasm")
	require.NoError(t, err)
	r := runCLI(t, "", "key", "--plugin", script, `"G"`)
	require.Equal(t, exitOK, r.code, r.errOut)
	assert.NotContains(t, r.errOut, "written to stderr", "quiet by default")

	r = runCLI(t, "", "key", "--plugin", script, "--log-level", "debug", `"G"`)
	require.Equal(t, exitOK, r.code, r.errOut)
	assert.Contains(t, r.errOut, `line="written to stderr"`)

	r = runCLI(t, "", "key", "--log-level", "loud", "{}")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "-log-level")
}

func TestProject(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "project", "--settings", `{"excludeTools": ["write_file"], "trust": true}`,
		"--snapshot", "@testdata/snapshot.json")
	require.Equal(t, exitOK, r.code, r.errOut)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.out), &got))
	want := map[string]any{
		"tools":     []any{map[string]any{"name": "read_file", "trust": true, "alwaysLoad": false}},
		"prompts":   []any{"summarize"},
		"resources": []any{"file:///notes.txt"},
	}
	assert.Empty(t, cmp.Diff(want, got), "(-want +got)")

	// Snapshot on standard input, default settings, --full.
	snap, err := os.ReadFile("testdata/snapshot.json")
	require.NoError(t, err)
	r = runCLI(t, string(snap), "project", "--snapshot", "-", "--full")
	require.Equal(t, exitOK, r.code, r.errOut)
	var full struct {
		conformance.Projected
		Full struct {
			Tools []struct {
				Name        string         `json:"name"`
				Description string         `json:"description"`
				Meta        map[string]any `json:"_meta"`
			} `json:"tools"`
			Prompts   []map[string]any `json:"prompts"`
			Resources []map[string]any `json:"resources"`
		} `json:"full"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &full))
	assert.Len(t, full.Tools, 2)
	require.Len(t, full.Full.Tools, 2)
	assert.Equal(t, "Read a file", full.Full.Tools[0].Description)
	assert.Equal(t, map[string]any{"wasmhost/trust": false, "wasmhost/alwaysLoad": false}, full.Full.Tools[0].Meta)
	assert.Len(t, full.Full.Prompts, 1)
	assert.Len(t, full.Full.Resources, 1)
}

func TestProjectErrors(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "project", "--settings", `{"includeTools": "read_file"}`, "--snapshot", "@testdata/snapshot.json")
	assert.Equal(t, exitFail, r.code)
	assert.Contains(t, r.errOut, "includeTools")

	r = runCLI(t, "", "project", "--settings", "{}")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "--snapshot is required")

	r = runCLI(t, "", "project", "--snapshot", `{"tools": [{"description": "no name"}]}`)
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, `snapshot: tools[0]: missing "name"`)

	r = runCLI(t, "", "project", "--snapshot", "-", "--settings", "-")
	assert.Equal(t, exitUsage, r.code)

	r = runCLI(t, "", "project", "--plugin", notWasm(t), "--snapshot", "{}")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "load plugin")
}

func lines(s string) []string {
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

func TestConformancePasses(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs whole golden suites")
	}
	r := runCLI(t, "", "conformance", "../../conformance/testdata/load/a")
	require.Equal(t, exitOK, r.code, r.errOut)
	assert.Equal(t, "0 passed, 0 failed\n", r.out)

	r = runCLI(t, "", "conformance", "-v", "testdata/failing.json", "--plugin", defaultWasmFile(t))
	require.Equal(t, exitFail, r.code, r.errOut)
	l := lines(r.out)
	require.Len(t, l, 3)
	assert.Equal(t, "PASS testdata/failing.json: default (canonical)", l[0])
	assert.Equal(t, "1 passed, 1 failed", l[2])
}

func TestConformanceFails(t *testing.T) {
	t.Parallel()
	jsonFile := filepath.Join(t.TempDir(), "report.json")
	r := runCLI(t, "", "conformance", "--json", jsonFile, "testdata/failing.json")
	require.Equal(t, exitFail, r.code, r.errOut)
	l := lines(r.out)
	require.Len(t, l, 2, r.out)
	assert.Equal(t, `FAIL testdata/failing.json: wrong on purpose (canonical): canonical form differs: `+
		`want {"trust":false,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}; `+
		`got {"trust":true,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}`, l[0])
	assert.Equal(t, "1 passed, 1 failed", l[1])

	b, err := os.ReadFile(jsonFile)
	require.NoError(t, err)
	var rep conformance.Report
	require.NoError(t, json.Unmarshal(b, &rep))
	assert.Equal(t, 1, rep.Passed)
	assert.Equal(t, 1, rep.Failed)
	assert.Equal(t, "policy-default", rep.Policy.Name)
	assert.Equal(t, sha256Hex(policydefault.Wasm), rep.Digest)
	require.Len(t, rep.Results, 2)
	assert.False(t, rep.Results[1].Passed)
	assert.Equal(t, "wrong on purpose", rep.Results[1].Case)
	assert.Contains(t, rep.Results[1].Want, `"trust":false`)
}

// TestConformanceReportInSuiteDir: a --json report written into the suite
// directory is not read as a (broken) suite by the next run.
func TestConformanceReportInSuiteDir(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs whole golden suites")
	}
	dir := t.TempDir()
	b, err := os.ReadFile("../../conformance/golden/default/trust.json")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "trust.json"), b, 0o644))
	report := filepath.Join(dir, "report.json")
	first := runCLI(t, "", "conformance", "--json", report, dir)
	require.Equal(t, exitOK, first.code, first.errOut)
	second := runCLI(t, "", "conformance", "--json", report, dir)
	require.Equal(t, exitOK, second.code, second.out)
	assert.Equal(t, first.out, second.out)
}

func TestConformanceExit2(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "conformance", "testdata/no-such-dir")
	assert.Equal(t, exitUsage, r.code)
	assert.Empty(t, r.out)
	assert.Contains(t, r.errOut, "testdata/no-such-dir")

	r = runCLI(t, "", "conformance", "--plugin", notWasm(t), "testdata/failing.json")
	assert.Equal(t, exitUsage, r.code)
	assert.Empty(t, r.out)
	assert.Contains(t, r.errOut, "load plugin")
	assert.Contains(t, r.errOut, host.ErrNotWasm.Error())

	r = runCLI(t, "", "conformance", "--plugin", filepath.Join(t.TempDir(), "missing.wasm"), "testdata/failing.json")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "missing.wasm")

	r = runCLI(t, "", "conformance", t.TempDir())
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, conformance.ErrNoSuites.Error())

	r = runCLI(t, "", "conformance")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "no suite path given")

	r = runCLI(t, "", "conformance", "--json", filepath.Join(t.TempDir(), "no", "dir", "r.json"), "testdata/failing.json")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "write JSON report")
	l := lines(r.out)
	require.NotEmpty(t, l, "the text report is printed all the same")
	assert.Regexp(t, `^\d+ passed, [1-9]\d* failed$`, l[len(l)-1])
	assert.Contains(t, r.out, "FAIL ")
}

func TestConformancePublicSuite(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the public suite")
	}
	r := runCLI(t, "", "conformance", "../../conformance/golden/default")
	require.Equal(t, exitOK, r.code, r.out+r.errOut)
	var l []string
	for _, line := range lines(r.out) {
		if strings.HasPrefix(line, "WARN ") {
			// The default policy does not want tool annotations, which
			// fields-unchanged.json gives to show they pass through.
			assert.Contains(t, line, "fields-unchanged.json")
			assert.Contains(t, line, `does not want "toolAnnotations"`)
			continue
		}
		l = append(l, line)
	}
	require.Len(t, l, 1, r.out)
	assert.Regexp(t, `^[1-9][0-9]* passed, 0 failed$`, l[0])
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "version")
	require.Equal(t, exitOK, r.code, r.errOut)
	l := lines(r.out)
	require.Len(t, l, 5, r.out)
	assert.Regexp(t, `^wasmhost \S+ \(go1\.`, l[0])
	assert.Equal(t, "abi: v1", l[1])
	assert.Equal(t, "plugin: embedded:policy-default", l[2])
	assert.Equal(t, "plugin handshake: policy-default 1.0.0 (abi 1)", l[3])
	assert.Equal(t, "plugin sha256: "+sha256Hex(policydefault.Wasm), l[4])

	r = runCLI(t, "", "version", "--plugin", notWasm(t))
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "load plugin")
}

func TestDigest(t *testing.T) {
	t.Parallel()
	wasm := defaultWasmFile(t)
	r := runCLI(t, "", "digest", wasm)
	require.Equal(t, exitOK, r.code, r.errOut)
	assert.Equal(t, sha256Hex(policydefault.Wasm)+"\n", r.out)

	p, err := host.LoadFile(t.Context(), wasm, host.Options{PinSHA256: strings.TrimSpace(r.out), CacheDir: host.DefaultCacheDir()})
	require.NoError(t, err, "the printed digest must be what a pin accepts")
	assert.Equal(t, strings.TrimSpace(r.out), p.Digest())
	require.NoError(t, p.Close(t.Context()))

	r = runCLI(t, "", "digest", filepath.Join(t.TempDir(), "missing.wasm"))
	assert.Equal(t, exitUsage, r.code)
	r = runCLI(t, "", "digest")
	assert.Equal(t, exitUsage, r.code)
}

func TestInspect(t *testing.T) {
	t.Parallel()
	wasm := defaultWasmFile(t)
	r := runCLI(t, "", "inspect", wasm)
	require.Equal(t, exitOK, r.code, r.out+r.errOut)
	assert.Contains(t, r.out, "file: "+wasm+"\n")
	assert.Contains(t, r.out, "sha256: "+sha256Hex(policydefault.Wasm)+"\n")
	assert.Regexp(t, `(?m)^data segments: [1-9]\n`, r.out, "the committed default plugin is packed")
	assert.Contains(t, r.out, "handshake: policy-default 1.0.0 (abi 1)\noptional exports: project_batch,wasmhost_alloc,canonicalize_direct,project_direct,project_batch_direct\n")
	assert.Regexp(t, `(?m)^exports:\n(  .*\n)*  func canonicalize \(\) -> i32\n`, r.out)
	assert.Regexp(t, `(?m)^exports:\n(  .*\n)*  func project_batch \(\) -> i32\n`, r.out)
	assert.Regexp(t, `(?m)^imports:\n(  .*\n)*  func "extism:host/env" "input_length"`, r.out)
	assert.True(t, strings.HasSuffix(r.out, "accepted: yes\n"), r.out)

	r = runCLI(t, "", "inspect", "--json", wasm)
	require.Equal(t, exitOK, r.code, r.errOut)
	var insp host.Inspection
	require.NoError(t, json.Unmarshal([]byte(r.out), &insp))
	assert.True(t, insp.Accepted)
	assert.Equal(t, sha256Hex(policydefault.Wasm), insp.SHA256)
	assert.Equal(t, []string{"project_batch", "wasmhost_alloc", "canonicalize_direct", "project_direct", "project_batch_direct"}, insp.OptionalExports)
	assert.Positive(t, insp.DataSegments)
	assert.Equal(t, insp.DataSegments, insp.Packed)

	// An unpacked module: inspect says what packing would do.
	unpacked := filepath.Join(t.TempDir(), "unpacked.wasm")
	require.NoError(t, os.WriteFile(unpacked, twoSegments, 0o644))
	r = runCLI(t, "", "inspect", unpacked)
	assert.Equal(t, exitFail, r.code, "no ABI exports")
	assert.Contains(t, r.out, "data segments: 2 (wasmhost pack would leave 1, for faster loads)\n")

	bad := notWasm(t)
	r = runCLI(t, "", "inspect", bad)
	assert.Equal(t, exitFail, r.code)
	assert.Contains(t, r.out, "handshake: none\noptional exports: none\n")
	assert.NotContains(t, r.out, "data segments:", "bytes that are not a module have none to count")
	assert.NotContains(t, r.out, "metered:", "nor anything to meter")
	assert.Contains(t, r.out, fmt.Sprintf("accepted: no: plugin %q: ", bad), "the refusal names the file")
	assert.Contains(t, r.out, host.ErrNotWasm.Error())

	r = runCLI(t, "", "inspect", filepath.Join(t.TempDir(), "missing.wasm"))
	assert.Equal(t, exitUsage, r.code)

	// A plugin that loads but fails the daemon's trial calls is not
	// accepted: wasmhost run would refuse it. (script.wasm answers
	// canonicalize with each settings object: {} is neither key nor error.)
	script, err := filepath.Abs("../../testplugins/wat/script.wasm")
	require.NoError(t, err)
	r = runCLI(t, "", "inspect", script)
	assert.Equal(t, exitFail, r.code, r.out+r.errOut)
	assert.Contains(t, r.out, fmt.Sprintf("accepted: no: plugin %q: trial calls (settings {}): canonicalize settings: ", script))
	assert.Contains(t, r.out, host.ErrBadOutput.Error())
}

// twoSegments is a module with one memory page and two data segments two
// bytes apart, which wasmhost pack joins.
var twoSegments = []byte("\x00asm\x01\x00\x00\x00" +
	"\x05\x03\x01\x00\x01" + // one memory page
	"\x0b\x0f\x02" + // data section, 15 bytes: two segments
	"\x00\x41\x00\x0b\x02ab" + // "ab" at 0
	"\x00\x41\x04\x0b\x02cd") // "cd" at 4

func TestPack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := filepath.Join(dir, "p.wasm")
	require.NoError(t, os.WriteFile(in, twoSegments, 0o600))

	r := runCLI(t, "", "pack", in)
	require.Equal(t, exitOK, r.code, r.errOut)
	assert.Equal(t, in+": 2 data segments -> 1 (2 zero bytes written), 30 -> 27 bytes\n", r.out)
	packed, err := os.ReadFile(in)
	require.NoError(t, err)
	assert.Contains(t, string(packed), "ab\x00\x00cd")
	fi, err := os.Stat(in)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the file keeps its permissions")

	// -o leaves the input alone; --gap 1 does not join a gap of 2.
	orig := filepath.Join(dir, "orig.wasm")
	require.NoError(t, os.WriteFile(orig, twoSegments, 0o644))
	r = runCLI(t, "", "pack", "--gap", "1", "-o", filepath.Join(dir, "out.wasm"), orig)
	require.Equal(t, exitOK, r.code, r.errOut)
	assert.Contains(t, r.out, "2 data segments -> 2")
	b, err := os.ReadFile(orig)
	require.NoError(t, err)
	assert.Equal(t, twoSegments, b)

	// Bad input: a clear error naming the file, and the file untouched.
	bad := notWasm(t)
	before, err := os.ReadFile(bad)
	require.NoError(t, err)
	r = runCLI(t, "", "pack", bad)
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "wasmhost pack: "+bad+": wasmpack: malformed module")
	after, err := os.ReadFile(bad)
	require.NoError(t, err)
	assert.Equal(t, before, after)

	// A write that fails (the target is a directory) leaves no temporary
	// file behind.
	target := filepath.Join(dir, "sub")
	require.NoError(t, os.Mkdir(target, 0o755))
	r = runCLI(t, "", "pack", "-o", target, orig)
	assert.Equal(t, exitUsage, r.code)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		assert.False(t, strings.HasPrefix(e.Name(), "."), "temporary file left behind: %s", e.Name())
	}

	assert.Equal(t, exitUsage, runCLI(t, "", "pack").code)
	assert.Equal(t, exitUsage, runCLI(t, "", "pack", "--gap", "-1", in).code)
}

func TestParseArgsInterspersed(t *testing.T) {
	t.Parallel()
	var s stdio
	s.err = &bytes.Buffer{}
	fs := newFlagSet("x", "", s)
	v := fs.Bool("v", false, "")
	name := fs.String("name", "", "")
	pos, err := parseArgs(fs, []string{"a", "-v", "b", "--name", "n", "-", "--", "-v", "c"})
	require.NoError(t, err)
	assert.True(t, *v)
	assert.Equal(t, "n", *name)
	assert.Equal(t, []string{"a", "b", "-", "-v", "c"}, pos)
}
