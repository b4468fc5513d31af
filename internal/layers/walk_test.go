package layers_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// repoRoot is the repository's root, seen from this package's directory.
var repoRoot = filepath.Join("..", "..")

// walkGoFiles calls fn with each non-test Go file under repoRoot (its path
// relative to the root, with forward slashes), its bytes and its package
// clause with comments, parsed in fset. It skips hidden and "_"
// directories, testdata, node_modules and vendor, and, unless nested is
// set, the modules nested in the repository.
func walkGoFiles(fset *token.FileSet, nested bool, fn func(rel string, src []byte, f *ast.File) error) error {
	return filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path == repoRoot {
				return nil
			}
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules" || name == "vendor" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && !nested {
				return filepath.SkipDir
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
		f, err := parser.ParseFile(fset, path, src, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return fmt.Errorf("reading the package clause of %s: %w", path, err)
		}
		rel, err := filepath.Rel(repoRoot, path)
		if err != nil {
			return fmt.Errorf("placing %s: %w", path, err)
		}
		return fn(filepath.ToSlash(rel), src, f)
	})
}
