package abi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBatchItemJSON(t *testing.T) {
	b, err := json.Marshal([]BatchItem{{0, 0}, {12, 3}})
	require.NoError(t, err)
	assert.Equal(t, `[[0,0],[12,3]]`, string(b))

	tests := []struct {
		in   string
		want BatchItem
		err  string
	}{
		{`[1,2]`, BatchItem{1, 2}, ""},
		{` [ 0 , 7 ] `, BatchItem{0, 7}, ""},
		{`[-1,2]`, BatchItem{-1, 2}, ""}, // in range or not is for the validator
		{`[1]`, BatchItem{}, "want [settings, snapshot], got [1]"},
		{`[1,2,3]`, BatchItem{}, "want [settings, snapshot]"},
		{`[]`, BatchItem{}, "want [settings, snapshot]"},
		{`null`, BatchItem{}, "want [settings, snapshot], got null"},
		{`[null,1]`, BatchItem{}, "element 0 is null"},
		{`[1,1.5]`, BatchItem{}, "element 1: json: cannot unmarshal number 1.5"},
		{`[1,"2"]`, BatchItem{}, "element 1: json: cannot unmarshal string"},
		{`{"settings":1,"snapshot":2}`, BatchItem{}, "cannot unmarshal object"},
	}
	for _, tt := range tests {
		var items []BatchItem
		err := json.Unmarshal([]byte("["+tt.in+"]"), &items)
		if tt.err != "" {
			assert.ErrorContains(t, err, tt.err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		assert.Equal(t, []BatchItem{tt.want}, items, tt.in)
	}
}

func TestBatchResultJSON(t *testing.T) {
	tests := []struct {
		in   string
		want BatchResult
		err  string
	}{
		{`{"error":"no"}`, BatchResult{Error: "no"}, ""},
		{`{}`, BatchResult{}, ""},
		{`{"tools":[{"i":1},{"i":2,"trust":true}],"resources":[0]}`, BatchResult{ProjectResponse: &ProjectResponse{
			Tools: []ToolDecision{{Index: 1}, {Index: 2, Trust: true}}, Resources: []int{0},
		}}, ""},
		{`{"error":"no","prompts":null}`, BatchResult{ProjectResponse: &ProjectResponse{}, Error: "no"}, ""},
		{`{"tools":[{"trust":true}]}`, BatchResult{}, `"i" is missing`},
	}
	for _, tt := range tests {
		var r BatchResult
		err := json.Unmarshal([]byte(tt.in), &r)
		if tt.err != "" {
			assert.ErrorContains(t, err, tt.err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		assert.Equal(t, tt.want, r, tt.in)
	}

	b, err := json.Marshal(&ProjectBatchResponse{Results: []BatchResult{{Error: "no"}, {ProjectResponse: &ProjectResponse{Prompts: []int{0}}}}})
	require.NoError(t, err)
	assert.Equal(t, `{"results":[{"error":"no"},{"tools":null,"prompts":[0],"resources":null}]}`, string(b))

	assert.NoError(t, (&BatchResult{ProjectResponse: &ProjectResponse{}}).Err())
	err = (&BatchResult{Error: "project: settings refused: trust: bad"}).Err()
	require.ErrorIs(t, err, ErrRefused)
	assert.EqualError(t, err, "policy refused the input: project: settings refused: trust: bad")
}

// batchReq is a request with two settings objects and two snapshots.
func batchReq(items ...BatchItem) *ProjectBatchRequest {
	return &ProjectBatchRequest{
		Settings: []json.RawMessage{json.RawMessage(`{}`), json.RawMessage(`{"x":1}`)},
		Snapshots: []BatchSnapshot{
			{Tools: []string{"a", "b"}, Prompts: []string{"p"}, Resources: []string{}},
			{Tools: []string{"c"}, Prompts: []string{}, Resources: []string{"r1", "r2"}},
		},
		Items: items,
	}
}

func TestItemRequest(t *testing.T) {
	req := batchReq(BatchItem{1, 0}, BatchItem{0, 1})
	assert.Equal(t, &ProjectRequest{Settings: json.RawMessage(`{"x":1}`), Tools: []string{"a", "b"}, Prompts: []string{"p"}, Resources: []string{}}, req.ItemRequest(0))
	assert.Equal(t, &ProjectRequest{Settings: json.RawMessage(`{}`), Tools: []string{"c"}, Prompts: []string{}, Resources: []string{"r1", "r2"}}, req.ItemRequest(1))
}

func TestValidateProjectBatch(t *testing.T) {
	req := batchReq(BatchItem{0, 0}, BatchItem{1, 1}, BatchItem{1, 0})
	ok := &ProjectBatchResponse{Results: []BatchResult{
		{ProjectResponse: &ProjectResponse{Tools: []ToolDecision{{Index: 1}}, Prompts: []int{0}}},
		{ProjectResponse: &ProjectResponse{Resources: []int{0, 1}}},
		{Error: "refused"},
	}}
	require.NoError(t, ValidateProjectBatch(req, ok))
	require.NoError(t, ValidateProjectBatch(req, &ProjectBatchResponse{Results: make([]BatchResult, 3)}), "{} is an empty projection")

	for name, resp := range map[string]*ProjectBatchResponse{
		"2 results for 3 items": {Results: ok.Results[:2]},
		"results[2]: both error and projection set": {Results: []BatchResult{ok.Results[0], ok.Results[1],
			{Error: "x", ProjectResponse: &ProjectResponse{}}}},
		// Indexes are relative to each item's own snapshot: tool 1 exists in
		// snapshot 0 but not in snapshot 1.
		"results[1]: project: tools[0]: index 1 out of range [0,1)": {Results: []BatchResult{ok.Results[0],
			{ProjectResponse: &ProjectResponse{Tools: []ToolDecision{{Index: 1}}}}, ok.Results[2]}},
		"results[0]: project: resources[0]: index 0 out of range [0,0)": {Results: []BatchResult{
			{ProjectResponse: &ProjectResponse{Resources: []int{0}}}, ok.Results[1], ok.Results[2]}},
	} {
		assert.ErrorContains(t, ValidateProjectBatch(req, resp), name)
	}

	for name, bad := range map[string]*ProjectBatchRequest{
		"items[1]: settings index 2 out of range [0,2)":  batchReq(BatchItem{0, 0}, BatchItem{2, 0}),
		"items[0]: snapshot index -1 out of range [0,2)": batchReq(BatchItem{0, -1}),
		"snapshots[1]: 2 toolAnnotations for 1 tools": func() *ProjectBatchRequest {
			r := batchReq()
			r.Snapshots[1].ToolAnnotations = []json.RawMessage{json.RawMessage(`null`), json.RawMessage(`null`)}
			return r
		}(),
	} {
		assert.ErrorContains(t, ValidateProjectBatchRequest(bad), name)
		assert.ErrorContains(t, ValidateProjectBatch(bad, &ProjectBatchResponse{Results: make([]BatchResult, len(bad.Items))}), name)
	}
}

// singlePolicy projects with fixed rules and no batch export: settings
// {"x":1} are refused, "trap" fails the call, anything else sees every tool.
type singlePolicy struct{ calls int }

func (*singlePolicy) Handshake() Handshake { return Handshake{ABI: Version, Name: "single"} }

func (*singlePolicy) Canonicalize(context.Context, *CanonicalizeRequest) (*CanonicalizeResponse, error) {
	return nil, errors.New("not used")
}

func (p *singlePolicy) Project(_ context.Context, req *ProjectRequest) (*ProjectResponse, error) {
	p.calls++
	switch string(req.Settings) {
	case `{"x":1}`:
		return nil, fmt.Errorf("single: %w: x is refused", ErrRefused)
	case `"trap"`:
		return nil, errors.New("single: trapped")
	case `"bad"`:
		return &ProjectResponse{Prompts: []int{5}}, nil
	}
	resp := &ProjectResponse{}
	for i := range req.Tools {
		resp.Tools = append(resp.Tools, ToolDecision{Index: i, Trust: true})
	}
	return resp, nil
}

// batchPolicy answers every batch with fixed results.
type batchPolicy struct {
	singlePolicy
	resp *ProjectBatchResponse
	err  error
}

func (p *batchPolicy) ProjectBatch(context.Context, *ProjectBatchRequest) (*ProjectBatchResponse, error) {
	return p.resp, p.err
}

func TestProjectAllFallback(t *testing.T) {
	ctx := context.Background()
	p := &singlePolicy{}
	req := batchReq(BatchItem{0, 0}, BatchItem{1, 1}, BatchItem{0, 1})
	resp, err := ProjectAll(ctx, p, req)
	require.NoError(t, err)
	assert.Equal(t, 3, p.calls, "one Project call per item")
	want := []BatchResult{
		{ProjectResponse: &ProjectResponse{Tools: []ToolDecision{{Index: 0, Trust: true}, {Index: 1, Trust: true}}, Prompts: []int{}, Resources: []int{}}},
		{Error: "single: policy refused the input: x is refused"},
		{ProjectResponse: &ProjectResponse{Tools: []ToolDecision{{Index: 0, Trust: true}}, Prompts: []int{}, Resources: []int{}}},
	}
	if diff := cmp.Diff(want, resp.Results); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	require.NoError(t, ValidateProjectBatch(req, resp))
	require.ErrorIs(t, resp.Results[1].Err(), ErrRefused)

	// Anything but a refusal fails the whole call, naming the item.
	req.Settings = append(req.Settings, json.RawMessage(`"trap"`), json.RawMessage(`"bad"`))
	req.Items = append(req.Items, BatchItem{2, 0})
	_, err = ProjectAll(ctx, p, req)
	assert.EqualError(t, err, "project all: items[3]: single: trapped")
	req.Items[3] = BatchItem{3, 0}
	_, err = ProjectAll(ctx, p, req)
	assert.EqualError(t, err, "project all: items[3]: project: prompts[0]: index 5 out of range [0,1)")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = ProjectAll(cctx, p, batchReq(BatchItem{0, 0}))
	require.ErrorIs(t, err, context.Canceled)

	_, err = ProjectAll(ctx, p, batchReq(BatchItem{0, 5}))
	assert.ErrorContains(t, err, "items[0]: snapshot index 5 out of range")
	_, err = ProjectAll(ctx, p, nil)
	assert.Error(t, err)
}

func TestProjectAllBatchProjector(t *testing.T) {
	ctx := context.Background()
	req := batchReq(BatchItem{0, 0}, BatchItem{1, 1})
	p := &batchPolicy{resp: &ProjectBatchResponse{Results: []BatchResult{{}, {Error: "no"}}}}
	resp, err := ProjectAll(ctx, p, req)
	require.NoError(t, err)
	assert.Zero(t, p.calls, "a BatchProjector is not asked item by item")
	assert.Equal(t, []BatchResult{{ProjectResponse: &ProjectResponse{Tools: []ToolDecision{}, Prompts: []int{}, Resources: []int{}}}, {Error: "no"}}, resp.Results)

	p.resp = &ProjectBatchResponse{Results: []BatchResult{{}}}
	_, err = ProjectAll(ctx, p, req)
	assert.EqualError(t, err, "project all: project_batch: 1 results for 2 items")

	p.resp, p.err = nil, errors.New("batch: timed out")
	_, err = ProjectAll(ctx, p, req)
	assert.EqualError(t, err, "batch: timed out")

	p.err = nil
	_, err = ProjectAll(ctx, p, req)
	assert.ErrorContains(t, err, "returned no response")
}
