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
		p, err := loadEmbeddedDefault(ctx, Options{})
		if err != nil {
			b.Fatal(err)
		}
		_ = p.Close(ctx)
	}
}

func BenchmarkLoadWarmCache(b *testing.B) {
	ctx := context.Background()
	opts := Options{CacheDir: b.TempDir()}
	p, err := loadEmbeddedDefault(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	_ = p.Close(ctx)
	for b.Loop() {
		p, err := loadEmbeddedDefault(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		_ = p.Close(ctx)
	}
}

// benchBatch is the reconcile shape BenchmarkProjectBatch measures: 2,000
// items, every pair of 20 settings variants and 100 snapshots of 10 tools
// (with two prompts and two resources each).
func benchBatch() *abi.ProjectBatchRequest {
	req := &abi.ProjectBatchRequest{}
	for v := range 20 {
		var s string
		switch v % 4 {
		case 0:
			s = fmt.Sprintf(`{"trust":true,"n":%d}`, v)
		case 1:
			s = fmt.Sprintf(`{"excludeTools":["tool_%d","tool_%d"],"alwaysLoadTools":true}`, v%10, (v+3)%10)
		case 2:
			s = fmt.Sprintf(`{"includeTools":["tool_0","tool_%d(path)","tool_%d","p_0"],"trust":false}`, v%10, (v+5)%10)
		default:
			s = fmt.Sprintf(`{"command":"npx","args":["-y","server-%d"],"trust":true,"excludeTools":["tool_%d"]}`, v, v%10)
		}
		req.Settings = append(req.Settings, json.RawMessage(s))
	}
	for k := range 100 {
		snap := abi.BatchSnapshot{
			Prompts:   []string{"p_0", fmt.Sprintf("p_%d", k)},
			Resources: []string{fmt.Sprintf("file:///s%d/a", k), fmt.Sprintf("file:///s%d/b", k)},
		}
		for i := range 10 {
			snap.Tools = append(snap.Tools, fmt.Sprintf("tool_%d", i))
		}
		snap.Tools[9] = fmt.Sprintf("server_%d_tool", k)
		req.Snapshots = append(req.Snapshots, snap)
	}
	for k := range req.Snapshots {
		for s := range req.Settings {
			req.Items = append(req.Items, abi.BatchItem{Settings: s, Snapshot: k})
		}
	}
	return req
}

// BenchmarkProjectBatch projects the same 2,000 items with the default
// plugin in one ProjectBatch (one project_batch call) and in 2,000 Project
// calls; ns/item compares the two.
func BenchmarkProjectBatch(b *testing.B) {
	p := loadDefault(b, Options{})
	ctx := context.Background()
	req := benchBatch()
	b.Run("batch", func(b *testing.B) {
		for b.Loop() {
			resp, err := p.ProjectBatch(ctx, req)
			if err != nil || len(resp.Results) != len(req.Items) {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(req.Items)), "ns/item")
	})
	b.Run("single", func(b *testing.B) {
		for b.Loop() {
			for i := range req.Items {
				if _, err := p.Project(ctx, req.ItemRequest(i)); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(req.Items)), "ns/item")
	})
}

// BenchmarkTermination compares the two ways the host stops a runaway
// plugin, on the default plugin: metering (the default) and wazero's
// CloseOnContextDone checks (noMeter), for a canonicalize batch of 1,000
// new settings and a project of a 1,000-tool snapshot.
func BenchmarkTermination(b *testing.B) {
	tools := make([]string, 1000)
	for i := range tools {
		tools[i] = fmt.Sprintf("tool_%04d", i)
	}
	project := &abi.ProjectRequest{
		Settings: json.RawMessage(`{"trust":true,"excludeTools":["tool_0003","tool_0017"],"includeTools":["tool_00(a)","tool_01"]}`),
		Tools:    tools, Prompts: []string{"a", "b"}, Resources: []string{"r"},
	}
	for _, mode := range []struct {
		name string
		opts Options
	}{{"meter", Options{}}, {"checks", Options{noMeter: true}}} {
		p := loadDefault(b, mode.opts)
		n := 0
		b.Run(mode.name+"/canonicalize1000", func(b *testing.B) {
			for b.Loop() {
				req := &abi.CanonicalizeRequest{}
				for range 1000 {
					n++
					req.Settings = append(req.Settings, json.RawMessage(fmt.Sprintf(`{"includeTools":["t%d(x)","a"],"trust":true,"excludeTools":["b","c%d"]}`, n, n)))
				}
				if _, err := p.Canonicalize(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(mode.name+"/project1000", func(b *testing.B) {
			for b.Loop() {
				if _, err := p.Project(context.Background(), project); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
