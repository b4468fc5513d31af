package host

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
)

// TestDirectCallsUsed checks that the default plugin is called in direct
// form, and answers exactly what its Extism exports answer, refusals
// included. It also fails when extismModules cannot reach the modules of
// the pinned extism go-sdk.
func TestDirectCallsUsed(t *testing.T) {
	ctx := context.Background()
	direct := loadDefault(t, Options{})
	extismOnly := loadDefault(t, Options{NoDirect: true})
	require.Equal(t, abi.DirectExports, direct.direct)
	require.Empty(t, extismOnly.direct)

	settings := raws(`{}`, `{"trust":true,"alwaysLoadTools":true}`, `{"includeTools":["b(x)","a","a"],"excludeTools":["z"]}`,
		`{"trust":"false"}`, `[]`, `{"includeTools":["a",7]}`, `null`, `{"trust":true,"trust":false}`)
	snap := abi.BatchSnapshot{Tools: []string{"a", "b", "z", ""}, Prompts: []string{"a", "p"}, Resources: []string{"file:///1"}}
	batch := &abi.ProjectBatchRequest{Settings: settings, Snapshots: []abi.BatchSnapshot{snap}}
	for i := range settings {
		batch.Items = append(batch.Items, abi.BatchItem{Settings: i, Snapshot: 0})
	}
	type answers struct {
		Canon   *abi.CanonicalizeResponse
		Project []string // each answer or refusal, as text
		Batch   *abi.ProjectBatchResponse
	}
	ask := func(p *Plugin) answers {
		t.Helper()
		var a answers
		var err error
		a.Canon, err = p.Canonicalize(ctx, &abi.CanonicalizeRequest{Settings: settings})
		require.NoError(t, err)
		for i := range settings {
			resp, err := p.Project(ctx, batch.ItemRequest(i))
			if err != nil {
				require.ErrorIs(t, err, ErrPluginRefused)
				// The message names the plugin, which is the same for both.
				a.Project = append(a.Project, err.Error())
				continue
			}
			a.Project = append(a.Project, fmt.Sprintf("%+v", *resp))
		}
		a.Batch, err = p.ProjectBatch(ctx, batch)
		require.NoError(t, err)
		return a
	}
	before := direct.stats.direct.Load()
	got := ask(direct)
	assert.GreaterOrEqual(t, direct.stats.direct.Load()-before, int64(2+len(settings)), "calls made in direct form")
	want := ask(extismOnly)
	assert.Zero(t, extismOnly.stats.direct.Load(), "NoDirect makes no direct call")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("direct answers differ from Extism's (-extism +direct):\n%s", diff)
	}
	assert.Contains(t, strings.Join(got.Project, "\n"), "plugin refused the input", "the cases include refusals")
}

// TestDirectMisbehaviour checks each way a direct export can go wrong: the
// error it gives, and whether the instance is discarded.
func TestDirectMisbehaviour(t *testing.T) {
	p := loadWat(t, "direct", Options{CallTimeout: 300 * time.Millisecond})
	require.Equal(t, []string{abi.ExportCanonicalize}, p.direct, "only canonicalize has a direct form")
	tests := []struct {
		settings string
		is       error
		msg      string
		discards bool
	}{
		{`"L"`, ErrPluginTimeout, "plugin call timed out (limit 300ms)", true},
		{`"T"`, ErrPluginTrap, "unreachable", true},
		{`"R"`, ErrPluginRefused, "plugin refused the input: refused directly", false},
		{`"A"`, ErrBadOutput, "the answer at address 4294901760, 16 bytes, is outside the plugin's memory (131072 bytes)", true},
		{`"N"`, ErrBadOutput, "2147483647 bytes of output, limit 16777216", true},
		{`"X"`, ErrPluginTrap, "the guest exited with code 2", true},
		{`"` + strings.Repeat("Z", 130000) + `"`, ErrBadOutput, "wasmhost_alloc returned address 4096, and 130017 bytes from it are outside the plugin's memory (131072 bytes)", true},
	}
	for _, tt := range tests {
		t.Run(tt.settings[:min(len(tt.settings), 3)], func(t *testing.T) {
			discarded := p.stats.discarded.Load()
			_, err := p.Canonicalize(context.Background(), &abi.CanonicalizeRequest{Settings: raws(tt.settings)})
			require.ErrorIs(t, err, tt.is)
			assert.Contains(t, err.Error(), `plugin "direct": canonicalize: `)
			assert.Contains(t, err.Error(), tt.msg)
			assert.NotContains(t, err.Error(), "\n", "one line")
			assert.Equal(t, tt.discards, p.stats.discarded.Load() > discarded, "instance discarded")
			// The plugin still answers.
			resp, err := p.Canonicalize(context.Background(), &abi.CanonicalizeRequest{Settings: raws(`{"n":` + fmt.Sprint(len(tt.settings)) + `}`)})
			require.NoError(t, err)
			assert.Equal(t, "d", resp.Results[0].Key)
		})
	}
}

// TestDirectKernelCalls checks that a direct call can use the Extism kernel
// (here its logging), which needs the context values Extism sets for its
// own calls.
func TestDirectKernelCalls(t *testing.T) {
	var (
		mu   sync.Mutex
		logs strings.Builder
	)
	h := slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(b)
	}), &slog.HandlerOptions{Level: slog.LevelDebug})
	p := loadWat(t, "direct", Options{Logger: slog.New(h)})
	direct := p.stats.direct.Load()
	resp, err := p.Canonicalize(context.Background(), &abi.CanonicalizeRequest{Settings: raws(`"G"`)})
	require.NoError(t, err)
	assert.Equal(t, "d", resp.Results[0].Key, "answered by canonicalize_direct")
	assert.EqualValues(t, 1, p.stats.direct.Load()-direct)
	mu.Lock()
	defer mu.Unlock()
	assert.Contains(t, logs.String(), "message=hello")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestDirectExportTypes checks that a direct export of the wrong type
// refuses the plugin, like a wrong project_batch.
func TestDirectExportTypes(t *testing.T) {
	wrong := []Export{
		{Name: abi.ExportAlloc, Kind: "func", Signature: "() -> i32"},
		{Name: abi.ExportCanonicalize + abi.DirectSuffix, Kind: "func", Signature: "(i32, i32) -> i64"},
	}
	err := checkExports(wrong, []string{abi.ExportAlloc, abi.ExportCanonicalize + abi.DirectSuffix})
	require.ErrorIs(t, err, ErrMissingExport)
	assert.EqualError(t, err, "missing or mistyped export: wasmhost_alloc has signature () -> i32, want (i32) -> i32")
	assert.Equal(t, "(i32, i32) -> i64", abi.ExportSignature("project_batch_direct"))
	assert.Equal(t, "() -> i32", abi.ExportSignature(abi.ExportProjectBatch))
}

func TestDirectResultPacking(t *testing.T) {
	for _, c := range []struct {
		addr, n uint32
		refused bool
	}{{0, 0, false}, {4096, 25, true}, {0xFFFFFFFF, 0x7FFFFFFF, false}, {1, 0x7FFFFFFF, true}} {
		addr, n, refused := abi.DirectResult(abi.PackDirectResult(c.addr, c.n, c.refused))
		assert.Equal(t, c, struct {
			addr, n uint32
			refused bool
		}{addr, n, refused})
	}
}
