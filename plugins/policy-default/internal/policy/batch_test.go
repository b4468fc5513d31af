package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/metakey"
)

// runBatch runs ProjectBatch on req as JSON, in, and decodes its answer as
// the host does: strictly, and checked against the request. sent is the
// request as the plugin sees it: invalid UTF-8 in names becomes U+FFFD on
// the way in, for project calls as for batches.
func runBatch(t testing.TB, req *abi.ProjectBatchRequest) (in []byte, sent *abi.ProjectBatchRequest, got *abi.ProjectBatchResponse) {
	t.Helper()
	in, err := json.Marshal(req)
	require.NoError(t, err)
	out, err := ProjectBatch(in)
	require.NoError(t, err, "%s", in)
	sent = new(abi.ProjectBatchRequest)
	require.NoError(t, json.Unmarshal(in, sent))
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	got = new(abi.ProjectBatchResponse)
	require.NoError(t, dec.Decode(got), "%s", out)
	require.False(t, dec.More(), "data after the answer: %s", out)
	require.NoError(t, abi.ValidateProjectBatch(sent, got), "%s", out)
	return in, sent, got
}

// projectEach answers every item of req with Project: the projection, or the
// refusal message.
func projectEach(t testing.TB, req *abi.ProjectBatchRequest) []abi.BatchResult {
	t.Helper()
	want := make([]abi.BatchResult, len(req.Items))
	for i := range req.Items {
		in, err := json.Marshal(req.ItemRequest(i))
		require.NoError(t, err)
		out, err := Project(in)
		if err != nil {
			want[i].Error = err.Error()
			continue
		}
		var resp abi.ProjectResponse
		require.NoError(t, json.Unmarshal(out, &resp))
		want[i].ProjectResponse = &resp
	}
	return want
}

// normalize makes results comparable: a projection with every list
// non-nil, so that a list left out equals an empty one.
func normalize(results []abi.BatchResult) []abi.BatchResult {
	out := make([]abi.BatchResult, len(results))
	for i, r := range results {
		if r.Error != "" {
			out[i] = abi.BatchResult{Error: r.Error}
			continue
		}
		pr := abi.ProjectResponse{Tools: []abi.ToolDecision{}, Prompts: []int{}, Resources: []int{}}
		if r.ProjectResponse != nil {
			pr.Tools = append(pr.Tools, r.Tools...)
			pr.Prompts = append(pr.Prompts, r.Prompts...)
			pr.Resources = append(pr.Resources, r.Resources...)
		}
		out[i] = abi.BatchResult{ProjectResponse: &pr}
	}
	return out
}

// randomBatch returns a batch of random valid settings objects (refused
// ones included) and random snapshots, some with more than 64 tools (more
// than one mask of appendRuns), with items pairing them in random order,
// some pairs repeated.
func randomBatch(rng *rand.Rand) *abi.ProjectBatchRequest {
	req := &abi.ProjectBatchRequest{}
	for len(req.Settings) < 1+rng.Intn(20) {
		if raw := randomSettings(rng); json.Valid(raw) {
			req.Settings = append(req.Settings, raw)
		}
	}
	names := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = namePool[rng.Intn(len(namePool))]
		}
		return out
	}
	for range 1 + rng.Intn(8) {
		nt := rng.Intn(25)
		if rng.Intn(8) == 0 {
			nt = 60 + rng.Intn(150)
		}
		s := abi.BatchSnapshot{Tools: names(nt), Prompts: names(rng.Intn(5)), Resources: []string{}}
		for i := range rng.Intn(4) {
			s.Resources = append(s.Resources, fmt.Sprintf("file:///r%d", i))
		}
		if rng.Intn(3) == 0 {
			for range s.Tools {
				s.ToolAnnotations = append(s.ToolAnnotations, json.RawMessage(`{"readOnlyHint":true}`))
			}
		}
		req.Snapshots = append(req.Snapshots, s)
	}
	for range rng.Intn(60) {
		req.Items = append(req.Items, abi.BatchItem{Settings: rng.Intn(len(req.Settings)), Snapshot: rng.Intn(len(req.Snapshots))})
	}
	return req
}

