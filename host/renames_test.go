package host

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
)

// A plugin whose handshake does not opt into renames and answers project
// with a name and a description anyway gives bad output, and the
// instance is discarded, as for any bad output; the same plugin's other
// answers keep working.
func TestRenamesWithoutOptIn(t *testing.T) {
	p := loadHostile(t, "hostile", Options{MemoryLimitBytes: hostileCap})
	require.False(t, p.Handshake().Renames)
	_, err := p.Project(context.Background(), projectReq(`{"mode":"rename"}`))
	require.ErrorIs(t, err, ErrBadOutput)
	assert.Contains(t, err.Error(), `project: tools[0]: a name or description, but the handshake does not opt into renames ("renames": true)`)

	// Through the compact decoder's fallback for project_batch too.
	breq := &abi.ProjectBatchRequest{
		Settings:  []json.RawMessage{json.RawMessage(`{"mode":"rename"}`)},
		Snapshots: []abi.BatchSnapshot{{Tools: []string{"read"}, Prompts: []string{}, Resources: []string{}}},
		Items:     []abi.BatchItem{{Settings: 0, Snapshot: 0}},
	}
	_, err = p.ProjectBatch(context.Background(), breq)
	require.ErrorIs(t, err, ErrBadOutput)

	got, err := p.Project(context.Background(), projectReq(goodSettings))
	require.NoError(t, err)
	assert.Equal(t, wantProject(t, goodSettings), got)
}

// A plugin that opts in gets its renames through, checked: rename-policy
// renames what its configuration says for settings with shortNames, and a
// configuration that collides is bad output.
func TestRenamesOptIn(t *testing.T) {
	wasm, err := os.ReadFile(filepath.Join("..", "testplugins", "rename-policy", "rename-policy.wasm"))
	require.NoError(t, err, "build it with make plugins")
	load := func(config string) *Plugin {
		p, err := Load(context.Background(), "rename-policy", wasm, Options{CacheDir: testCacheDir, Config: config})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, p.Close(context.Background())) })
		return p
	}
	p := load(`{"tools":{"read":{"name":"r","description":"Reads."}},"prompts":{"summarize":{"name":"sum"}}}`)
	require.True(t, p.Handshake().Renames)
	got, err := p.Project(context.Background(), projectReq(`{"shortNames":true}`))
	require.NoError(t, err)
	assert.Equal(t, &abi.ProjectResponse{
		Tools:         []abi.ToolDecision{{Index: 0, Name: "r", Description: "Reads."}, {Index: 1}, {Index: 2}},
		Prompts:       []int{0, 1},
		PromptRenames: []abi.Rename{{}, {Name: "sum"}},
		Resources:     []int{0},
	}, got)
	got, err = p.Project(context.Background(), projectReq(`{}`))
	require.NoError(t, err)
	assert.False(t, got.HasRenames())
	assert.Nil(t, got.PromptRenames)

	bad := load(`{"tools":{"read":{"name":"list"}}}`)
	_, err = bad.Project(context.Background(), projectReq(`{"shortNames":true}`))
	require.ErrorIs(t, err, ErrBadOutput)
	assert.Contains(t, err.Error(), `tools[0] ("read") and tools[2] ("list") are both exposed as "list"`)
}
