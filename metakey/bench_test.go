package metakey_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/bench"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/view"
)

// The benchmarks here take their input from the fixtures of internal/bench,
// so that they measure the native reference's part of the end-to-end
// benchmarks of the same names there.

func BenchmarkCanonicalize1000(b *testing.B) {
	req := &abi.CanonicalizeRequest{Settings: bench.CanonicalizeSettings(1000, 0)}
	ctx := context.Background()
	resp, err := metakey.Reference{}.Canonicalize(ctx, req)
	require.NoError(b, err)
	seen := make(map[string]bool, len(resp.Results))
	for _, r := range resp.Results {
		require.Empty(b, r.Error)
		seen[r.Key] = true
	}
	require.Len(b, seen, 1000, "the benchmark settings must be distinct")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := (metakey.Reference{}).Canonicalize(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// benchProjectRequest is what view.Project sends the policy for the
// 1,000-tool snapshot of bench.Snapshot (100 prompts, 100 resources) and
// bench.ProjectSettings, which include most tools (some by name with
// arguments) and exclude a few.
func benchProjectRequest(b *testing.B) *abi.ProjectRequest {
	names, err := view.SnapshotNames(bench.Snapshot("bench", 1000), false)
	require.NoError(b, err)
	return &abi.ProjectRequest{
		Settings:  bench.ProjectSettings(1000),
		Tools:     names.Tools,
		Prompts:   names.Prompts,
		Resources: names.Resources,
	}
}

func BenchmarkProject1000(b *testing.B) {
	req := benchProjectRequest(b)
	ctx := context.Background()
	resp, err := metakey.Reference{}.Project(ctx, req)
	require.NoError(b, err)
	// 750 included (i%4 != 0), less the 50 of those also excluded (i%10 == 0).
	require.Equal(b, 700, len(resp.Tools))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := (metakey.Reference{}).Project(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseSettings(b *testing.B) {
	raw := bench.CanonicalizeSettings(2, 0)[1]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := metakey.ParseSettings(raw); err != nil {
			b.Fatal(err)
		}
	}
}
