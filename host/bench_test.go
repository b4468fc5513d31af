package host

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"

	"github.com/wasmhost/wasmhost/abi"
)

// BenchmarkEmptyExtismCall and BenchmarkRawWazeroCall call the same empty
// export of testplugins/wat/tiny.wasm: the difference is the floor extism
// adds to every plugin call (input/output reset, error and output reads).
func BenchmarkEmptyExtismCall(b *testing.B) {
	ctx := context.Background()
	rc := wazero.NewRuntimeConfig().WithCloseOnContextDone(true)
	manifest := extism.Manifest{Wasm: []extism.Wasm{extism.WasmData{Data: watWasm(b, "tiny")}}}
	cp, err := extism.NewCompiledPlugin(ctx, manifest, extism.PluginConfig{RuntimeConfig: rc, EnableWasi: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cp.Close(ctx)
	inst, err := cp.Instance(ctx, extism.PluginInstanceConfig{ModuleConfig: sandboxConfig(io.Discard, io.Discard)})
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Close(ctx)
	for b.Loop() {
		if rc, _, err := inst.CallWithContext(ctx, "noop", nil); err != nil || rc != 0 {
			b.Fatal(rc, err)
		}
	}
}

func BenchmarkRawWazeroCall(b *testing.B) {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(true))
	defer r.Close(ctx)
	mod, err := r.InstantiateWithConfig(ctx, watWasm(b, "tiny"), sandboxConfig(io.Discard, io.Discard))
	if err != nil {
		b.Fatal(err)
	}
	fn := mod.ExportedFunction("noop")
	for b.Loop() {
		if _, err := fn.Call(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScriptProject is one host call (pool, timeout, JSON both ways,
// validation) on the smallest well-behaved plugin.
func BenchmarkScriptProject(b *testing.B) {
	p := loadWat(b, "script", Options{})
	req := &abi.ProjectRequest{Settings: json.RawMessage(`{"tools":[{"i":0,"trust":true,"alwaysLoad":false}]}`), Tools: []string{"a"}}
	for b.Loop() {
		if _, err := p.Project(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDefaultProject(b *testing.B) {
	p := loadDefault(b, Options{})
	tools := make([]string, 50)
	for i := range tools {
		tools[i] = fmt.Sprintf("tool_%02d", i)
	}
	req := &abi.ProjectRequest{
		Settings: json.RawMessage(`{"trust":true,"excludeTools":["tool_03","tool_17"]}`),
		Tools:    tools, Prompts: []string{"a", "b"}, Resources: []string{"r"},
	}
	for b.Loop() {
		if _, err := p.Project(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDefaultCanonicalizeMiss sends new settings every time (a plugin
// call each); BenchmarkDefaultCanonicalizeMemoHit repeats known settings.
func BenchmarkDefaultCanonicalizeMiss(b *testing.B) {
	p := loadDefault(b, Options{})
	i := 0
	for b.Loop() {
		i++
		req := &abi.CanonicalizeRequest{Settings: raws(fmt.Sprintf(`{"includeTools":["t%d(x)","a"],"trust":true}`, i))}
		if _, err := p.Canonicalize(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDefaultCanonicalizeMemoHit(b *testing.B) {
	p := loadDefault(b, Options{})
	req := &abi.CanonicalizeRequest{Settings: raws(`{"includeTools":["t(x)","a"],"trust":true}`)}
	for b.Loop() {
		if _, err := p.Canonicalize(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadCold loads the default plugin with no compilation cache, so
// every load compiles it; BenchmarkLoadWarmCache loads it from a CacheDir
// that a first load filled, as a later process would.
func BenchmarkLoadCold(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		p, err := LoadDefault(ctx, Options{})
		if err != nil {
			b.Fatal(err)
		}
		_ = p.Close(ctx)
	}
}

func BenchmarkLoadWarmCache(b *testing.B) {
	ctx := context.Background()
	opts := Options{CacheDir: b.TempDir()}
	p, err := LoadDefault(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	_ = p.Close(ctx)
	for b.Loop() {
		p, err := LoadDefault(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		_ = p.Close(ctx)
	}
}
