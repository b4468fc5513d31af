package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/metakey"
)

// batchSettings are settings objects for batches: the four settings in
// several forms (spacing the fast path of the default plugin does not
// take), and refused ones.
var batchSettings = []string{
	`{}`, `null`, `{"trust":true}`, `{"trust":false,"alwaysLoadTools":true}`,
	`{"includeTools":["a","b(x)","p1"],"trust":true,"alwaysLoadTools":true}`,
	`{"excludeTools":["b","p0"]}`, `{ "includeTools" : [ "c" , "a" ] }`, `{"includeTools":[]}`,
	`{"command":"npx","args":["-y","x"],"excludeTools":["a"],"trust":null}`,
	`{"includeTools":["\u0061","<b>"],"excludeTools":["c"]}`,
	`{"trust":"yes"}`, `{"includeTools":["a",7]}`, `[]`, `{"trust":true,"trust":false}`, `{"excludeTools":{}}`,
}

// batchNames are the names snapshots are made of.
var batchNames = []string{"a", "b", "c", "d", "", "<b>", "b(x)", "p0", "p1", "é"}

// randomProjectBatch returns a batch over random snapshots, with repeated
// settings objects (at other indexes too), repeated snapshots and repeated
// pairs.
func randomProjectBatch(rng *rand.Rand, items int) *abi.ProjectBatchRequest {
	req := &abi.ProjectBatchRequest{}
	for range 1 + rng.IntN(12) {
		req.Settings = append(req.Settings, json.RawMessage(batchSettings[rng.IntN(len(batchSettings))]))
	}
	names := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = batchNames[rng.IntN(len(batchNames))]
		}
		return out
	}
	for range 1 + rng.IntN(6) {
		s := abi.BatchSnapshot{Tools: names(rng.IntN(12)), Prompts: names(rng.IntN(4))}
		for i := range rng.IntN(3) {
			s.Resources = append(s.Resources, fmt.Sprintf("file:///r%d", i))
		}
		req.Snapshots = append(req.Snapshots, s)
		if rng.IntN(4) == 0 {
			req.Snapshots = append(req.Snapshots, s) // the same contents twice
		}
	}
	for range items {
		req.Items = append(req.Items, abi.BatchItem{Settings: rng.IntN(len(req.Settings)), Snapshot: rng.IntN(len(req.Snapshots))})
	}
	return req
}

// eachByProject answers every item of req with p.Project: the projection or
// the plugin's refusal message.
func eachByProject(t *testing.T, p *Plugin, req *abi.ProjectBatchRequest) []abi.BatchResult {
	t.Helper()
	want := make([]abi.BatchResult, len(req.Items))
	for i := range req.Items {
		resp, err := p.Project(context.Background(), req.ItemRequest(i))
		var refused *refusedError
		switch {
		case errors.As(err, &refused):
			want[i].Error = refused.msg
		default:
			require.NoError(t, err, "items[%d]", i)
			want[i].ProjectResponse = resp
		}
	}
	return want
}

func TestDefaultPluginProjectBatch(t *testing.T) {
	p := loadDefault(t, Options{})
	require.True(t, p.HasProjectBatch())
	rng := rand.New(rand.NewPCG(1, 2))
	var refused, shown int
	for range 40 {
		req := randomProjectBatch(rng, rng.IntN(80))
		calls := p.stats.calls.Load()
		resp, err := p.ProjectBatch(context.Background(), req)
		require.NoError(t, err)
		if len(req.Items) > 0 {
			assert.EqualValues(t, 1, p.stats.calls.Load()-calls, "one call for the batch")
		}
		require.NoError(t, abi.ValidateProjectBatch(req, resp))
		want := eachByProject(t, p, req)
		if diff := cmp.Diff(want, resp.Results); diff != "" {
			t.Fatalf("(-project +project_batch)\n%s", diff)
		}
		for _, r := range resp.Results {
			switch {
			case r.Error != "":
				refused++
				assert.Nil(t, r.ProjectResponse)
				assert.ErrorIs(t, r.Err(), abi.ErrRefused)
			case len(r.Tools) > 0:
				shown++
			}
		}
	}
	assert.Positive(t, refused)
	assert.Positive(t, shown)

	// The same through abi.ProjectAll, which uses ProjectBatch.
	req := randomProjectBatch(rng, 30)
	calls := p.stats.calls.Load()
	all, err := abi.ProjectAll(context.Background(), p, req)
	require.NoError(t, err)
	assert.EqualValues(t, 1, p.stats.calls.Load()-calls)
	if diff := cmp.Diff(eachByProject(t, p, req), all.Results); diff != "" {
		t.Fatalf("(-project +ProjectAll)\n%s", diff)
	}
}

