package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"
)

// The expectations below come from the contract's canonical form (key
// order trust, alwaysLoadTools, includeTools, excludeTools; no spaces) and
// policy-semantics.md.

func TestDefaultPluginLoad(t *testing.T) {
	p := sharedDefault(t)
	assert.Equal(t, policydefault.Name, p.Name())
	assert.Equal(t, abi.Handshake{ABI: abi.Version, Name: "policy-default", Version: "1.0.0", CanonicalKeys: true}, p.Handshake())
	sum := sha256.Sum256(policydefault.Wasm)
	assert.Equal(t, hex.EncodeToString(sum[:]), p.Digest())

	insp, err := inspect(context.Background(), policydefault.Name, policydefault.Wasm, Options{CacheDir: testCacheDir}, nil)
	require.NoError(t, err)
	assert.True(t, insp.Accepted, insp.Reason)
	assert.Equal(t, abi.OptionalExports, insp.OptionalExports, "project_batch and every direct export")
	assert.True(t, insp.Metered, "the default plugin runs metered, without wazero's termination checks")
	assert.True(t, p.HasProjectBatch())
	assert.Equal(t, abi.DirectExports, p.direct)
	for _, imp := range insp.Imports {
		assert.Contains(t, []string{moduleExtismEnv, moduleWASI}, imp.Module)
	}
}

func TestDefaultPluginCanonicalize(t *testing.T) {
	p := sharedDefault(t)
	const empty = `{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}`
	tests := []struct {
		settings string
		key      string // or
		err      string
	}{
		{`{}`, empty, ""},
		{`{"trust":null,"alwaysLoadTools":false,"excludeTools":null}`, empty, ""},
		{`{"trust":false}`, `{"trust":false,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}`, ""},
		{`{"trust":true,"alwaysLoadTools":true}`, `{"trust":true,"alwaysLoadTools":true,"includeTools":null,"excludeTools":[]}`, ""},
		{`{"includeTools":["b(x)","a","a","(y)"],"excludeTools":["z","z(1)","z"]}`,
			`{"trust":null,"alwaysLoadTools":false,"includeTools":["","a","b"],"excludeTools":["z","z(1)"]}`, ""},
		{`{"includeTools":[]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":[],"excludeTools":[]}`, ""},
		{`{"includeTools":["<b>"]}`, `{"trust":null,"alwaysLoadTools":false,"includeTools":["\u003cb\u003e"],"excludeTools":[]}`, ""},
		{`{"trust":"false"}`, "", "trust: expected a boolean or null, got a string"},
		{`{"includeTools":["a",7]}`, "", "includeTools[1]: expected a string, got a number"},
		{`[]`, "", "expected an object, got an array"},
		{`{"trust":true,"trust":false}`, "", `duplicate key "trust"`},
	}
	req := &abi.CanonicalizeRequest{}
	for _, tt := range tests {
		req.Settings = append(req.Settings, json.RawMessage(tt.settings))
	}
	resp, err := p.Canonicalize(context.Background(), req)
	require.NoError(t, err)
	require.Len(t, resp.Results, len(tests))
	for i, tt := range tests {
		got := resp.Results[i]
		if tt.err != "" {
			assert.Contains(t, got.Error, tt.err, "settings %s", tt.settings)
			assert.Empty(t, got.Key, "settings %s", tt.settings)
			continue
		}
		assert.Empty(t, got.Error, "settings %s", tt.settings)
		assert.Equal(t, tt.key, got.Key, "settings %s", tt.settings)
	}
}

