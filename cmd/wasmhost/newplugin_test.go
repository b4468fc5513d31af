package main

import (
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/conformance"
)

// goCmd runs the go command in dir for the scaffolded module: module mode
// allowed to update go.mod/go.sum from the module cache, never the
// enclosing wasmhost workspace, never another toolchain.
func goCmd(t *testing.T, dir string, env []string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
}

// TestNewPluginBuildsAndPasses does what a plugin author does: scaffold,
// build the wasm with the standard toolchain, run the native tests and the
// scaffold's own golden suite through `wasmhost conformance`.
func TestNewPluginBuildsAndPasses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a wasm module with the go toolchain")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command in PATH")
	}
	dir := filepath.Join(t.TempDir(), "My Policy")
	r := runCLI(t, "", "new-plugin", dir)
	require.Equal(t, exitOK, r.code, r.errOut)
	for _, f := range []string{"go.mod", "go.sum", "main.go", "exports.go", "abi.go", "policy.go", "policy_test.go", "Makefile", "README.md", "golden/allow-list.json"} {
		assert.Contains(t, r.out, "created "+filepath.Join(dir, f)+"\n")
		assert.FileExists(t, filepath.Join(dir, f))
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	assert.Contains(t, string(gomod), "module example.com/my-policy\n")
	assert.Contains(t, string(gomod), "require github.com/extism/go-pdk v1.1.3\n")
	makefile, err := os.ReadFile(filepath.Join(dir, "Makefile"))
	require.NoError(t, err)
	assert.Contains(t, string(makefile), "GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o $(PLUGIN) .")
	assert.Contains(t, string(makefile), "rm -f $(PLUGIN)\n", "make build links afresh")
	assert.Contains(t, r.out, "\nnext: cd '"+dir+"' && make test", "quoted: the directory has a space")

	goCmd(t, dir, []string{"GOOS=wasip1", "GOARCH=wasm"}, "build", "-buildmode=c-shared", "-trimpath", "-o", "my-policy.wasm", ".")
	goCmd(t, dir, nil, "test", "./...")

	assert.Contains(t, string(makefile), "$(WASMHOST) pack $(PLUGIN)")
	wasm := filepath.Join(dir, "my-policy.wasm")
	// Pack it as its Makefile does: the packed module is what the checks
	// below load.
	before, err := os.ReadFile(wasm)
	require.NoError(t, err)
	r = runCLI(t, "", "pack", wasm)
	require.Equal(t, exitOK, r.code, r.errOut)
	assert.Regexp(t, `^.*my-policy\.wasm: \d{4,} data segments -> \d \(\d+ zero bytes written\), \d+ -> \d+ bytes\n$`, r.out)
	after, err := os.ReadFile(wasm)
	require.NoError(t, err)
	require.NotEqual(t, before, after)
	r = runCLI(t, "", "inspect", wasm)
	require.Equal(t, exitOK, r.code, r.out+r.errOut)
	assert.Contains(t, r.out, "handshake: my-policy 0.1.0 (abi 1)\n")

	r = runCLI(t, "", "conformance", "-v", "--plugin", wasm, filepath.Join(dir, "golden"))
	require.Equal(t, exitOK, r.code, r.out+r.errOut)
	suites, err := conformance.Load(filepath.Join(dir, "golden"))
	require.NoError(t, err)
	n := 0
	for _, s := range suites {
		n += len(s.Cases)
	}
	l := lines(r.out)
	assert.Len(t, l, n+1, "-v prints a line per case and the summary")
	assert.Equal(t, fmt.Sprintf("%d passed, 0 failed", n), l[len(l)-1])
	for _, kind := range []string{"canonical", "same", "differ", "project", "reject"} {
		assert.Contains(t, r.out, "("+kind+")\n", "the example suite has a %s case", kind)
	}
}