// TestProjectBatchMatchesReference compares the default plugin's batches
// with the native reference's, refusal messages included.
func TestProjectBatchMatchesReference(t *testing.T) {
	p := sharedDefault(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		req := randomProjectBatch(rng, 100)
		got, err := p.ProjectBatch(context.Background(), req)
		require.NoError(t, err)
		want, err := metakey.Reference{}.ProjectBatch(context.Background(), req)
		require.NoError(t, err)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("(-reference +wasm)\n%s", diff)
		}
	}
}

// asPolicyPath is the AssemblyScript default policy, which has no
// project_batch export.
var asPolicyPath = filepath.Join("..", "testplugins", "policy-default-as", "policy-default-as.wasm")

func TestProjectBatchFallback(t *testing.T) {
	wasm, err := os.ReadFile(asPolicyPath)
	require.NoError(t, err)
	as, err := Load(context.Background(), "as", wasm, Options{CacheDir: testCacheDir, CallTimeout: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, as.Close(context.Background())) })
	require.False(t, as.HasProjectBatch())
	def := sharedDefault(t)

	rng := rand.New(rand.NewPCG(5, 6))
	for range 10 {
		req := randomProjectBatch(rng, 40)
		distinct := map[[2]string]bool{}
		for i := range req.Items {
			b, err := json.Marshal(req.ItemRequest(i))
			require.NoError(t, err)
			distinct[[2]string{string(req.Settings[req.Items[i].Settings]), string(b)}] = true
		}
		calls := as.stats.calls.Load()
		got, err := as.ProjectBatch(context.Background(), req)
		require.NoError(t, err)
		assert.EqualValues(t, len(distinct), as.stats.calls.Load()-calls, "one project call per distinct item")
		want, err := def.ProjectBatch(context.Background(), req)
		require.NoError(t, err)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("(-project_batch of the default plugin +project per item of the AS plugin)\n%s", diff)
		}
	}
}

func TestProjectBatchFallbackFailure(t *testing.T) {
	p := loadHostile(t, "hostile", Options{MemoryLimitBytes: hostileCap})
	require.False(t, p.HasProjectBatch())
	req := &abi.ProjectBatchRequest{
		Settings:  raws(goodSettings, `{"mode":"nonsense"}`, `{"mode":"panic","in":"project"}`),
		Snapshots: []abi.BatchSnapshot{{Tools: []string{"read", "write"}}},
		Items:     []abi.BatchItem{{Settings: 0, Snapshot: 0}, {Settings: 1, Snapshot: 0}},
	}
	resp, err := p.ProjectBatch(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, []abi.ToolDecision{{Index: 0, Trust: true}}, resp.Results[0].Tools)
	assert.Contains(t, resp.Results[1].Error, "nonsense", "an unknown mode is refused, per item")

	req.Items = append(req.Items, abi.BatchItem{Settings: 2, Snapshot: 0})
	_, err = p.ProjectBatch(context.Background(), req)
	require.ErrorIs(t, err, ErrPluginTrap)
	assert.NotErrorIs(t, err, abi.ErrRefused)
	assert.Contains(t, err.Error(), `plugin "hostile": project_batch: items[2]: project (the plugin has no project_batch export): plugin trapped`)
}

// scriptBatch is a request for the script plugin, whose project_batch
// answers each settings object as the result of the item at its position:
// items [i, 0] over a snapshot of two tools, one prompt and two resources.
func scriptBatch(results ...string) *abi.ProjectBatchRequest {
	req := &abi.ProjectBatchRequest{
		Settings:  raws(results...),
		Snapshots: []abi.BatchSnapshot{{Tools: []string{"a", "b"}, Prompts: []string{"p"}, Resources: []string{"r1", "r2"}}},
	}
	for i := range results {
		req.Items = append(req.Items, abi.BatchItem{Settings: i})
	}
	return req
}

