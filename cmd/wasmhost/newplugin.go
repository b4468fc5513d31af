package main

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"go/format"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/template"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/conformance"
	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"
	policydefaultas "github.com/wasmhost/wasmhost/testplugins/policy-default-as"
)

// scaffoldFS holds the new-plugin templates: scaffold for the minimal Go
// plugin, scaffold-default for the files a copy of the default policy
// adds to its source, scaffold-as for an AssemblyScript plugin. Files
// ending in .tmpl are text/template templates (their output drops the
// suffix); the others are copied as they are. Go sources carry the suffix
// so they are not part of this module's build, and go.mod does so because
// a directory holding a go.mod could not be embedded.
//
//go:embed scaffold scaffold-default scaffold-as
var scaffoldFS embed.FS

// scaffoldData is what the templates see.
type scaffoldData struct {
	Name   string // plugin name: handshake name, .wasm file name
	Module string // Go module path

	// For a copy of the default policy: the ABI definitions it uses.
	ABIVersion        int
	DirectFlagRefused uint32
	// For an AssemblyScript plugin: the pinned compiler and PDK.
	ASCVersion, PDKVersion string
}

// A scaffoldFile is one file of a new project: its slash-separated path
// in the project and its content.
type scaffoldFile struct {
	rel     string
	content []byte
}