func TestProjectBatchMatchesProject(t *testing.T) {
	if testing.Short() {
		t.Skip("compares project_batch with project over many random inputs; TestDifferentialProjectBatch stays in -short; run without -short")
	}
	t.Run("memo", func(t *testing.T) { testProjectBatchMatchesProject(t, 31) })
	t.Run("small memo budget", func(t *testing.T) {
		defer func(b int) { visBudget = b }(visBudget)
		visBudget = 40 // enough for some settings objects of a batch, not all
		testProjectBatchMatchesProject(t, 32)
	})
}

func testProjectBatchMatchesProject(t *testing.T, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	var items, refused, shown int
	for items < diffInputs() {
		req := randomBatch(rng)
		in, sent, got := runBatch(t, req)
		want := projectEach(t, sent)
		if diff := quickDiff(normalize(want), normalize(got.Results)); diff != "" {
			t.Fatalf("batch %s: (-project +project_batch)\n%s", in, diff)
		}
		for _, r := range want {
			switch {
			case r.Error != "":
				refused++
			case len(r.Tools) > 0:
				shown++
			}
		}
		items += len(req.Items)
	}
	t.Logf("%d items: %d refused, %d with visible tools", items, refused, shown)
	assert.Greater(t, refused, items/20, "too few refused items")
	assert.Greater(t, shown, items/5, "too few items with visible tools")
}

func TestProjectBatchOutput(t *testing.T) {
	req := `{"settings":[{"trust":true},{"includeTools":["a","b(x)"],"alwaysLoadTools":true},{"trust":"yes"},{"trust":true,"alwaysLoadTools":true,"excludeTools":["a"]},{"includeTools":[]}],` +
		`"snapshots":[{"tools":["a","b","c"],"prompts":["b","x"],"resources":["r0","r1","r2"]},{"tools":[],"prompts":[],"resources":[]}],` +
		`"items":[[0,0],[1,0],[2,0],[3,0],[4,0],[0,1],[2,1]]}`
	out, err := ProjectBatch([]byte(req))
	require.NoError(t, err)
	// False flags and empty lists are left out.
	assert.Equal(t, `{"results":[`+
		`{"tools":[{"i":0,"trust":true},{"i":1,"trust":true},{"i":2,"trust":true}],"prompts":[0,1],"resources":[0,1,2]},`+
		`{"tools":[{"i":0,"alwaysLoad":true},{"i":1,"alwaysLoad":true}],"prompts":[0],"resources":[0,1,2]},`+
		`{"error":"project: settings refused: trust: expected a boolean or null, got a string"},`+
		`{"tools":[{"i":1,"trust":true,"alwaysLoad":true},{"i":2,"trust":true,"alwaysLoad":true}],"prompts":[0,1],"resources":[0,1,2]},`+
		`{"resources":[0,1,2]},`+
		`{},`+
		`{"error":"project: settings refused: trust: expected a boolean or null, got a string"}]}`, string(out))

	// Only prompts visible: no stray comma.
	out, err = ProjectBatch([]byte(`{"settings":[{"includeTools":["p"]}],"snapshots":[{"tools":["t"],"prompts":["p"]}],"items":[[0,0]]}`))
	require.NoError(t, err)
	assert.Equal(t, `{"results":[{"prompts":[0]}]}`, string(out))

	out, err = ProjectBatch([]byte(`{"settings":[],"snapshots":[],"items":[]}`))
	require.NoError(t, err)
	assert.Equal(t, `{"results":[]}`, string(out))
}

// TestProjectBatchSettingsKeepTheirLists: each settings object keeps its own
// lists although the parser reuses scratch space between objects, and
// sharing a settings object between items changes nothing.
func TestProjectBatchSettingsKeepTheirLists(t *testing.T) {
	for _, settings := range [][2]string{
		{`{"includeTools":["a"],"excludeTools":["b"]}`, `{"includeTools":["b"],"excludeTools":["a"]}`},           // fast path
		{`{ "includeTools": ["a"], "excludeTools": ["b"] }`, `{ "includeTools": ["b"], "excludeTools": ["a"] }`}, // general path
	} {
		req := `{"settings":[` + settings[0] + `,` + settings[1] + `],"snapshots":[{"tools":["a","b"]},{"tools":["b","a"]}],` +
			`"items":[[0,0],[1,0],[0,1],[1,1],[0,0]]}`
		out, err := ProjectBatch([]byte(req))
		require.NoError(t, err)
		assert.Equal(t, `{"results":[{"tools":[{"i":0}]},{"tools":[{"i":1}]},{"tools":[{"i":1}]},{"tools":[{"i":0}]},{"tools":[{"i":0}]}]}`, string(out), settings[0])
	}
}

