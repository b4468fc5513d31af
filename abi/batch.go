package abi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// A ProjectBatchRequest is the input of the optional project_batch export:
// many projections in one call. Each item pairs one settings object with one
// snapshot, by index; the settings objects and snapshots are listed once
// each, however many items use them, so the input stays small.
//
// Item i asks exactly what the project call [ProjectBatchRequest.ItemRequest]
// (i) would ask, and its [BatchResult] must mean exactly what that call would
// answer.
type ProjectBatchRequest struct {
	// Settings holds raw settings objects, as in [ProjectRequest.Settings].
	Settings []json.RawMessage `json:"settings"`
	// Snapshots holds the names of server snapshots.
	Snapshots []BatchSnapshot `json:"snapshots"`
	// Items holds the (settings, snapshot) pairs to project, in the order
	// of the response's results.
	Items []BatchItem `json:"items"`
}

// A BatchSnapshot is the names in one server snapshot, as in the matching
// fields of [ProjectRequest].
type BatchSnapshot struct {
	// Tools holds the tool names, in snapshot order.
	Tools []string `json:"tools"`
	// ToolAnnotations, present only when the plugin's handshake wants
	// [WantToolAnnotations], holds each tool's MCP annotations object (or
	// null), parallel to Tools.
	ToolAnnotations []json.RawMessage `json:"toolAnnotations,omitempty"`
	// Prompts holds the prompt names, in snapshot order.
	Prompts []string `json:"prompts"`
	// Resources holds the resource URIs, in snapshot order.
	Resources []string `json:"resources"`
}

// A BatchItem is one projection of a batch: the index of its settings
// object in [ProjectBatchRequest.Settings] and of its snapshot in
// [ProjectBatchRequest.Snapshots]. On the wire it is the two-element array
// [settings, snapshot].
type BatchItem struct {
	Settings int
	Snapshot int
}

// MarshalJSON encodes the item as [settings, snapshot].
func (it BatchItem) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 16)
	b = append(b, '[')
	b = strconv.AppendInt(b, int64(it.Settings), 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(it.Snapshot), 10)
	return append(b, ']'), nil
}

// UnmarshalJSON decodes an item strictly: exactly two integers in an array.
// Whether the indexes are in range is for [ValidateProjectBatchRequest].
func (it *BatchItem) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("batch item: %w", err)
	}
	if len(raw) != 2 {
		return fmt.Errorf("batch item: want [settings, snapshot], got %s", bytes.TrimSpace(b))
	}
	var idx [2]int
	for k, r := range raw {
		if bytes.Equal(r, []byte("null")) {
			return fmt.Errorf("batch item: element %d is null, want an index", k)
		}
		if err := json.Unmarshal(r, &idx[k]); err != nil {
			return fmt.Errorf("batch item: element %d: %w", k, err)
		}
	}
	*it = BatchItem{Settings: idx[0], Snapshot: idx[1]}
	return nil
}

// ItemRequest returns the project request that item i of r stands for. It
// shares r's memory. It panics when i or the item's indexes are out of
// range (see [ValidateProjectBatchRequest]).
func (r *ProjectBatchRequest) ItemRequest(i int) *ProjectRequest {
	it := r.Items[i]
	snap := &r.Snapshots[it.Snapshot]
	return &ProjectRequest{
		Settings:        r.Settings[it.Settings],
		Tools:           snap.Tools,
		ToolAnnotations: snap.ToolAnnotations,
		Prompts:         snap.Prompts,
		Resources:       snap.Resources,
	}
}

// A ProjectBatchResponse is the output of the project_batch export.
type ProjectBatchResponse struct {
	// Results has exactly one entry per request item, in order.
	Results []BatchResult `json:"results"`
}

// A BatchResult is the outcome of one batch item: either Error is set, the
// message project would refuse the item with, or the projection is, with the
// indexes of [ProjectResponse] relative to the item's snapshot. On the wire
// a refusal is {"error": "..."} with no other member, and a projection is a
// ProjectResponse object (whose lists may be left out when empty, and whose
// tool flags may be left out when false).
//
// In responses from host.Plugin, metakey.Reference and [ProjectAll],
// exactly one of Error and ProjectResponse is set, and the lists of a
// projection are never nil.
type BatchResult struct {
	*ProjectResponse
	// Error, when non-empty, says why the item's settings were refused.
	Error string `json:"error,omitempty"`
}

