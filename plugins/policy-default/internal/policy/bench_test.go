package policy

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/wasmhost/wasmhost/abi"
)

// benchCanonicalizeRequest is a canonicalize request with n distinct
// settings objects shaped like server entries: transport keys the policy
// ignores, a mix of trust values, include lists with and without arguments,
// and exclude lists.
func benchCanonicalizeRequest(n int) []byte {
	trusts := []string{``, `"trust":null,`, `"trust":false,`, `"trust":true,`}
	req := abi.CanonicalizeRequest{Settings: make([]json.RawMessage, n)}
	for i := range req.Settings {
		include := `null`
		if i%3 != 0 {
			include = fmt.Sprintf(`["read_file(path)","write_file","list_dir","search_%d","grep(pattern, path)","tool_%d"]`, i%17, i)
		}
		req.Settings[i] = json.RawMessage(fmt.Sprintf(
			`{"command":"npx","args":["-y","@modelcontextprotocol/server-%d"],%s"alwaysLoadTools":%t,"includeTools":%s,"excludeTools":["delete_%d","move_file","chmod"]}`,
			i, trusts[i%4], i%2 == 0, include, i))
	}
	b, err := json.Marshal(&req)
	if err != nil {
		panic(err)
	}
	return b
}

// benchProjectRequest is a project request for a 1,000-tool server with
// prompts and resources, whose settings include most tools (by name with
// arguments) and exclude a few.
func benchProjectRequest() []byte {
	var req abi.ProjectRequest
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
	b, err := json.Marshal(&req)
	if err != nil {
		panic(err)
	}
	return b
}

// benchExport measures export, Canonicalize, Project or ProjectBatch, on
// req.
func benchExport(b *testing.B, export func([]byte) ([]byte, error), req []byte) {
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := export(req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCanonicalize1000(b *testing.B) {
	benchExport(b, Canonicalize, benchCanonicalizeRequest(1000))
}

func BenchmarkProject1000(b *testing.B) { benchExport(b, Project, benchProjectRequest()) }

// benchProjectBatchRequest is a project_batch request of 2,000 items: every
// pair of 20 settings variants and 100 snapshots of 10 tools, the shape of
// host.BenchmarkProjectBatch.
func benchProjectBatchRequest() []byte {
	var req abi.ProjectBatchRequest
	for v := range 20 {
		req.Settings = append(req.Settings, json.RawMessage(fmt.Sprintf(
			`{"trust":%t,"alwaysLoadTools":%t,"excludeTools":["tool_%d"],"n":%d}`, v%2 == 0, v%3 == 0, v%10, v)))
	}
	for k := range 100 {
		s := abi.BatchSnapshot{Prompts: []string{"p_0", fmt.Sprintf("p_%d", k)}, Resources: []string{"a", "b"}}
		for i := range 10 {
			s.Tools = append(s.Tools, fmt.Sprintf("tool_%d", i))
		}
		req.Snapshots = append(req.Snapshots, s)
		for v := range req.Settings {
			req.Items = append(req.Items, abi.BatchItem{Settings: v, Snapshot: k})
		}
	}
	b, err := json.Marshal(&req)
	if err != nil {
		panic(err)
	}
	return b
}

func BenchmarkProjectBatch2000(b *testing.B) {
	benchExport(b, ProjectBatch, benchProjectBatchRequest())
}
