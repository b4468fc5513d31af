package metakey

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
)

// benchSettings returns n distinct settings objects shaped like real server
// entries: a mix of trust values, include lists with and without arguments,
// exclude lists, and transport keys the policy ignores.
func benchSettings(n int) []json.RawMessage {
	trusts := []string{``, `"trust":null,`, `"trust":false,`, `"trust":true,`}
	out := make([]json.RawMessage, n)
	for i := range out {
		include := `null`
		if i%3 != 0 {
			include = fmt.Sprintf(`["read_file(path)","write_file","list_dir","search_%d","grep(pattern, path)","tool_%d"]`, i%17, i)
		}
		out[i] = json.RawMessage(fmt.Sprintf(
			`{"command":"npx","args":["-y","@modelcontextprotocol/server-%d"],%s"alwaysLoadTools":%t,"includeTools":%s,"excludeTools":["delete_%d","move_file","chmod"]}`,
			i, trusts[i%4], i%2 == 0, include, i))
	}
	return out
}

func BenchmarkCanonicalize1000(b *testing.B) {
	req := &abi.CanonicalizeRequest{Settings: benchSettings(1000)}
	ctx := context.Background()
	resp, err := Reference{}.Canonicalize(ctx, req)
	require.NoError(b, err)
	seen := make(map[string]bool, len(resp.Results))
	for _, r := range resp.Results {
		require.Empty(b, r.Error)
		seen[r.Key] = true
	}
	require.Len(b, seen, 1000, "the benchmark settings must be distinct")
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := (Reference{}).Canonicalize(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// benchProjectRequest is a 1,000-tool server with prompts and resources, and
// settings that include most tools (some by name with arguments) and exclude
// a few.
func benchProjectRequest() *abi.ProjectRequest {
	req := &abi.ProjectRequest{}
	var include, exclude []string
	for i := range 1000 {
		name := fmt.Sprintf("tool_%04d", i)
		req.Tools = append(req.Tools, name)
		if i%4 != 0 {
			include = append(include, name+"(args)")
		}
		if i%10 == 0 {
			exclude = append(exclude, name)
		}
	}
	for i := range 100 {
		req.Prompts = append(req.Prompts, fmt.Sprintf("tool_%04d", i*7))
		req.Resources = append(req.Resources, fmt.Sprintf("file:///data/%d.txt", i))
	}
	settings, err := json.Marshal(map[string]any{
		"trust": true, "alwaysLoadTools": true, "includeTools": include, "excludeTools": exclude,
	})
	if err != nil {
		panic(err)
	}
	req.Settings = settings
	return req
}

func BenchmarkProject1000(b *testing.B) {
	req := benchProjectRequest()
	ctx := context.Background()
	resp, err := Reference{}.Project(ctx, req)
	require.NoError(b, err)
	// 750 included (i%4 != 0), less the 50 of those also excluded (i%10 == 0).
	require.Equal(b, 700, len(resp.Tools))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := (Reference{}).Project(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseSettings(b *testing.B) {
	raw := benchSettings(2)[1]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseSettings(raw); err != nil {
			b.Fatal(err)
		}
	}
}
