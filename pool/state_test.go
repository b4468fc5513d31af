package pool_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/pool"
)

// TestStates: every state has a name of its own, which ParseState reads
// back and /v1/state and the metrics labels show, and is terminal or not.
func TestStates(t *testing.T) {
	names := make(map[string]pool.State)
	for _, s := range pool.States() {
		name := s.String()
		require.NotContains(t, name, "State(", "state %d has no name", int(s))
		_, dup := names[name]
		require.False(t, dup, "two states are named %q", name)
		names[name] = s
		got, ok := pool.ParseState(name)
		require.True(t, ok, name)
		require.Equal(t, s, got)
		require.NotPanics(t, func() { s.Terminal() }, name)
	}
	assert.Equal(t, map[string]pool.State{
		"connecting": pool.StateConnecting, "ready": pool.StateReady, "restarting": pool.StateRestarting,
		"failed": pool.StateFailed, "closed": pool.StateClosed,
	}, names, "the names are part of /v1/state and the metrics")
	_, ok := pool.ParseState("State(9)")
	assert.False(t, ok)
	assert.Panics(t, func() { pool.State(len(names)).Terminal() })
}

// TestStateSwitchesListEveryState: a switch of the module's code that has
// a case for one entry state has a case for each, so that a new state is
// placed everywhere states are told apart, not left to a default.
func TestStateSwitchesListEveryState(t *testing.T) {
	constant := make(map[string]bool) // "StateReady", ...
	for _, s := range pool.States() {
		name := s.String()
		constant["State"+strings.ToUpper(name[:1])+name[1:]] = true
	}
	stateOf := func(e ast.Expr) string {
		switch e := e.(type) {
		case *ast.Ident:
			if constant[e.Name] {
				return e.Name
			}
		case *ast.SelectorExpr:
			if x, ok := e.X.(*ast.Ident); ok && x.Name == "pool" && constant[e.Sel.Name] {
				return e.Sel.Name
			}
		}
		return ""
	}
	fset := token.NewFileSet()
	switches := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sw, ok := n.(*ast.SwitchStmt)
			if !ok {
				return true
			}
			listed := make(map[string]bool)
			for _, c := range sw.Body.List {
				for _, e := range c.(*ast.CaseClause).List {
					if name := stateOf(e); name != "" {
						listed[name] = true
					}
				}
			}
			if len(listed) == 0 {
				return true
			}
			switches++
			var missing []string
			for name := range constant {
				if !listed[name] {
					missing = append(missing, name)
				}
			}
			slices.Sort(missing)
			assert.Empty(t, missing, "the switch at %s lists no case for these states", fset.Position(sw.Pos()))
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.NotZero(t, switches, "no switch on entry states found: the scan is broken")
}