// UnmarshalJSON decodes a result strictly: {"error": ...} alone, or the
// members of a [ProjectResponse]. Any projection member, even null, makes
// ProjectResponse non-nil, so that a result with both an error and a
// projection can be refused ([ValidateProjectBatch]).
func (r *BatchResult) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	var w struct {
		Error     string          `json:"error"`
		Tools     json.RawMessage `json:"tools"`
		Prompts   json.RawMessage `json:"prompts"`
		Resources json.RawMessage `json:"resources"`
	}
	if err := decodeStrictly(b, &w); err != nil {
		return err
	}
	*r = BatchResult{Error: w.Error}
	if w.Tools == nil && w.Prompts == nil && w.Resources == nil {
		return nil
	}
	members := make(map[string]json.RawMessage, 3)
	for k, v := range map[string]json.RawMessage{"tools": w.Tools, "prompts": w.Prompts, "resources": w.Resources} {
		if v != nil {
			members[k] = v
		}
	}
	obj, err := json.Marshal(members)
	if err != nil {
		return err
	}
	r.ProjectResponse = new(ProjectResponse)
	return r.ProjectResponse.UnmarshalJSON(obj)
}

// MarshalJSON encodes a result: {"error": ...} for a refusal, the
// projection's members (and "error" when set) otherwise.
func (r BatchResult) MarshalJSON() ([]byte, error) {
	errMember := struct {
		Error string `json:"error,omitempty"`
	}{r.Error}
	if r.ProjectResponse == nil {
		return json.Marshal(errMember)
	}
	b, err := r.ProjectResponse.MarshalJSON()
	if err != nil || r.Error == "" {
		return b, err
	}
	e, err := json.Marshal(errMember)
	if err != nil {
		return nil, err
	}
	// {"tools":...} + {"error":...} -> {"tools":...,"error":...}
	return append(append(b[:len(b)-1], ','), e[1:]...), nil
}

// Err returns nil for a projection and, for a refusal, an error wrapping
// [ErrRefused] that quotes Error.
func (r *BatchResult) Err() error {
	if r.Error == "" {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrRefused, r.Error)
}

// A BatchProjector is a [Policy] that can project many items in one call.
// host.Plugin implements it (through the project_batch export when the
// plugin has it, through one project call per item otherwise), and so does
// metakey.Reference.
//
// ProjectBatch answers with one [BatchResult] per item, validated with
// [ValidateProjectBatch]. A refused item is a result with Error set, never
// an error of the call; an error means the call as a whole failed (the
// request is invalid, the plugin trapped, timed out or answered badly, ctx
// ended), and then no item has an answer.
type BatchProjector interface {
	ProjectBatch(ctx context.Context, req *ProjectBatchRequest) (*ProjectBatchResponse, error)
}

// ProjectAll projects every item of req with p. When p is a [BatchProjector]
// it makes one ProjectBatch call; otherwise it calls p.Project once per item
// (in order, stopping at the first failure). Either way the outcome follows
// the rule of BatchProjector: an item whose Project error wraps [ErrRefused]
// gets a result whose Error is that error's message; any other error fails
// the whole call, naming the item. The response is checked with
// [ValidateProjectBatch], and the lists of each projection are never nil.
func ProjectAll(ctx context.Context, p Policy, req *ProjectBatchRequest) (*ProjectBatchResponse, error) {
	if req == nil {
		return nil, errors.New("project all: nil request")
	}
	if err := ValidateProjectBatchRequest(req); err != nil {
		return nil, fmt.Errorf("project all: %w", err)
	}
	if bp, ok := p.(BatchProjector); ok {
		resp, err := bp.ProjectBatch(ctx, req)
		switch {
		case err != nil:
			return nil, err
		case resp == nil:
			return nil, errors.New("project all: ProjectBatch returned no response")
		}
		if err := validateBatchResults(req, resp, p.Handshake().Renames); err != nil {
			return nil, fmt.Errorf("project all: %w", err)
		}
		for i := range resp.Results {
			if resp.Results[i].Error == "" {
				resp.Results[i].ProjectResponse = nonNil(resp.Results[i].ProjectResponse)
			}
		}
		return resp, nil
	}
	results := make([]BatchResult, len(req.Items))
	for i := range req.Items {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("project all: items[%d]: %w", i, err)
		}
		item := req.ItemRequest(i)
		resp, err := p.Project(ctx, item)
		switch {
		case errors.Is(err, ErrRefused):
			results[i].Error = err.Error()
			continue
		case err != nil:
			return nil, fmt.Errorf("project all: items[%d]: %w", i, err)
		case resp == nil:
			return nil, fmt.Errorf("project all: items[%d]: Project returned no response", i)
		}
		if err := ValidateProjectWith(item, resp, p.Handshake().Renames); err != nil {
			return nil, fmt.Errorf("project all: items[%d]: %w", i, err)
		}
		results[i].ProjectResponse = nonNil(resp)
	}
	return &ProjectBatchResponse{Results: results}, nil
}

// nonNil returns r, or an empty response when r is nil, with every nil list
// replaced by an empty one.
func nonNil(r *ProjectResponse) *ProjectResponse {
	if r == nil {
		r = &ProjectResponse{}
	}
	if r.Tools == nil {
		r.Tools = []ToolDecision{}
	}
	if r.Prompts == nil {
		r.Prompts = []int{}
	}
	if r.Resources == nil {
		r.Resources = []int{}
	}
	return r
}
