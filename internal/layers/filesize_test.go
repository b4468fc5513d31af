package layers_test

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/token"
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
	var long []string
	files := 0
	err := walkGoFiles(token.NewFileSet(), false, func(rel string, src []byte, f *ast.File) error {
		if ast.IsGenerated(f) {
			return nil
		}
		files++
		n := bytes.Count(src, []byte("\n"))
		if len(src) > 0 && src[len(src)-1] != '\n' {
			n++
		}
		if n > maxFileLines {
			long = append(long, fmt.Sprintf("%s: %d lines", rel, n))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("found only %d Go files under %s; is the walk rooted at the repository?", files, repoRoot)
	}
	slices.Sort(long)
	if len(long) > 0 {
		t.Errorf("Go files longer than %d lines (split each along its concerns, into files of its package):\n  %s",
			maxFileLines, strings.Join(long, "\n  "))
	}
}
