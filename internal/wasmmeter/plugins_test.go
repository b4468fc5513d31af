package wasmmeter

import (
	"context"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	extism "github.com/extism/go-sdk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// compilationCache is shared by the tests that compile the committed Go
// plugins (several MB each) with the compiler, so that each is compiled
// once.
var compilationCache = wazero.NewCompilationCache()

// committedPlugins lists the committed .wasm plugins under plugins/ and
// testplugins/ (Go, AssemblyScript and WAT ones).
func committedPlugins(t testing.TB) []string {
	t.Helper()
	var paths []string
	for _, dir := range []string{"plugins", "testplugins"} {
		err := filepath.WalkDir(filepath.Join("..", "..", dir), func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".wasm") && !hostileModules[filepath.Base(path)] {
				paths = append(paths, path)
			}
			return err
		})
		require.NoError(t, err)
	}
	require.Contains(t, paths, defaultPlugin)
	return paths
}

// hostileModules are the committed plugins made to be refused at load
// (ErrLimit) or never to finish instantiating; package host tests them.
var hostileModules = map[string]bool{
	"start-loop.wasm": true, "table-grow-unbounded.wasm": true,
}

// signature is a function's name and type, for comparing exports and
// imports; for an export, also its function's name in the "name" section.
type signature struct {
	module, name    string
	params, results []api.ValueType
	funcName        string
}

func signatures(defs []api.FunctionDefinition, imported bool) []signature {
	var out []signature
	for _, d := range defs {
		s := signature{params: d.ParamTypes(), results: d.ResultTypes()}
		if imported {
			s.module, s.name, _ = d.Import()
		} else {
			s.name, s.funcName = d.ExportNames()[0], d.Name()
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b signature) int {
		return strings.Compare(a.module+"\x00"+a.name, b.module+"\x00"+b.name)
	})
	return out
}

func exportsOf(m wazero.CompiledModule) []api.FunctionDefinition {
	var defs []api.FunctionDefinition
	for _, d := range m.ExportedFunctions() {
		defs = append(defs, d)
	}
	return defs
}

// stubImports instantiates, in r, a host module for each module that m
// imports functions from, other than WASI and the meter, whose functions
// return zeros. They need not work, only link.
func stubImports(t testing.TB, ctx context.Context, r wazero.Runtime, m wazero.CompiledModule) {
	t.Helper()
	builders := map[string]wazero.HostModuleBuilder{}
	for _, d := range m.ImportedFunctions() {
		mod, name, _ := d.Import()
		if mod == wasi_snapshot_preview1.ModuleName || mod == ImportModule {
			continue
		}
		b, ok := builders[mod]
		if !ok {
			b = r.NewHostModuleBuilder(mod)
			builders[mod] = b
		}
		results := len(d.ResultTypes())
		b.NewFunctionBuilder().
			WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, stack []uint64) {
				clear(stack[:results])
			}), d.ParamTypes(), d.ResultTypes()).
			Export(name)
	}
	for mod, b := range builders {
		_, err := b.Instantiate(ctx)
		require.NoError(t, err, mod)
	}
}

func TestCommittedPlugins(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles every committed plugin")
	}
	ctx := context.Background()
	// The originals are compiled only to read their signatures: the
	// interpreter does that quickly. The instrumented default plugin is
	// compiled with the compiler, as the host does; the other Go plugins
	// share its runtime code, and the interpreter (the same decoder and
	// validator) keeps this test's time down under -race.
	interp := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer func() { _ = interp.Close(ctx) }()
	for _, path := range committedPlugins(t) {
		t.Run(strings.TrimPrefix(filepath.ToSlash(path), "../../"), func(t *testing.T) {
			wasm := readFile(t, path)
			out, err := Instrument(wasm, 1000)
			require.NoError(t, err)
			t.Logf("%d bytes, +%d (%.2f%%)", len(wasm), len(out)-len(wasm), 100*float64(len(out)-len(wasm))/float64(len(wasm)))

			orig, err := interp.CompileModule(ctx, wasm)
			require.NoError(t, err)
			defer func() { _ = orig.Close(ctx) }() // the runtime would keep every plugin's
			m := &meter{budget: 1000, stopOnDone: true}
			rc := wazero.NewRuntimeConfigInterpreter()
			if path == defaultPlugin {
				rc = wazero.NewRuntimeConfig().WithCompilationCache(compilationCache)
			}
			r := wazero.NewRuntimeWithConfig(ctx, rc)
			defer func() { _ = r.Close(ctx) }()
			inst, err := r.CompileModule(ctx, out)
			require.NoError(t, err)

			assert.Equal(t, signatures(exportsOf(orig), false), signatures(exportsOf(inst), false), "exports")
			want := append(signatures(orig.ImportedFunctions(), true),
				signature{module: ImportModule, name: ImportName, results: []api.ValueType{api.ValueTypeI32}})
			assert.ElementsMatch(t, want, signatures(inst.ImportedFunctions(), true), "imports")

			wasi_snapshot_preview1.MustInstantiate(ctx, r)
			_, err = r.NewHostModuleBuilder(ImportModule).
				NewFunctionBuilder().WithFunc(m.tick).Export(ImportName).
				Instantiate(ctx)
			require.NoError(t, err)
			stubImports(t, ctx, r, inst)
			mod, err := r.InstantiateModule(ctx, inst, wazero.NewModuleConfig().WithStartFunctions())
			require.NoError(t, err)

			// A Go reactor's _initialize runs the Go runtime's start-up: a
			// good deal of real, metered Go code.
			if init := mod.ExportedFunction("_initialize"); init != nil {
				callCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				_, err := init.Call(callCtx)
				require.NoError(t, err)
				assert.Positive(t, m.ticks.Load(), "the Go runtime's start-up never ran out of a budget of 1000")
			}
		})
	}
}