func TestDefaultPluginProject(t *testing.T) {
	p := sharedDefault(t)
	ctx := context.Background()
	resp, err := p.Project(ctx, &abi.ProjectRequest{
		Settings:  json.RawMessage(`{"includeTools":["a","b(x)","p"],"excludeTools":["b"],"trust":true,"alwaysLoadTools":true}`),
		Tools:     []string{"a", "b", "c", ""},
		Prompts:   []string{"p", "x", "b"},
		Resources: []string{"file:///1", "file:///2"},
	})
	require.NoError(t, err)
	want := &abi.ProjectResponse{
		Tools:     []abi.ToolDecision{{Index: 0, Trust: true, AlwaysLoad: true}},
		Prompts:   []int{0},
		Resources: []int{0, 1},
	}
	if diff := cmp.Diff(want, resp); diff != "" {
		t.Errorf("projection (-want +got):\n%s", diff)
	}

	resp, err = p.Project(ctx, &abi.ProjectRequest{
		Settings: json.RawMessage(`{"trust":false}`),
		Tools:    []string{"x", "y"},
	})
	require.NoError(t, err)
	want = &abi.ProjectResponse{
		Tools:     []abi.ToolDecision{{Index: 0}, {Index: 1}},
		Prompts:   []int{},
		Resources: []int{},
	}
	if diff := cmp.Diff(want, resp); diff != "" {
		t.Errorf("projection (-want +got):\n%s", diff)
	}

	_, err = p.Project(ctx, &abi.ProjectRequest{Settings: json.RawMessage(`{"excludeTools":{}}`), Tools: []string{"x"}})
	require.ErrorIs(t, err, ErrPluginRefused)
	assert.Contains(t, err.Error(), `plugin "embedded:policy-default": project: plugin refused the input: `)
	assert.Contains(t, err.Error(), "excludeTools: expected")
}

func TestDefaultPluginHammer(t *testing.T) {
	p := loadDefault(t, Options{MaxInstances: 2})
	hammer(t, p, func(t *testing.T, g, i int) {
		name := fmt.Sprintf("t%d", i%5)
		if i%2 == 0 {
			resp, err := p.Canonicalize(context.Background(), &abi.CanonicalizeRequest{Settings: raws(
				fmt.Sprintf(`{"excludeTools":[%q]}`, name),
			)})
			if assert.NoError(t, err) {
				assert.Equal(t, fmt.Sprintf(`{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[%q]}`, name), resp.Results[0].Key)
			}
			return
		}
		resp, err := p.Project(context.Background(), &abi.ProjectRequest{
			Settings: json.RawMessage(fmt.Sprintf(`{"excludeTools":[%q]}`, name)),
			Tools:    []string{"t0", "t1", "t2", "t3", "t4"},
		})
		if assert.NoError(t, err) && assert.Len(t, resp.Tools, 4) {
			for _, d := range resp.Tools {
				assert.NotEqual(t, name, fmt.Sprintf("t%d", d.Index))
			}
		}
	})
	assert.LessOrEqual(t, p.stats.peak.Load(), int64(2))
}

// TestGoPluginsReclaimMemory calls the default plugin, a Go reactor, many
// times under a small memory cap. A Go reactor runs the garbage
// collector's workers and sweeper only when an export yields to the Go
// scheduler (see yield in plugins/policy-default/main.go); before the
// plugin's exports did, the heap outgrew the cap and this loop trapped
// with "out of memory" at call 419, both ways.
func TestGoPluginsReclaimMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("makes 1,400 calls of 1,000 settings objects")
	}
	request := func(call int) []byte {
		req := []byte(`{"settings":[`)
		for i := range 1000 {
			if i > 0 {
				req = append(req, ',')
			}
			req = fmt.Appendf(req, `{"x%d":%d}`, i, call)
		}
		return append(req, "]}"...)
	}
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprintf("direct=%t", direct), func(t *testing.T) {
			p := loadDefault(t, Options{MemoryLimitBytes: 16 << 20, NoDirect: !direct, MaxInstances: 1})
			for i := range 700 {
				// The plugin's own call: the host's memo does not answer.
				err := p.call(context.Background(), abi.ExportCanonicalize, request(i), func([]byte) error { return nil })
				require.NoError(t, err, "call %d", i)
			}
			assert.Zero(t, p.stats.discarded.Load(), "no instance was discarded")
		})
	}
}

// TestDefaultTooLittleMemorySaysSo loads the default plugin with a memory
// limit its Go runtime cannot start in: the refusal quotes what the
// runtime said, so the operator sees which setting to raise.
func TestDefaultTooLittleMemorySaysSo(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprintf("direct=%t", direct), func(t *testing.T) {
			// Through the tests' compilation cache: the limit bites when
			// the instance starts, whether the code was compiled now or
			// before (compiling twice afresh took 45 s under -race).
			_, err := loadEmbeddedDefault(context.Background(), Options{MemoryLimitBytes: 3 << 20, NoDirect: !direct, CacheDir: testCacheDir})
			require.Error(t, err)
			// The Go runtime says "out of memory" or "runtime: cannot
			// allocate memory", depending on where it runs out.
			assert.Contains(t, err.Error(), `(the plugin wrote "fatal error: `)
			assert.Contains(t, err.Error(), ` memory" to stderr`)
		})
	}
}
