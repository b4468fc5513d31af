package layers_test

import (
	"fmt"
	"go/ast"
	"go/token"
	"path"
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
	lines := map[string]int{} // "dir (package name)" -> lines of its comment, over all its files
	fset := token.NewFileSet()
	err := walkGoFiles(fset, true, func(rel string, _ []byte, f *ast.File) error {
		if f.Doc == nil {
			return nil
		}
		n := fset.Position(f.Doc.End()).Line - fset.Position(f.Doc.Pos()).Line + 1
		lines[fmt.Sprintf("%s (package %s)", path.Dir(rel), f.Name.Name)] += n
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) < 10 {
		t.Fatalf("found package comments in only %d packages under %s; is the walk rooted at the repository?", len(lines), repoRoot)
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
