package main

import (
	"encoding/json"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	t.Parallel()
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
	assert.Contains(t, string(makefile), "GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -buildvcs=false -o $(PLUGIN) .")
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
	assert.Contains(t, r.out, "handshake: my-policy 0.1.0 (abi 1), wants toolAnnotations\n")

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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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

	r = runCLI(t, "", "new-plugin", "--from", "strict", filepath.Join(t.TempDir(), "p"))
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, `--from "strict": the one policy to start from is "default"`)
	r = runCLI(t, "", "new-plugin", "--lang", "rust", filepath.Join(t.TempDir(), "p"))
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, `--lang "rust": use go or assemblyscript`)
	r = runCLI(t, "", "new-plugin", "--from", "default", "--lang", "assemblyscript", filepath.Join(t.TempDir(), "p"))
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.errOut, "the AssemblyScript plugin is always a copy of the default policy")
}

// TestNewPluginFromDefaultIsACopy: --from default writes the default
// policy's own source, renamed into the new module, gofmt-clean, and
// importing nothing from wasmhost; --lang assemblyscript the
// AssemblyScript default policy with its lockfile, renamed.
func TestNewPluginFromDefaultIsACopy(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "acme")
	r := runCLI(t, "", "new-plugin", "--from", "default", "--module", "github.com/acme/policy", dir)
	require.Equal(t, exitOK, r.code, r.errOut)
	src, err := os.ReadFile(filepath.Join("..", "..", "plugins", "policy-default", "internal", "policy", "policy.go"))
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(dir, "internal", "policy", "policy.go"))
	require.NoError(t, err)
	assert.Equal(t, string(src), string(got), "the rules are the default policy's, unchanged")
	mainGo, err := os.ReadFile(filepath.Join(dir, "main.go"))
	require.NoError(t, err)
	assert.Contains(t, string(mainGo), `"name":"acme","version":"0.1.0"`)
	assert.Contains(t, string(mainGo), "\t\"github.com/acme/policy/internal/abi\"\n\t\"github.com/acme/policy/internal/policy\"\n")
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return err
		}
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.NotContains(t, string(b), `"github.com/wasmhost/wasmhost`, p)
		formatted, err := format.Source(b)
		require.NoError(t, err, p)
		assert.Equal(t, string(formatted), string(b), "%s is not gofmt-clean", p)
		return nil
	})
	require.NoError(t, err)
	abiGo, err := os.ReadFile(filepath.Join(dir, "internal", "abi", "abi.go"))
	require.NoError(t, err)
	assert.Contains(t, string(abiGo), "const Version = 1\n")
	assert.Contains(t, string(abiGo), "const DirectFlagRefused = 2147483648\n")

	dir = filepath.Join(t.TempDir(), "acme-as")
	r = runCLI(t, "", "new-plugin", "--lang", "assemblyscript", dir)
	require.Equal(t, exitOK, r.code, r.errOut)
	for _, f := range []string{"package.json", "package-lock.json", "asconfig.json", "assembly/index.ts"} {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f)))
		require.NoError(t, err)
		assert.NotContains(t, string(b), "policy-default-as", f)
		assert.Contains(t, string(b), "acme-as", f)
	}
	var lock struct {
		Packages map[string]struct {
			Version, Integrity string
		} `json:"packages"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &lock))
	for _, pkg := range []string{"node_modules/assemblyscript", "node_modules/@extism/as-pdk"} {
		assert.NotEmpty(t, lock.Packages[pkg].Version, pkg)
		assert.True(t, strings.HasPrefix(lock.Packages[pkg].Integrity, "sha512-"), "%s is pinned by its hash", pkg)
	}
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	require.NoError(t, err)
	assert.Contains(t, string(readme), "`assemblyscript` "+lock.Packages["node_modules/assemblyscript"].Version)
}

func TestNewPluginNamesAndModule(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "x")
	r := runCLI(t, "", "new-plugin", "--name", "acme-allow", "--module", "github.com/acme/allow", dir)
	require.Equal(t, exitOK, r.code, r.errOut)
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(gomod), "module github.com/acme/allow\n"))
	exportsGo, err := os.ReadFile(filepath.Join(dir, "exports.go"))
	require.NoError(t, err)
	assert.Contains(t, string(exportsGo), `Name:         "acme-allow",`)

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
	assert.Contains(t, string(exportsGo), `Name:         "acme-here",`)
	assert.Equal(t, "acme-here", deriveName("../acme-here/."))
}

// TestNewPluginHintQuotesPaths: the closing hint can be pasted into a
// shell when the directory has a space in its name.
func TestNewPluginHintQuotesPaths(t *testing.T) {
	t.Parallel()
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

// asCLIEnv makes the test binary run the wasmhost command line (TestMain).
const asCLIEnv = "WASMHOST_TEST_AS_CLI"

// cliWrapper writes an executable "wasmhost" that runs this test binary as
// the wasmhost command line, for a scaffold's Makefile to run.
func cliWrapper(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "wasmhost")
	script := "#!/bin/sh\n" + asCLIEnv + "=1 exec " + shellQuote(self) + " \"$@\"\n"
	require.NoError(t, os.WriteFile(p, []byte(script), 0o755))
	return p
}

// goldenCases counts the cases of the golden suites under dir.
func goldenCases(t *testing.T, dir string) int {
	t.Helper()
	suites, err := conformance.Load(dir)
	require.NoError(t, err)
	n := 0
	for _, s := range suites {
		require.NoError(t, s.Err, s.File)
		n += len(s.Cases)
	}
	require.Positive(t, n)
	return n
}

// TestNewPluginMakeTest: each kind of scaffold, made outside this
// repository, builds and passes its own golden suite with the one command
// its README gives, make test: the minimal Go plugin (with wants and a
// settings key of its own), a copy of the default policy (--from default)
// and the AssemblyScript plugin (--lang assemblyscript, npm ci from its
// lockfile, then asc). The Go builds run as an author's would: no
// GOFLAGS, so go.sum must be complete, and nothing from wasmhost. The
// AssemblyScript one needs npm and its registry; without npm it is
// skipped, except in CI (CI set), where it fails.
func TestNewPluginMakeTest(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds wasm modules with the go toolchain and npm")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make in PATH")
	}
	wasmhost := cliWrapper(t)
	for _, tt := range []struct {
		kind    string
		flags   []string
		tool    string   // needed in PATH
		files   []string // among what it writes
		version string   // the handshake's
		wants   string   // inspect's handshake line ends so
	}{
		{kind: "go", tool: "go", files: []string{"policy.go", "exports.go", "golden/allow-list.json"}, wants: ", wants toolAnnotations"},
		{kind: "default", flags: []string{"--from", "default"}, tool: "go",
			files: []string{"main.go", "direct.go", "kernel.go", "internal/policy/policy.go", "internal/abi/abi.go", "golden/trust.json"}},
		{kind: "assemblyscript", flags: []string{"--lang", "assemblyscript"}, tool: "npm",
			files: []string{"package.json", "package-lock.json", "asconfig.json", "assembly/index.ts", "golden/trust.json"}},
	} {
		t.Run(tt.kind, func(t *testing.T) {
			t.Parallel()
			if _, err := exec.LookPath(tt.tool); err != nil {
				if os.Getenv("CI") != "" {
					t.Fatalf("no %s in PATH (CI is set: the %s scaffold must be checked)", tt.tool, tt.kind)
				}
				t.Skipf("no %s in PATH", tt.tool)
			}
			name := "acme-" + tt.kind
			dir := filepath.Join(t.TempDir(), name)
			r := runCLI(t, "", append(append([]string{"new-plugin"}, tt.flags...), dir)...)
			require.Equal(t, exitOK, r.code, r.errOut)
			for _, f := range append(tt.files, "Makefile", "README.md") {
				assert.FileExists(t, filepath.Join(dir, filepath.FromSlash(f)))
				assert.Contains(t, r.out, "created "+filepath.Join(dir, filepath.FromSlash(f))+"\n")
			}
			assert.Contains(t, r.out, "\nnext: cd "+dir+" && make test")
			readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
			require.NoError(t, err)
			assert.Contains(t, string(readme), "make test", "the README gives the one command")

			cmd := exec.CommandContext(t.Context(), "make", "test", "WASMHOST="+wasmhost)
			cmd.Dir = dir
			// An author runs make from a shell, not from inside another
			// make: the outer make's MAKELEVEL and MAKEFLAGS (present
			// when make test runs this test) would make the inner one
			// print "Entering/Leaving directory" lines around the summary.
			env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
				k, _, _ := strings.Cut(kv, "=")
				return k == "MAKELEVEL" || k == "MAKEFLAGS" || k == "MFLAGS"
			})
			cmd.Env = append(env, "GOFLAGS=", "GOWORK=off", "GOTOOLCHAIN=local")
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "make test:\n%s", out)
			l := lines(string(out))
			assert.Equal(t, fmt.Sprintf("%d passed, 0 failed", goldenCases(t, filepath.Join(dir, "golden"))), l[len(l)-1], "%s", out)

			r = runCLI(t, "", "inspect", filepath.Join(dir, name+".wasm"))
			require.Equal(t, exitOK, r.code, r.out+r.errOut)
			assert.Contains(t, r.out, "handshake: "+name+" 0.1.0 (abi 1)"+tt.wants+"\n")
			assert.Contains(t, r.out, "accepted: yes")
		})
	}
}