func TestProjectBatchEcho(t *testing.T) {
	p := loadWat(t, "script", Options{})
	require.True(t, p.HasProjectBatch())
	long := strings.Repeat("x", 2000)
	resp, err := p.ProjectBatch(context.Background(), scriptBatch(
		`{"tools":[{"i":1,"trust":true}],"resources":[1]}`, `{"error":"no"}`, `{}`, `{"error":"`+long+`"}`,
	))
	require.NoError(t, err)
	want := []abi.BatchResult{
		{ProjectResponse: &abi.ProjectResponse{Tools: []abi.ToolDecision{{Index: 1, Trust: true}}, Prompts: []int{}, Resources: []int{1}}},
		{Error: "no"},
		{ProjectResponse: &abi.ProjectResponse{Tools: []abi.ToolDecision{}, Prompts: []int{}, Resources: []int{}}},
		{Error: refusalText(long)},
	}
	if diff := cmp.Diff(want, resp.Results); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	assert.True(t, strings.HasSuffix(resp.Results[3].Error, "... (2000 bytes)"), "per-item messages are cut as refusals are")
}

// TestProjectBatchDeduplicates: equal settings bytes and equal snapshot
// contents are sent once, whatever their indexes, and so is each pair; the
// script plugin's echo shows what was sent.
func TestProjectBatchDeduplicates(t *testing.T) {
	p := loadWat(t, "script", Options{})
	s0 := `{"tools":[{"i":0}],"prompts":[0]}`
	s1 := `{"error":"no"}`
	snap := abi.BatchSnapshot{Tools: []string{"a"}, Prompts: []string{"p"}}
	req := &abi.ProjectBatchRequest{
		Settings:  raws(s0, s1, s0),
		Snapshots: []abi.BatchSnapshot{snap, snap},
		Items:     []abi.BatchItem{{Settings: 0, Snapshot: 0}, {Settings: 0, Snapshot: 1}, {Settings: 2, Snapshot: 0}, {Settings: 1, Snapshot: 1}, {Settings: 0, Snapshot: 0}},
	}
	calls := p.stats.calls.Load()
	resp, err := p.ProjectBatch(context.Background(), req)
	require.NoError(t, err, "two settings objects sent, so two distinct pairs, or the echo would not fit")
	assert.EqualValues(t, 1, p.stats.calls.Load()-calls)
	for _, i := range []int{0, 1, 2, 4} {
		assert.Equal(t, []abi.ToolDecision{{Index: 0}}, resp.Results[i].Tools, "items[%d]", i)
	}
	assert.Equal(t, "no", resp.Results[3].Error)

	// Items that share a pair get copies.
	resp.Results[0].Tools[0].Trust = true
	resp.Results[0].Prompts[0] = 9
	assert.False(t, resp.Results[1].Tools[0].Trust)
	assert.Equal(t, []int{0}, resp.Results[4].Prompts)
}