// extismPlugin compiles wasm as an Extism plugin, as the host does (with
// WASI), with the meter's tick as a host function when instrumented, and
// CloseOnContextDone otherwise.
func extismPlugin(t testing.TB, rc wazero.RuntimeConfig, wasm []byte, m *meter) *extism.Plugin {
	t.Helper()
	ctx := context.Background()
	var funcs []extism.HostFunction
	if m != nil {
		tick := extism.NewHostFunctionWithStack(ImportName, func(ctx context.Context, _ *extism.CurrentPlugin, stack []uint64) {
			stack[0] = api.EncodeI32(m.tick(ctx))
		}, nil, []extism.ValueType{extism.ValueTypeI32})
		tick.SetNamespace(ImportModule)
		funcs = append(funcs, tick)
	} else {
		rc = rc.WithCloseOnContextDone(true)
	}
	manifest := extism.Manifest{Wasm: []extism.Wasm{extism.WasmData{Data: wasm, Name: "main"}}}
	compiled, err := extism.NewCompiledPlugin(ctx, manifest, extism.PluginConfig{RuntimeConfig: rc, EnableWasi: true}, funcs)
	require.NoError(t, err)
	t.Cleanup(func() { _ = compiled.Close(ctx) })
	p, err := compiled.Instance(ctx, extism.PluginInstanceConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(ctx) })
	return p
}

func TestExtismDefaultPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the default plugin")
	}
	wasm := readFile(t, defaultPlugin)
	m := &meter{budget: 1000, stopOnDone: true}
	// The original runs in the interpreter, which compiles it quickly; the
	// instrumented module in the compiler (cached by TestCommittedPlugins).
	orig := extismPlugin(t, wazero.NewRuntimeConfigInterpreter(), wasm, nil)
	inst := extismPlugin(t, wazero.NewRuntimeConfig().WithCompilationCache(compilationCache), instrument(t, wasm, m.budget), m)
	for _, c := range []struct{ export, input string }{
		{"handshake", ""},
		{"canonicalize", `{"settings":[{},{"tools":{"deny":["b*"]}},{"unknown":1},"not an object"]}`},
		{"canonicalize", `not json`},
		{"project", `{"settings":{},"tools":["a","b"],"prompts":[],"resources":[]}`},
	} {
		wantRC, wantOut, wantErr := orig.Call(c.export, []byte(c.input))
		gotRC, gotOut, gotErr := inst.Call(c.export, []byte(c.input))
		assert.Equal(t, wantRC, gotRC, c.export)
		assert.Equal(t, string(wantOut), string(gotOut), c.export)
		assert.Equal(t, wantErr, gotErr, c.export)
	}
	_, out, err := inst.Call("handshake", nil)
	require.NoError(t, err)
	assert.Contains(t, string(out), `"name":"policy-default"`)
	assert.Positive(t, m.ticks.Load())
}

func TestExtismHostileLoopStops(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the hostile plugin")
	}
	// The hostile Go plugin's "loop" mode spins forever. Instrumented and
	// without CloseOnContextDone, the call must still end at its deadline.
	// (The interpreter keeps the test quick; TestRunawayReachesTick shows
	// the same with the compiler.)
	wasm := readFile(t, filepath.Join("..", "..", "testplugins", "hostile-go", "hostile", "hostile.wasm"))
	m := &meter{budget: 10000, stopOnDone: true}
	p := extismPlugin(t, wazero.NewRuntimeConfigInterpreter(), instrument(t, wasm, m.budget), m)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := p.CallWithContext(ctx, "canonicalize", []byte(`{"settings":[{"mode":"loop"}]}`))
	elapsed := time.Since(start)
	require.Error(t, err)
	assert.ErrorContains(t, err, errStopped.Error())
	// Without the meter the call never ends; a bound far past the 200 ms
	// deadline holds on a loaded machine under -race.
	assert.Less(t, elapsed, 30*time.Second)
}
