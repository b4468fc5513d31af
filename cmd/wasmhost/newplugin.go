package main

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"
)

// scaffoldFS holds the new-plugin templates. Files ending in .tmpl are
// text/template templates (their output drops the suffix); the others are
// copied as they are. Go sources carry the suffix so they are not part of
// this module's build, and go.mod does so because a directory holding a
// go.mod could not be embedded.
//
//go:embed scaffold
var scaffoldFS embed.FS

// scaffoldData is what the templates see.
type scaffoldData struct {
	Name   string // plugin name: handshake name, .wasm file name
	Module string // Go module path
}

var (
	validName   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	validModule = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._~/-]*$`)
	nameJunk    = regexp.MustCompile(`[^a-z0-9._-]+`)
	plainWord   = regexp.MustCompile(`^[A-Za-z0-9@%_+=:,./-]+$`)
)

// runNewPlugin implements `wasmhost new-plugin DIR`: it writes a Go policy
// plugin project into DIR, which must not exist or be empty. The project
// builds with the standard Go toolchain and passes its own golden suite.
func runNewPlugin(_ context.Context, args []string, s stdio) int {
	var name, module string
	fs := newFlagSet("new-plugin", "[flags] DIR", s)
	fs.StringVar(&name, "name", "", "plugin `NAME` (handshake name and .wasm file name); default: derived from DIR")
	fs.StringVar(&module, "module", "", "Go module `PATH`; default: example.com/NAME")
	dir, status, ok := parseOneArg("new-plugin", "directory", fs, args, s)
	if !ok {
		return status
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
	files, err := writeScaffold(dir, scaffoldData{Name: name, Module: module})
	if err != nil {
		s.errorf("new-plugin", "%v", err)
		return exitFail
	}
	for _, f := range files {
		fmt.Fprintf(s.out, "created %s\n", f)
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

// writeScaffold renders the templates into dir and returns the files it
// wrote. It refuses a dir that exists and is not empty.
func writeScaffold(dir string, data scaffoldData) ([]string, error) {
	entries, err := os.ReadDir(dir)
	switch {
	case err == nil && len(entries) > 0:
		return nil, fmt.Errorf("%s exists and is not empty", dir)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	var written []string
	err = fs.WalkDir(scaffoldFS, "scaffold", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		content, err := scaffoldFS.ReadFile(p)
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, "scaffold/")
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
		target := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(target, content, 0o644); err != nil {
			return err
		}
		written = append(written, target)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", dir, err)
	}
	return written, nil
}