var (
	validName   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	validModule = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._~/-]*$`)
	nameJunk    = regexp.MustCompile(`[^a-z0-9._-]+`)
	plainWord   = regexp.MustCompile(`^[A-Za-z0-9@%_+=:,./-]+$`)
)

// runNewPlugin implements `wasmhost new-plugin DIR`: it writes a policy
// plugin project into DIR, which must not exist or be empty: by default a
// minimal Go plugin (an allow list with a settings key of its own and
// tool annotations), with --from default a copy of the default policy,
// with --lang assemblyscript the default policy in AssemblyScript. Each
// builds (the Go ones with the standard Go toolchain, the AssemblyScript
// one with npm and its pinned lockfile) and passes its own golden suite
// with one command, make test.
func runNewPlugin(_ context.Context, args []string, s stdio) int {
	var name, module, from, lang string
	fs := newFlagSet("new-plugin", "[flags] DIR", s)
	fs.StringVar(&name, "name", "", "plugin `NAME` (handshake name and .wasm file name); default: derived from DIR")
	fs.StringVar(&module, "module", "", "Go module `PATH`; default: example.com/NAME")
	fs.StringVar(&from, "from", "", "start from a copy of `POLICY` instead of the minimal example: default (wasmhost's default policy)")
	fs.StringVar(&lang, "lang", "go", "the plugin's `LANGUAGE`: go, or assemblyscript (the default policy in AssemblyScript, built with npm)")
	dir, status, ok := parseOneArg("new-plugin", "directory", fs, args, s)
	if !ok {
		return status
	}
	if from != "" && from != "default" {
		s.errorf("new-plugin", "--from %q: the one policy to start from is \"default\"", from)
		return exitUsage
	}
	switch lang {
	case "go", "assemblyscript":
	case "as":
		lang = "assemblyscript"
	default:
		s.errorf("new-plugin", "--lang %q: use go or assemblyscript", lang)
		return exitUsage
	}
	if from != "" && lang == "assemblyscript" {
		s.errorf("new-plugin", "--from %s with --lang assemblyscript: the AssemblyScript plugin is always a copy of the default policy; leave --from out", from)
		return exitUsage
	}
	if name == "" {
		name = deriveName(dir)
	}
	if !validName.MatchString(name) {
		s.errorf("new-plugin", "plugin name %q: use lower-case letters, digits, '.', '_' and '-'", name)
		return exitUsage
	}
	if module == "" {
		module = "example.com/" + name
	}
	if !validModule.MatchString(module) {
		s.errorf("new-plugin", "module path %q is not valid", module)
		return exitUsage
	}
	data := scaffoldData{Name: name, Module: module}
	var files []scaffoldFile
	var err error
	switch {
	case lang == "assemblyscript":
		files, err = asScaffold(data)
	case from == "default":
		files, err = defaultScaffold(data)
	default:
		files, err = renderTemplates("scaffold", data)
	}
	if err == nil {
		files, err = writeScaffold(dir, files)
	}
	if err != nil {
		s.errorf("new-plugin", "%v", err)
		return exitFail
	}
	for _, f := range files {
		fmt.Fprintf(s.out, "created %s\n", filepath.Join(dir, filepath.FromSlash(f.rel)))
	}
	fmt.Fprintf(s.out, "\nnext: cd %s && %s\n", shellQuote(dir), makeTestHint())
	return exitOK
}

// makeTestHint is the command that builds and checks a new plugin: the
// scaffold's Makefile runs "wasmhost" from PATH, so when that is not this
// binary the hint names this one.
func makeTestHint() string {
	self, err := os.Executable()
	if err != nil {
		return "make test"
	}
	if onPath, err := exec.LookPath("wasmhost"); err == nil && sameFile(onPath, self) {
		return "make test"
	}
	return "make test WASMHOST=" + shellQuote(self)
}

// shellQuote quotes s for a POSIX shell when it holds anything but the
// characters a path usually has, so that a printed command can be pasted.
func shellQuote(s string) string {
	if s != "" && plainWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// sameFile reports whether paths a and b name the same file.
func sameFile(a, b string) bool {
	ia, err := os.Stat(a)
	if err != nil {
		return false
	}
	ib, err := os.Stat(b)
	return err == nil && os.SameFile(ia, ib)
}

// deriveName turns the last element of dir into a plugin name; "." and
// ".." stand for the directories they name.
func deriveName(dir string) string {
	base := filepath.Base(filepath.Clean(dir))
	if base == "." || base == ".." {
		if abs, err := filepath.Abs(dir); err == nil {
			base = filepath.Base(abs)
		}
	}
	n := strings.Trim(nameJunk.ReplaceAllString(strings.ToLower(base), "-"), "-._")
	if n == "" {
		return "policy-plugin"
	}
	return n
}

// renderTemplates renders the files under root in scaffoldFS with data.
func renderTemplates(root string, data scaffoldData) ([]scaffoldFile, error) {
	var files []scaffoldFile
	err := fs.WalkDir(scaffoldFS, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		content, err := scaffoldFS.ReadFile(p)
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, root+"/")
		if strings.HasSuffix(rel, ".tmpl") {
			rel = strings.TrimSuffix(rel, ".tmpl")
			tmpl, err := template.New(path.Base(p)).Option("missingkey=error").Parse(string(content))
			if err != nil {
				return fmt.Errorf("template %s: %w", p, err)
			}
			var b bytes.Buffer
			if err := tmpl.Execute(&b, data); err != nil {
				return fmt.Errorf("template %s: %w", p, err)
			}
			content = b.Bytes()
		}
		files = append(files, scaffoldFile{rel: rel, content: content})
		return nil
	})
	return files, err
}

// copyFiles returns the files of fsys under root, each relative to
// root, then to under, with edit applied.
func copyFiles(fsys fs.FS, root, under string, edit func(rel string, b []byte) ([]byte, error)) ([]scaffoldFile, error) {
	var files []scaffoldFile
	err := fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		rel := path.Join(under, strings.TrimPrefix(strings.TrimPrefix(p, root), "/"))
		if edit != nil {
			if b, err = edit(rel, b); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
		}
		files = append(files, scaffoldFile{rel: rel, content: b})
		return nil
	})
	return files, err
}

// defaultScaffold is a copy of the default policy's source
// (plugins/policy-default), renamed and made a module of its own: its
// imports of wasmhost packages point at the copy (internal/policy) or at
// internal/abi, the few ABI definitions it uses; with the minimal
// scaffold's go.mod, go.sum and Makefile, and the public golden suite of
// the default policy.
func defaultScaffold(data scaffoldData) ([]scaffoldFile, error) {
	data.ABIVersion, data.DirectFlagRefused = abi.Version, abi.DirectFlagRefused
	files, err := renderTemplates("scaffold-default", data)
	if err != nil {
		return nil, err
	}
	for _, f := range []string{"go.mod.tmpl", "go.sum.tmpl", "Makefile.tmpl"} {
		shared, err := renderTemplates("scaffold/"+f, data)
		if err != nil {
			return nil, err
		}
		files = append(files, scaffoldFile{rel: strings.TrimSuffix(f, ".tmpl"), content: shared[0].content})
	}
	src, err := copyFiles(policydefault.Source, ".", "", func(rel string, b []byte) ([]byte, error) {
		return renameDefaultGo(rel, b, data)
	})
	if err != nil {
		return nil, err
	}
	golden, err := copyFiles(conformance.DefaultGolden, "golden/default", "golden", nil)
	if err != nil {
		return nil, err
	}
	return append(append(files, src...), golden...), nil
}

// renameDefaultGo rewrites one Go file of the default policy for a copy
// named data.Name in module data.Module.
func renameDefaultGo(rel string, b []byte, data scaffoldData) ([]byte, error) {
	const repo = "github.com/wasmhost/wasmhost"
	s := string(b)
	if rel == "main.go" {
		// The build instructions at the top are the repository's; the
		// copy's are its README and Makefile.
		if i := strings.Index(s, "//go:build"); i > 0 {
			s = s[i:]
		}
		old := `"name":"policy-default"`
		if !strings.Contains(s, old) {
			return nil, fmt.Errorf("no handshake name %s to rename", old)
		}
		s = strings.Replace(s, old, fmt.Sprintf(`"name":%q`, data.Name), 1)
		s = strings.Replace(s, `,"version":"1.0.0"`, `,"version":"0.1.0"`, 1)
		s = strings.Replace(s, "// Command policy-default is the default wasmhost policy", "// Command "+data.Name+" started as a copy of the default wasmhost policy", 1)
	}
	s = strings.ReplaceAll(s, `"`+repo+`/plugins/policy-default/internal/policy"`, `"`+data.Module+`/internal/policy"`)
	s = strings.ReplaceAll(s, `"`+repo+`/abi"`, `"`+data.Module+`/internal/abi"`)
	if strings.Contains(s, `"`+repo) {
		return nil, fmt.Errorf("imports a wasmhost package the copy lacks")
	}
	out, err := format.Source([]byte(s)) // imports sorted again
	if err != nil {
		return nil, err
	}
	return out, nil
}