func TestProjectBatchSplits(t *testing.T) {
	p := loadDefault(t, Options{})
	ctx := context.Background()

	// More items than abi.MaxBatch: three calls.
	n := 2*abi.MaxBatch + 5
	req := &abi.ProjectBatchRequest{Snapshots: []abi.BatchSnapshot{{Tools: []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6"}}}}
	for i := range n {
		req.Settings = append(req.Settings, json.RawMessage(fmt.Sprintf(`{"n":%d,"excludeTools":["t%d"]}`, i, i%7)))
		req.Items = append(req.Items, abi.BatchItem{Settings: i})
	}
	calls := p.stats.calls.Load()
	resp, err := p.ProjectBatch(ctx, req)
	require.NoError(t, err)
	assert.EqualValues(t, 3, p.stats.calls.Load()-calls, "calls for %d items (MaxBatch %d)", n, abi.MaxBatch)
	for i, r := range resp.Results {
		require.Len(t, r.Tools, 6, "items[%d]", i)
		for _, d := range r.Tools {
			require.NotEqual(t, i%7, d.Index, "items[%d] sees its excluded tool", i)
		}
	}

	// Items whose answers could be large: as many calls as the output
	// budget needs, however few the items.
	big := abi.BatchSnapshot{Tools: make([]string, 20000)}
	for i := range big.Tools {
		big.Tools[i] = fmt.Sprintf("tool_%05d", i)
	}
	perCall := batchOutputBudget / answerBound(&big)
	require.Greater(t, perCall, 1)
	req = &abi.ProjectBatchRequest{Snapshots: []abi.BatchSnapshot{big}}
	items := 2*perCall + 1
	for i := range items {
		req.Settings = append(req.Settings, json.RawMessage(fmt.Sprintf(`{"trust":true,"excludeTools":["tool_%05d"]}`, i)))
		req.Items = append(req.Items, abi.BatchItem{Settings: i})
	}
	calls = p.stats.calls.Load()
	resp, err = p.ProjectBatch(ctx, req)
	require.NoError(t, err)
	assert.EqualValues(t, 3, p.stats.calls.Load()-calls, "%d items of at most %d bytes each", items, answerBound(&big))
	for i, r := range resp.Results {
		require.Len(t, r.Tools, len(big.Tools)-1, "items[%d]", i)
	}
}

// TestProjectBatchSplitFailure: when one call of a split batch fails, the
// error names that call's first item and size.
func TestProjectBatchSplitFailure(t *testing.T) {
	p := loadWat(t, "script", Options{})
	big := abi.BatchSnapshot{Tools: make([]string, 20000)}
	for i := range big.Tools {
		big.Tools[i] = fmt.Sprintf("tool_%05d", i)
	}
	perCall := batchOutputBudget / answerBound(&big)
	require.Greater(t, perCall, 1)
	results := make([]string, 2*perCall+1)
	for i := range results {
		results[i] = fmt.Sprintf(`{"tools":[{"i":%d}]}`, i)
	}
	results[len(results)-1] = `{"tools":[{"i":20000}]}` // out of range: bad output
	req := scriptBatch(results...)
	req.Snapshots[0] = big
	calls := p.stats.calls.Load()
	_, err := p.ProjectBatch(context.Background(), req)
	require.ErrorIs(t, err, ErrBadOutput)
	assert.EqualValues(t, 3, p.stats.calls.Load()-calls)
	assert.Contains(t, err.Error(), fmt.Sprintf(`plugin "script": project_batch: batch of 1 items from #%d: plugin returned bad output: `, 2*perCall))
	assert.Contains(t, err.Error(), "results[0]: project: tools[0]: index 20000 out of range [0,20000)")
}

func TestProjectBatchBadOutput(t *testing.T) {
	p := loadWat(t, "script", Options{})
	tests := []struct {
		name string
		req  *abi.ProjectBatchRequest
		msg  string
	}{
		{"too few results", &abi.ProjectBatchRequest{
			Settings:  raws(`{}`),
			Snapshots: []abi.BatchSnapshot{{Tools: []string{"a"}}, {Tools: []string{"b"}}},
			Items:     []abi.BatchItem{{Settings: 0, Snapshot: 0}, {Settings: 0, Snapshot: 1}},
		}, "1 results for 2 items"},
		{"error and projection", scriptBatch(`{}`, `{"error":"no","tools":[]}`), "results[1]: both error and projection set"},
		{"error and null list", scriptBatch(`{"error":"no","prompts":null}`), "results[0]: both error and projection set"},
		{"index out of the item's snapshot", scriptBatch(`{"tools":[{"i":2}]}`), "results[0]: project: tools[0]: index 2 out of range [0,2)"},
		{"not increasing", scriptBatch(`{"resources":[1,0]}`), "index 0 not after previous index 1"},
		{"unknown field", scriptBatch(`{"hidden":true}`), `unknown field "hidden"`},
		{"decision without index", scriptBatch(`{"tools":[{"trust":true}]}`), `"i" is missing`},
		{"result not an object", scriptBatch(`[0]`), "cannot unmarshal array"},
		{"error of the wrong type", scriptBatch(`{"error":1}`), "cannot unmarshal number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			discarded := p.stats.discarded.Load()
			_, err := p.ProjectBatch(context.Background(), tt.req)
			require.ErrorIs(t, err, ErrBadOutput)
			assert.Contains(t, err.Error(), `plugin "script": project_batch: plugin returned bad output: `)
			assert.Contains(t, err.Error(), tt.msg)
			assert.EqualValues(t, 1, p.stats.discarded.Load()-discarded, "bad output discards the instance")
		})
	}
}

func TestProjectBatchMisbehaviour(t *testing.T) {
	p := loadWat(t, "script", Options{CallTimeout: shortTimeout, MaxInstances: 1})
	for _, tt := range []struct {
		directive string
		want      error
		msg       string
	}{
		{"R", ErrPluginRefused, "plugin refused the input: refused by script"},
		{"T", ErrPluginTrap, "plugin trapped: wasm error: unreachable"},
		{"J", ErrBadOutput, "plugin returned bad output: decoding output"},
		{"L", ErrPluginTimeout, "plugin call timed out (limit 200ms)"},
	} {
		t.Run(tt.directive, func(t *testing.T) {
			_, err := p.ProjectBatch(context.Background(), scriptBatch(`"`+tt.directive+`"`, `{}`))
			require.ErrorIs(t, err, tt.want, "a whole-call failure, even a refusal, is an error of the call")
			assert.Contains(t, err.Error(), `plugin "script": project_batch: `+tt.msg)

			resp, err := p.ProjectBatch(context.Background(), scriptBatch(`{"prompts":[0]}`))
			require.NoError(t, err, "the call after a failure")
			assert.Equal(t, []int{0}, resp.Results[0].Prompts)
		})
	}
}

func TestProjectBatchRequestChecks(t *testing.T) {
	p := loadWat(t, "script", Options{})
	calls := p.stats.calls.Load()
	ctx := context.Background()

	resp, err := p.ProjectBatch(ctx, &abi.ProjectBatchRequest{})
	require.NoError(t, err)
	assert.Empty(t, resp.Results)

	_, err = p.ProjectBatch(ctx, nil)
	assert.EqualError(t, err, `plugin "script": project_batch: nil request`)
	_, err = p.ProjectBatch(ctx, &abi.ProjectBatchRequest{Settings: raws(`{}`), Items: []abi.BatchItem{{Settings: 0, Snapshot: 0}}})
	assert.ErrorContains(t, err, `plugin "script": project_batch: invalid request: project_batch: items[0]: snapshot index 0 out of range [0,0)`)
	bad := scriptBatch(`{}`)
	bad.Snapshots[0].ToolAnnotations = raws(`{}`)
	_, err = p.ProjectBatch(ctx, bad)
	assert.ErrorContains(t, err, "snapshots[0]: 1 toolAnnotations for 2 tools")
	_, err = p.ProjectBatch(ctx, scriptBatch(`{}`, `{"x":`))
	assert.ErrorContains(t, err, "settings[1] is not valid JSON")
	bad = scriptBatch(`{}`)
	bad.Snapshots[0].ToolAnnotations = raws(`{`, `{}`)
	_, err = p.ProjectBatch(ctx, bad)
	assert.ErrorContains(t, err, "encoding snapshots[0]")

	// A settings object no item uses is not even read.
	resp, err = p.ProjectBatch(ctx, &abi.ProjectBatchRequest{Settings: raws(`{"x":`)})
	require.NoError(t, err)
	assert.Empty(t, resp.Results)
	assert.EqualValues(t, 0, p.stats.calls.Load()-calls, "no call for an empty or invalid request")
}

func TestPluginRefusalIsAnABIRefusal(t *testing.T) {
	assert.ErrorIs(t, ErrPluginRefused, abi.ErrRefused)
	assert.Equal(t, "plugin refused the input", ErrPluginRefused.Error())
	p := loadWat(t, "script", Options{})
	_, err := p.Project(context.Background(), &abi.ProjectRequest{Settings: json.RawMessage(`"R"`)})
	require.ErrorIs(t, err, ErrPluginRefused)
	require.ErrorIs(t, err, abi.ErrRefused)
	_, err = p.Project(context.Background(), &abi.ProjectRequest{Settings: json.RawMessage(`"T"`)})
	require.ErrorIs(t, err, ErrPluginTrap)
	assert.NotErrorIs(t, err, abi.ErrRefused)
}
