package bench

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/metakey"
	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
)

// rawInstance is the default plugin as a bare extism instance, without
// wasmhost's host package: closeOnDone is wazero's CloseOnContextDone, which
// wasmhost sets for modules it cannot meter so that a runaway plugin can be
// interrupted.
func rawInstance(b *testing.B, closeOnDone bool) *extism.Plugin {
	b.Helper()
	ctx := context.Background()
	rc := wazero.NewRuntimeConfig().WithCloseOnContextDone(closeOnDone).WithMemoryLimitPages(abi.DefaultMemoryLimitBytes >> 16)
	manifest := extism.Manifest{Wasm: []extism.Wasm{extism.WasmData{Data: policydefault.Wasm, Name: "main"}}}
	cp, err := extism.NewCompiledPlugin(ctx, manifest, extism.PluginConfig{RuntimeConfig: rc, EnableWasi: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cp.Close(ctx) })
	inst, err := cp.Instance(ctx, extism.PluginInstanceConfig{})
	if err != nil {
		b.Fatal(err)
	}
	return inst
}

// encode marshals an ABI request as the host sends it (see host.padInput).
func encode(b *testing.B, req any) []byte {
	b.Helper()
	in, err := json.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	for len(in)%8 != 0 {
		in = append(in[:len(in)-1], ' ', '}')
	}
	return in
}

// projectRequest is the request view.Project sends the default plugin for
// snap.
func projectRequest(b *testing.B, settings json.RawMessage, snap *pool.Snapshot) *abi.ProjectRequest {
	b.Helper()
	names, err := view.SnapshotNames(snap, slices.Contains(wasmPolicy(b).Handshake().Wants, abi.WantToolAnnotations))
	if err != nil {
		b.Fatal(err)
	}
	return &abi.ProjectRequest{
		Settings:        settings,
		Tools:           names.Tools,
		ToolAnnotations: names.ToolAnnotations,
		Prompts:         names.Prompts,
		Resources:       names.Resources,
	}
}

// BenchmarkPolicyCallCost takes single policy calls apart, as evidence for
// what limits the wasm-versus-native ratios; it has no target. For the
// canonicalize call of BenchmarkCanonicalize1000 and the project calls of
// BenchmarkProject1000 (1,000 tools) and BenchmarkReconcileMetadata (10
// tools): "host" is the whole call through host.Plugin (the metered
// module, a direct call, JSON both ways, pool, timeout, validation);
// "extism" is the bare extism call of the unrewritten module with the same
// input bytes, under CloseOnContextDone as wasmhost ran plugins before it
// metered them; "extism-noclose" is that call without CloseOnContextDone, which
// wasmhost never runs (wazero then cannot interrupt a runaway plugin), to
// show what the termination checks cost; "native" is metakey.Reference.
// handshake/extism is the cheapest call of the Go plugin (a constant
// answer): the floor of one call into a Go guest.
func BenchmarkPolicyCallCost(b *testing.B) {
	ctx := context.Background()
	snap1000, snap10 := Snapshot("bench", 1000), Snapshot("bench", 10)
	p1000, p10 := projectRequest(b, ProjectSettings(1000), snap1000), projectRequest(b, Variant(3, 1, 0, 10), snap10)
	calls := []struct {
		name, export string
		req          any
		host         func() error
	}{
		{"canonicalize1000", abi.ExportCanonicalize,
			&abi.CanonicalizeRequest{Settings: CanonicalizeSettings(1000, 0)}, nil},
		{"project1000", abi.ExportProject, p1000, func() error {
			_, err := wasmPolicy(b).Project(ctx, p1000)
			return err
		}},
		{"project10", abi.ExportProject, p10, func() error {
			_, err := wasmPolicy(b).Project(ctx, p10)
			return err
		}},
	}
	for _, c := range calls {
		b.Run(c.name+"/host", func(b *testing.B) {
			b.ReportAllocs()
			if c.host == nil { // canonicalize: fresh settings defeat the memo
				req := &abi.CanonicalizeRequest{Settings: CanonicalizeSettings(1000, nextGeneration())}
				for b.Loop() {
					if _, err := wasmPolicy(b).Canonicalize(ctx, req); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					req = &abi.CanonicalizeRequest{Settings: CanonicalizeSettings(1000, nextGeneration())}
					b.StartTimer()
				}
				return
			}
			for b.Loop() {
				if err := c.host(); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, closeOnDone := range []bool{true, false} {
			name := c.name + "/extism"
			if !closeOnDone {
				name += "-noclose"
			}
			b.Run(name, func(b *testing.B) {
				inst := rawInstance(b, closeOnDone)
				in := encode(b, c.req)
				var out []byte
				b.ReportAllocs()
				for b.Loop() {
					var rc uint32
					var err error
					if rc, out, err = inst.CallWithContext(ctx, c.export, in); err != nil || rc != 0 {
						b.Fatal(rc, err)
					}
				}
				// The guest copies its input in and its output out through
				// the Extism kernel eight bytes at a time, each a host call.
				b.ReportMetric(float64(len(in)), "in-bytes")
				b.ReportMetric(float64(len(out)), "out-bytes")
			})
		}
	}
	b.Run("project10/native", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := (metakey.Reference{}).Project(ctx, p10); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("handshake/extism", func(b *testing.B) {
		inst := rawInstance(b, true)
		b.ReportAllocs()
		for b.Loop() {
			if rc, _, err := inst.CallWithContext(ctx, abi.ExportHandshake, nil); err != nil || rc != 0 {
				b.Fatal(rc, err)
			}
		}
	})
}