func TestProjectBatchRequestForms(t *testing.T) {
	want := `{"results":[{"tools":[{"i":1,"trust":true}],"resources":[0]}]}`
	for _, req := range []string{
		// Member order is not part of the ABI.
		`{"items":[[0,0]],"snapshots":[{"resources":["r"],"tools":["","t"]}],"settings":[{"trust":true}]}`,
		// White space, unknown members, annotations, a null name.
		" {\n \"settings\" : [ {\"trust\" : true} ] , \"x\" : {\"y\":[1,{}]}, \"snapshots\" : [ { \"tools\" : [ null , \"t\" ] , \"toolAnnotations\" : [ null, {\"readOnlyHint\": true} ], \"prompts\": null, \"resources\" : [\"r\"] } ] , \"items\" : [ [ 0 , 0 ] ] } ",
		// A repeated member replaces the earlier one.
		`{"settings":[{"trust":"x"}],"settings":[{"trust":true}],"snapshots":[{"tools":["t"]}],"snapshots":[{"tools":["","t"],"resources":["r"]}],"items":[[5,5],[0,0]],"items":[[0,0]]}`,
	} {
		out, err := ProjectBatch([]byte(req))
		require.NoError(t, err, req)
		assert.Equal(t, want, string(out), req)
	}
}

func TestProjectBatchMalformed(t *testing.T) {
	const ok = `"settings":[{}],"snapshots":[{"tools":["a"]}]`
	for _, tt := range []struct{ req, msg string }{
		{`{` + ok + `}`, "project_batch request: items: missing"},
		{`{` + ok + `,"items":[[0,1]]}`, "project_batch request: items[0]: snapshot index 1 out of range [0,1)"},
		{`{` + ok + `,"items":[[0,0],[1,0]]}`, "project_batch request: items[1]: settings index 1 out of range [0,1)"},
		{`{"items":[[0,0]]}`, "items[0]: settings index 0 out of range [0,0)"},
		{`{` + ok + `,"items":[[0]]}`, "expected ',' (a batch item has two indexes)"},
		{`{` + ok + `,"items":[[0,0,0]]}`, "expected ']' (a batch item has two indexes)"},
		{`{` + ok + `,"items":[0]}`, "expected '[' (a batch item)"},
		{`{` + ok + `,"items":[[-1,0]]}`, "items[0]: expected a non-negative integer, got a number"},
		{`{` + ok + `,"items":[[0,"0"]]}`, "items[0]: expected a non-negative integer, got a string"},
		{`{` + ok + `,"items":[[0.5,0]]}`, "items[0]: index 0.5 is not an integer"},
		{`{` + ok + `,"items":[[1e2,0]]}`, "items[0]: index 1e2 is not an integer"},
		{`{` + ok + `,"items":[[99999999999,0]]}`, "items[0]: index 99999999999 is not an integer below 2147483648"},
		{`{` + ok + `,"items":[[01,0]]}`, "malformed JSON"},
		{`{` + ok + `,"items":{}}`, "expected an array or null"},
		{`{"settings":[{"trust":}],"snapshots":[],"items":[]}`, "project_batch request: settings[0]: malformed JSON"},
		{`{"settings":[],"snapshots":[{"tools":[1]}],"items":[]}`, "snapshots[0]: malformed JSON at byte 38: tools[0]: expected a string, got a number"},
		{`{"settings":[],"snapshots":[[]],"items":[]}`, "snapshots[0]: malformed JSON"},
		{`{"settings":[],"snapshots":[],"items":[]} {}`, "after the top-level value"},
		{`[]`, "project_batch request: malformed JSON"},
	} {
		_, err := ProjectBatch([]byte(tt.req))
		if assert.Error(t, err, tt.req) {
			assert.Contains(t, err.Error(), tt.msg, tt.req)
		}
	}
}

