package bench

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/view"
)

// BenchmarkCanonicalize1000 canonicalizes a batch of 1,000 distinct settings
// objects in one call. Every iteration sends a fresh batch (made with the
// timer stopped) that no earlier call has seen, so the host's memo never
// answers: each wasm iteration is one real plugin call over 1,000 settings.
func BenchmarkCanonicalize1000(b *testing.B) {
	for _, np := range policies(b) {
		b.Run(np.name, func(b *testing.B) {
			ctx := context.Background()
			req := &abi.CanonicalizeRequest{Settings: CanonicalizeSettings(1000, nextGeneration())}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := np.p.Canonicalize(ctx, req)
				if err != nil || len(resp.Results) != 1000 || resp.Results[999].Key == "" {
					b.Fatal(resp, err)
				}
				b.StopTimer()
				req = &abi.CanonicalizeRequest{Settings: CanonicalizeSettings(1000, nextGeneration())}
				b.StartTimer()
			}
		})
	}
}

// TestCanonicalizeSettingsDistinct checks that the batches of
// BenchmarkCanonicalize1000 are distinct within a batch and between
// batches, in canonical form too.
func TestCanonicalizeSettingsDistinct(t *testing.T) {
	ctx := context.Background()
	keys := make(map[string]bool)
	for _, batch := range []int{1, 2} {
		for _, np := range policies(t) {
			resp, err := np.p.Canonicalize(ctx, &abi.CanonicalizeRequest{Settings: CanonicalizeSettings(1000, batch)})
			require.NoError(t, err, np.name)
			for i, r := range resp.Results {
				require.Empty(t, r.Error, "%s: settings %d", np.name, i)
				keys[r.Key] = true
			}
		}
	}
	require.Len(t, keys, 2000, "both policies give the same 2,000 distinct keys")
}

// BenchmarkProject1000 projects a 1,000-tool snapshot (tools with input
// schemas and annotations, 100 prompts, 100 resources) for settings that
// keep 700 tools, through view.Project: names cross into the policy, the
// host clones the visible tools. The policy is not memoized on this path.
func BenchmarkProject1000(b *testing.B) {
	snap := Snapshot("bench", 1000)
	settings := ProjectSettings(1000)
	for _, np := range policies(b) {
		b.Run(np.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				proj, err := view.Project(ctx, np.p, settings, snap)
				if err != nil || len(proj.Tools) != 700 {
					b.Fatal(err)
				}
			}
		})
	}
}
