package conformance_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/conformance"
	"github.com/wasmhost/wasmhost/host"
)

// loadRenamePolicy loads testplugins/rename-policy with the configuration
// its golden suite is written for.
func loadRenamePolicy(t *testing.T) *host.Plugin {
	t.Helper()
	dir := filepath.Join("..", "testplugins", "rename-policy")
	wasm, err := os.ReadFile(filepath.Join(dir, "rename-policy.wasm"))
	require.NoError(t, err, "build it with make plugins")
	config, err := os.ReadFile(filepath.Join(dir, "config.json"))
	require.NoError(t, err)
	p, err := host.Load(t.Context(), "rename-policy", wasm, host.Options{CacheDir: host.DefaultCacheDir(), Config: strings.TrimSpace(string(config))})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close(context.Background())) })
	return p
}

// batching gives a policy a batch path (one project call per item), so
// that the runner checks renames on that path too.
type batching struct{ abi.Policy }

func (b batching) ProjectBatch(ctx context.Context, req *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error) {
	return abi.ProjectAll(ctx, b.Policy, req)
}

// TestGoldenRenames: rename-policy passes its golden suite, which asserts
// renames and descriptions, on the project and the batch path.
func TestGoldenRenames(t *testing.T) {
	if testing.Short() {
		t.Skip("runs whole golden suites against the test plugins; TestGoldenDefaultPlugin stays in -short; run without -short")
	}
	p := loadRenamePolicy(t)
	conformance.RunPolicyT(t, p, filepath.Join("..", "testplugins", "rename-policy", "golden"))
	conformance.RunPolicyT(t, batching{p}, filepath.Join("..", "testplugins", "rename-policy", "golden"))
}

// TestGoldenRenamesMustBeStated: a projection with renames fails a case
// that does not state them, and a case stating renames the projection
// lacks fails, on either path, naming both forms.
func TestGoldenRenamesMustBeStated(t *testing.T) {
	p := loadRenamePolicy(t)
	suite := conformance.ParseSuite([]byte(`{"suite": "s", "cases": [
	  {"name": "unstated", "settings": {"shortNames": true},
	   "snapshot": {"tools": [{"name": "echo"}], "prompts": [{"name": "summarize"}]},
	   "project": {"tools": [{"name": "echo", "trust": false, "alwaysLoad": false}], "prompts": ["summarize"]}},
	  {"name": "stated wrongly", "settings": {"shortNames": true},
	   "snapshot": {"tools": [{"name": "echo", "description": "Say it back."}]},
	   "project": {"tools": [{"name": "echo", "trust": false, "alwaysLoad": false, "rename": "say", "description": "Say it back."}]}},
	  {"name": "missing", "settings": {},
	   "snapshot": {"prompts": [{"name": "summarize"}]},
	   "project": {"prompts": [{"name": "summarize", "rename": "sum"}]}}
	]}`))
	for _, pol := range []abi.Policy{p, batching{p}} {
		r := conformance.Run(t.Context(), pol, []*conformance.Suite{suite})
		require.Len(t, r.Results, 3)
		for _, res := range r.Results {
			assert.False(t, res.Passed, "%s", res)
			assert.Contains(t, res.Message, "projection differs", "%s", res)
		}
		assert.Contains(t, r.Results[0].Got, `"rename":"say","description":"Say it back."`)
		assert.Contains(t, r.Results[0].Got, `{"name":"summarize","rename":"sum"}`)
		// The snapshot's own description is no replacement.
		assert.Equal(t, `{"tools":[{"name":"echo","trust":false,"alwaysLoad":false,"rename":"say"}],"prompts":[],"resources":[]}`, r.Results[1].Got)
		assert.Equal(t, `{"tools":[],"prompts":["summarize"],"resources":[]}`, r.Results[2].Got)
	}
}

// TestGoldenRenamesMalformed: the additions to the format are strict.
func TestGoldenRenamesMalformed(t *testing.T) {
	for project, want := range map[string]string{
		`{"tools": [{"name": "a", "trust": false, "alwaysLoad": false, "rename": ""}]}`:   `tools[0]: rename: is empty`,
		`{"tools": [{"name": "a", "trust": false, "alwaysLoad": false, "rename": 1}]}`:    `tools[0]: rename: expected a string, got a number`,
		`{"tools": [{"name": "a", "trust": false, "alwaysLoad": false, "renamed": "b"}]}`: `tools[0]: renamed: unknown key`,
		`{"prompts": [{"name": "a"}]}`:                    `prompts[0]: an object needs "rename" or "description"`,
		`{"prompts": [{"rename": "a"}]}`:                  `prompts[0]: missing "name"`,
		`{"prompts": [{"name": "a", "as": "b"}]}`:         `prompts[0]: as: unknown key`,
		`{"prompts": [{"name": "a", "description": ""}]}`: `prompts[0]: description: is empty`,
		`{"prompts": [1]}`:                                `prompts[0]: expected a string or an object, got a number`,
	} {
		s := conformance.ParseSuite([]byte(`{"suite": "s", "cases": [{"name": "c", "settings": {}, "snapshot": {}, "project": ` + project + `}]}`))
		require.Len(t, s.Cases, 1)
		c := s.Cases[0]
		require.Equal(t, conformance.KindMalformed, c.Kind, project)
		assert.Contains(t, c.Err.Error(), want, project)
	}
}