// TestDifferentialProjectBatch compares ProjectBatch with the native
// reference's ProjectBatch: the same results, refusal messages included.
func TestDifferentialProjectBatch(t *testing.T) {
	rng := rand.New(rand.NewSource(37))
	for range 300 {
		in, sent, got := runBatch(t, randomBatch(rng))
		want, err := metakey.Reference{}.ProjectBatch(context.Background(), sent)
		require.NoError(t, err)
		if diff := quickDiff(normalize(want.Results), normalize(got.Results)); diff != "" {
			t.Fatalf("batch %s: (-reference +plugin logic)\n%s", strings.ReplaceAll(string(in), `},{`, "},\n{"), diff)
		}
	}
}

func TestShortIndex(t *testing.T) {
	for _, tt := range []struct {
		in       string
		v, after int // after: bytes read, -1 for none
	}{
		{"0", 0, 1}, {"0,", 0, 1}, {"7]", 7, 1}, {"42,", 42, 2}, {"999", 999, 3}, {"1234]", 1234, 4},
		{"99999,", 99999, 5}, {"10000", 10000, 5},
		{"100000", 0, -1}, {"01", 0, -1}, {"00", 0, -1}, {"", 0, -1}, {"-1", 0, -1}, {"a", 0, -1}, {"]", 0, -1},
	} {
		v, end := shortIndex([]byte(tt.in), 0)
		if tt.after < 0 {
			assert.Equal(t, -1, end, tt.in)
			continue
		}
		assert.Equal(t, tt.v, v, tt.in)
		assert.Equal(t, tt.after, end, tt.in)
	}
}

// TestItemsFastAndGeneral: the fast reader of items takes the compact form
// the host sends and gives way to the general one for anything else, with
// the same outcome.
func TestItemsFastAndGeneral(t *testing.T) {
	for _, tt := range []struct {
		items string
		fast  bool
		want  []int32
	}{
		{`[]`, true, nil},
		{`[[0,0]]`, true, []int32{0, 0}},
		{`[[1,0],[0,1],[99999,12345]]`, true, []int32{1, 0, 0, 1, 99999, 12345}},
		{`[[100000,0]]`, false, []int32{100000, 0}},
		{`[ [1,0]]`, false, []int32{1, 0}},
		{`[[1, 0]]`, false, []int32{1, 0}},
		{`[[1,0] ]`, false, []int32{1, 0}},
		{`[[1,0],[2,3] ,[4,5]]`, false, []int32{1, 0, 2, 3, 4, 5}},
		{`null`, false, nil},
	} {
		var p parser
		p.buf = []byte(tt.items)
		got, ok := p.fastItems(nil)
		assert.Equal(t, tt.fast, ok, tt.items)
		if ok {
			assert.Equal(t, tt.want, got, tt.items)
			assert.Equal(t, len(tt.items), p.pos, tt.items)
			continue
		}
		assert.Zero(t, p.pos, "%s: nothing consumed", tt.items)
		assert.Empty(t, got, tt.items)
		all, err := p.items(nil)
		require.NoError(t, err, tt.items)
		assert.Equal(t, tt.want, all, "%s: the general reader", tt.items)
	}
	// Indexes past the fast reader's five digits still work.
	var b strings.Builder
	b.WriteString(`{"settings":[`)
	for i := range 100001 {
		if i > 0 {
			b.WriteByte(',')
		}
		if i == 100000 {
			b.WriteString(`{"trust":true}`)
		} else {
			b.WriteString(`{}`)
		}
	}
	b.WriteString(`],"snapshots":[{"tools":["a"]}],"items":[[100000,0],[0,0]]}`)
	out, err := ProjectBatch([]byte(b.String()))
	require.NoError(t, err)
	assert.Equal(t, `{"results":[{"tools":[{"i":0,"trust":true}]},{"tools":[{"i":0}]}]}`, string(out))
}

// TestToolEntriesWrittenOnce: toolEntries marks its entries written even for
// a snapshot without tools, so that ProjectBatch calls it once per snapshot
// and flags, not once per item.
func TestToolEntriesWrittenOnce(t *testing.T) {
	for _, tools := range [][]string{nil, {"a", "b"}} {
		s := batchSnapshot{tools: tools}
		s.prepare()
		for f := range s.toolBlob {
			b := s.toolEntries(f)
			assert.NotNil(t, b, "%q, flags %d", tools, f)
			assert.Equal(t, b, s.toolBlob[f], "%q, flags %d", tools, f)
		}
	}
}
