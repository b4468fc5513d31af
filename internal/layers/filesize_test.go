package layers_test

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxFileLines is the most lines a non-test Go file of the module may
// have (issue #26): past it, a file holds more than one concern, and is
// split along them into files of the same package.
const maxFileLines = 800

// TestSourceFilesAreShort walks the module (not the modules nested in it,
// nor testdata) and fails for each non-test Go file, generated files aside,
// that runs past maxFileLines lines, naming the file and its length.
func TestSourceFilesAreShort(t *testing.T) {
	root := filepath.Join("..", "..")
	var long []string
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path == root {
				return nil
			}
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules" || name == "vendor" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return fmt.Errorf("reading the package clause of %s: %w", path, err)
		}
		if ast.IsGenerated(f) {
			return nil
		}
		files++
		n := bytes.Count(src, []byte("\n"))
		if len(src) > 0 && src[len(src)-1] != '\n' {
			n++
		}
		if n > maxFileLines {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return fmt.Errorf("placing %s: %w", path, err)
			}
			long = append(long, fmt.Sprintf("%s: %d lines", filepath.ToSlash(rel), n))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("found only %d Go files under %s; is the walk rooted at the repository?", files, root)
	}
	slices.Sort(long)
	if len(long) > 0 {
		t.Errorf("Go files longer than %d lines (split each along its concerns, into files of its package):\n  %s",
			maxFileLines, strings.Join(long, "\n  "))
	}
}
