package wasmbin_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmhost/wasmhost/internal/wasmbin"
)

// repoModules returns the path, from the repository's root, of every .wasm
// file in the repository outside node_modules.
func repoModules(t *testing.T) []string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	var files []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".wasm") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files
}

// A signature is a function's name and type as both decoders see it.
type signature struct {
	Module, Name    string
	Params, Results string
}

func valTypes(ts []api.ValueType) string {
	names := make([]string, len(ts))
	for i, v := range ts {
		names[i] = api.ValueTypeName(v)
	}
	return strings.Join(names, ",")
}

func ownTypes(ts []byte) string {
	names := make([]string, len(ts))
	for i, v := range ts {
		names[i] = wasmbin.ValTypeName(v)
	}
	return strings.Join(names, ",")
}

// TestDecodeAgreesWithWazero decodes every module in the repository
// (testplugins/, the embedded plugin, the meter's test data) with Decode and
// with wazero's decoder, and compares what the host relies on: the
// imported functions with their types, the exported functions with their
// types, and the exported memories. A module wazero refuses must not make
// Decode panic; one wazero accepts must be accepted.
func TestDecodeAgreesWithWazero(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	for _, file := range repoModules(t) {
		t.Run(file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("..", "..", file))
			require.NoError(t, err)
			if testing.Short() && len(b) > 1<<20 && file != filepath.Join("plugins", "policy-default", "policy-default.wasm") {
				// Compiling each Go plugin takes seconds; the default
				// plugin stands for them in -short.
				t.Skip("a Go plugin other than the default: compiling it takes seconds; run without -short")
			}
			m, decErr := wasmbin.Decode(b)
			cm, err := r.CompileModule(ctx, b)
			if err != nil {
				t.Logf("wazero refuses it (%v); Decode says %v", err, decErr)
				return
			}
			defer cm.Close(ctx)
			require.NoError(t, decErr, "wazero accepts the module")

			var want, got []signature
			for _, f := range cm.ImportedFunctions() {
				mod, n, _ := f.Import()
				want = append(want, signature{mod, n, valTypes(f.ParamTypes()), valTypes(f.ResultTypes())})
			}
			for _, imp := range m.Imports {
				if imp.Kind == wasmbin.ExternFunc {
					ft := m.Types[imp.Type]
					got = append(got, signature{imp.Module, imp.Name, ownTypes(ft.Params), ownTypes(ft.Results)})
				}
			}
			assert.Empty(t, cmp.Diff(want, got), "imported functions (-wazero +Decode)")

			want, got = nil, nil
			for n, f := range cm.ExportedFunctions() {
				want = append(want, signature{"", n, valTypes(f.ParamTypes()), valTypes(f.ResultTypes())})
			}
			for _, e := range m.Exports {
				if e.Kind == wasmbin.ExternFunc {
					ft, ok := m.FuncType(e.Index)
					require.True(t, ok, "export %q", e.Name)
					got = append(got, signature{"", e.Name, ownTypes(ft.Params), ownTypes(ft.Results)})
				}
			}
			bySig := func(a, b signature) int { return strings.Compare(a.Name, b.Name) }
			slices.SortFunc(want, bySig)
			slices.SortFunc(got, bySig)
			assert.Empty(t, cmp.Diff(want, got), "exported functions (-wazero +Decode)")

			var wantMem, gotMem []string
			for n := range cm.ExportedMemories() {
				wantMem = append(wantMem, n)
			}
			for _, e := range m.Exports {
				if e.Kind == wasmbin.ExternMemory {
					gotMem = append(gotMem, e.Name)
				}
			}
			slices.Sort(wantMem)
			slices.Sort(gotMem)
			assert.Empty(t, cmp.Diff(wantMem, gotMem), "exported memories (-wazero +Decode)")
		})
	}
}

func TestDecodeRefusesCountsPastTheInput(t *testing.T) {
	// A type section that claims 2^32-1 types in 6 bytes.
	b := append(append([]byte(nil), wasmbin.Header...), wasmbin.SecType, 5, 0xff, 0xff, 0xff, 0xff, 0x0f)
	_, err := wasmbin.Decode(b)
	require.ErrorIs(t, err, wasmbin.ErrMalformed)
	assert.Contains(t, err.Error(), "type section")
}

func TestDecodeRefusesSectionsOutOfOrder(t *testing.T) {
	b := append([]byte(nil), wasmbin.Header...)
	b = wasmbin.AppendSection(b, wasmbin.SecExport, []byte{0})
	b = wasmbin.AppendSection(b, wasmbin.SecType, []byte{0})
	_, err := wasmbin.Decode(b)
	require.ErrorIs(t, err, wasmbin.ErrMalformed)
	assert.Contains(t, err.Error(), "out of order")
}

// FuzzDecode checks that Decode never panics and that what it accepts
// holds no more items than the input has bytes (no allocation from a
// count alone).
func FuzzDecode(f *testing.F) {
	for _, file := range []string{"../../testplugins/wat/direct.wasm", "../../testplugins/wat/script.wasm", "../../internal/wasmmeter/testdata/features.wasm"} {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Add(append([]byte(nil), wasmbin.Header...))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := wasmbin.Decode(b)
		if err != nil {
			return
		}
		n := len(m.Types) + len(m.Imports) + len(m.Funcs) + len(m.Tables) + len(m.Memories) + len(m.Exports)
		if n > len(b) {
			t.Fatalf("%d items from %d bytes", n, len(b))
		}
		for _, e := range m.Exports {
			if e.Kind == wasmbin.ExternFunc {
				m.FuncType(e.Index) // must not panic whatever the index
			}
		}
	})
}