// TestNewPluginGoTestHelper follows docs/plugins.md, "From go test": a
// golden test through conformance.RunT in the scaffolded module, with
// wasmhost taken from a local checkout (this one) by `go mod edit
// -replace` and `go mod tidy`, as the guide says to where `go get` cannot
// fetch it. GOFLAGS is cleared, as an author's would be: with -mod=mod the
// go command would add the requirement by itself.
func TestNewPluginGoTestHelper(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a wasm module and a Go test with the go toolchain")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command in PATH")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "acme-policy")
	r := runCLI(t, "", "new-plugin", dir)
	require.Equal(t, exitOK, r.code, r.errOut)
	goCmd(t, dir, []string{"GOOS=wasip1", "GOARCH=wasm"}, "build", "-buildmode=c-shared", "-trimpath", "-o", "acme-policy.wasm", ".")
	golden := `package main_test // next to the scaffold's package main

import (
	"testing"

	"github.com/wasmhost/wasmhost/conformance"
)

func TestGolden(t *testing.T) {
	conformance.RunT(t, "acme-policy.wasm", "golden/")
}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "golden_test.go"), []byte(golden), 0o644))
	author := []string{"GOFLAGS="}

	// A replace directive alone does not make the module a dependency.
	goCmd(t, dir, author, "mod", "edit", "-replace", "github.com/wasmhost/wasmhost="+root)
	cmd := exec.CommandContext(t.Context(), "go", "test", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "go test with a replace but no require:\n%s", out)
	assert.Contains(t, string(out), "is replaced but not required")

	// go mod tidy writes the require line; then the golden test runs.
	goCmd(t, dir, author, "mod", "tidy")
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	assert.Contains(t, string(gomod), "github.com/wasmhost/wasmhost v0.0.0-00010101000000-000000000000")
	goCmd(t, dir, author, "test", "-count=1", "-run", "TestGolden", "./...")
	// The wasm build still needs nothing from wasmhost.
	goCmd(t, dir, append(author, "GOOS=wasip1", "GOARCH=wasm"), "build", "-buildmode=c-shared", "-trimpath", "-o", "acme-policy.wasm", ".")
}

func TestNewPluginRefuses(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("x"), 0o644))
	r := runCLI(t, "", "new-plugin", dir)
	assert.Equal(t, exitFail, r.code)
	assert.Contains(t, r.errOut, "exists and is not empty")
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	r = runCLI(t, "", "new-plugin", "--name", "Bad Name", filepath.Join(t.TempDir(), "p"))
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, `plugin name "Bad Name"`)

	r = runCLI(t, "", "new-plugin", "--module", "has space", filepath.Join(t.TempDir(), "p"))
	assert.Equal(t, exitUsage, r.code)

	r = runCLI(t, "", "new-plugin")
	assert.Equal(t, exitUsage, r.code)
}

func TestNewPluginNamesAndModule(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "x")
	r := runCLI(t, "", "new-plugin", "--name", "acme-allow", "--module", "github.com/acme/allow", dir)
	require.Equal(t, exitOK, r.code, r.errOut)
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(gomod), "module github.com/acme/allow\n"))
	exportsGo, err := os.ReadFile(filepath.Join(dir, "exports.go"))
	require.NoError(t, err)
	assert.Contains(t, string(exportsGo), `Name: "acme-allow"`)

	// The generated Go files are gofmt-clean.
	goFiles, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	assert.Len(t, goFiles, 5)
	for _, f := range goFiles {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		formatted, err := format.Source(src)
		require.NoError(t, err, f)
		assert.Equal(t, string(formatted), string(src), "%s is not gofmt-clean", f)
	}

	for in, want := range map[string]string{"My Policy": "my-policy", "__": "policy-plugin", "a.b_c": "a.b_c", "Ünï": "n"} {
		assert.Equal(t, want, deriveName(in), in)
	}
}

// TestNewPluginInCurrentDirectory: "new-plugin ." names the plugin after
// the directory it is run in, as for any other DIR.
func TestNewPluginInCurrentDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "acme-here")
	require.NoError(t, os.Mkdir(dir, 0o755))
	t.Chdir(dir)
	r := runCLI(t, "", "new-plugin", ".")
	require.Equal(t, exitOK, r.code, r.errOut)
	exportsGo, err := os.ReadFile(filepath.Join(dir, "exports.go"))
	require.NoError(t, err)
	assert.Contains(t, string(exportsGo), `Name: "acme-here"`)
	assert.Equal(t, "acme-here", deriveName("../acme-here/."))
}

// TestNewPluginHintQuotesPaths: the closing hint can be pasted into a
// shell when the directory has a space in its name.
func TestNewPluginHintQuotesPaths(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "my plugin")
	r := runCLI(t, "", "new-plugin", dir)
	require.Equal(t, exitOK, r.code, r.errOut)
	assert.Contains(t, r.out, "\nnext: cd '"+dir+"' && make test")
	assert.Equal(t, `'it'\''s'`, shellQuote("it's"))
	assert.Equal(t, "/usr/bin/wasmhost", shellQuote("/usr/bin/wasmhost"))
}

// TestMakeTestHint: new-plugin's closing hint names this binary for the
// scaffold's Makefile unless "wasmhost" on PATH is this binary.
func TestMakeTestHint(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	t.Setenv("PATH", t.TempDir())
	assert.Equal(t, "make test WASMHOST="+self, makeTestHint(), "no wasmhost on PATH")

	bin := t.TempDir()
	require.NoError(t, os.Symlink(self, filepath.Join(bin, "wasmhost")))
	t.Setenv("PATH", bin)
	assert.Equal(t, "make test", makeTestHint(), "wasmhost on PATH is this binary")

	other := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(other, "wasmhost"), []byte("#!/bin/sh\n"), 0o755))
	t.Setenv("PATH", other)
	assert.Equal(t, "make test WASMHOST="+self, makeTestHint(), "another wasmhost on PATH")
}