// asScaffold is a copy of the default policy in AssemblyScript
// (testplugins/policy-default-as), renamed, with its pinned package files,
// a Makefile, a README and the public golden suite of the default policy.
func asScaffold(data scaffoldData) ([]scaffoldFile, error) {
	var pkg struct {
		DevDependencies map[string]string `json:"devDependencies"`
	}
	b, err := fs.ReadFile(policydefaultas.Source, "package.json")
	if err == nil {
		err = json.Unmarshal(b, &pkg)
	}
	if err != nil {
		return nil, fmt.Errorf("package.json: %w", err)
	}
	data.ASCVersion, data.PDKVersion = pkg.DevDependencies["assemblyscript"], pkg.DevDependencies["@extism/as-pdk"]
	files, err := renderTemplates("scaffold-as", data)
	if err != nil {
		return nil, err
	}
	src, err := copyFiles(policydefaultas.Source, ".", "", func(rel string, b []byte) ([]byte, error) {
		// The name is the handshake's, the .wasm file's (asconfig.json)
		// and the npm package's.
		b = bytes.ReplaceAll(b, []byte("policy-default-as"), []byte(data.Name))
		if rel == "assembly/index.ts" {
			b = bytes.Replace(b, []byte(`"version":"1.0.0"}'`), []byte(`"version":"0.1.0"}'`), 1)
		}
		return b, nil
	})
	if err != nil {
		return nil, err
	}
	golden, err := copyFiles(conformance.DefaultGolden, "golden/default", "golden", nil)
	if err != nil {
		return nil, err
	}
	return append(append(files, src...), golden...), nil
}

// writeScaffold writes files into dir and returns them sorted by path. It
// refuses a dir that exists and is not empty.
func writeScaffold(dir string, files []scaffoldFile) ([]scaffoldFile, error) {
	entries, err := os.ReadDir(dir)
	switch {
	case err == nil && len(entries) > 0:
		return nil, fmt.Errorf("%s exists and is not empty", dir)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	slices.SortFunc(files, func(a, b scaffoldFile) int { return strings.Compare(a.rel, b.rel) })
	for _, f := range files {
		target := filepath.Join(dir, filepath.FromSlash(f.rel))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return nil, fmt.Errorf("write %s: %w", dir, err)
		}
		if err := os.WriteFile(target, f.content, 0o644); err != nil {
			return nil, fmt.Errorf("write %s: %w", dir, err)
		}
	}
	return files, nil
}
