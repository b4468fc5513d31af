package layers_test

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxPackageComment is the most lines a package comment may take. It says
// what the package owns and what it may touch; the reasons go to
// docs/design.md.
const maxPackageComment = 20

// TestPackageCommentsAreShort parses every Go file of the repository (the
// module, the modules nested in it, and the wasip1-only plugins go list
// leaves out) and fails for each package whose comment runs past
// maxPackageComment lines, naming the package and its length.
func TestPackageCommentsAreShort(t *testing.T) {
	root := filepath.Join("..", "..")
	lines := map[string]int{} // "dir (package name)" -> lines of its comment, over all its files
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return fmt.Errorf("reading the package clause of %s: %w", path, err)
		}
		if f.Doc == nil {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return fmt.Errorf("placing %s: %w", path, err)
		}
		n := fset.Position(f.Doc.End()).Line - fset.Position(f.Doc.Pos()).Line + 1
		lines[fmt.Sprintf("%s (package %s)", filepath.ToSlash(rel), f.Name.Name)] += n
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) < 10 {
		t.Fatalf("found package comments in only %d packages under %s; is the walk rooted at the repository?", len(lines), root)
	}
	var long []string
	for pkg, n := range lines {
		if n > maxPackageComment {
			long = append(long, fmt.Sprintf("%s: %d lines", pkg, n))
		}
	}
	slices.Sort(long)
	if len(long) > 0 {
		t.Errorf("package comments longer than %d lines (say what the package owns and may touch; move the reasons to docs/design.md):\n  %s",
			maxPackageComment, strings.Join(long, "\n  "))
	}
}
