package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/wasmhost/wasmhost/abi"
)

// batchOutputBudget bounds the largest answer a project_batch call could
// give when written compactly (see answerBound): the host splits batches so
// that no call can need more, leaving the other half of abi.MaxOutputBytes
// for answers written less compactly.
const batchOutputBudget = abi.MaxOutputBytes / 2

var _ abi.BatchProjector = (*Plugin)(nil)

// HasProjectBatch reports whether the plugin exports project_batch. When it
// does not, ProjectBatch makes one project call per distinct item instead.
func (p *Plugin) HasProjectBatch() bool { return p.batch }

// HasDirect reports whether the plugin is called through direct exports
// (abi/SPEC.md section 5.2) for at least one of its exports.
func (p *Plugin) HasDirect() bool { return len(p.direct) > 0 }

// ProjectBatch projects every item of req. Through the project_batch export,
// when the plugin has it, the host sends each distinct settings object (by
// bytes, nil sent as null) and each distinct snapshot (by contents) once,
// and each distinct (settings, snapshot) pair once; it splits the batch into
// calls of at most abi.MaxBatch items whose compact answers could not exceed
// half of abi.MaxOutputBytes, and checks each answer with
// abi.ValidateProjectBatch. Without the export it makes one project call per
// distinct pair.
//
// Either way a refused item is a result whose Error is the plugin's refusal
// message (quoted as ErrPluginRefused quotes it, so both ways give the same
// text), and any other failure (a trap, a timeout, bad output, a whole-call
// refusal of project_batch, ctx ending) fails the whole call, returning no
// result. The lists of each projection are never nil; results of items that
// repeat a pair are copies.
func (p *Plugin) ProjectBatch(ctx context.Context, req *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error) {
	const export = abi.ExportProjectBatch
	if req == nil {
		return nil, p.errorf(export, "nil request")
	}
	if err := abi.ValidateProjectBatchRequest(req); err != nil {
		return nil, p.errorf(export, "invalid request: %w", err)
	}
	plan, err := planBatch(req)
	if err != nil {
		return nil, p.errorf(export, "%w", err)
	}
	var pairResults []abi.BatchResult
	if p.batch {
		pairResults, err = p.projectPairs(ctx, plan)
	} else {
		pairResults, err = p.projectEach(ctx, req, plan)
	}
	if err != nil {
		return nil, err
	}
	results := make([]abi.BatchResult, len(req.Items))
	used := make([]bool, len(pairResults))
	for i, k := range plan.pairOf {
		r := pairResults[k]
		if used[k] && r.ProjectResponse != nil {
			r.ProjectResponse = &abi.ProjectResponse{
				Tools:     slices.Clone(r.Tools),
				Prompts:   slices.Clone(r.Prompts),
				Resources: slices.Clone(r.Resources),
			}
		}
		used[k] = true
		results[i] = r
	}
	return &abi.ProjectBatchResponse{Results: results}, nil
}

// A batchPlan is a project batch reduced to what differs: distinct
// settings objects, distinct snapshots and distinct pairs of the two, each
// settings object and snapshot encoded once.
type batchPlan struct {
	settings [][]byte // encoded, distinct
	snaps    [][]byte // encoded, distinct
	// snapReq is a request snapshot of each distinct snapshot (one of those
	// with its contents), to check answers against.
	snapReq []*abi.BatchSnapshot
	// snapBound is answerBound of each distinct snapshot.
	snapBound []int
	// pairs are the distinct (settings, snapshot) pairs, as indexes into
	// settings and snaps, in the order of their first item.
	pairs []abi.BatchItem
	// firstItem is the first request item of each pair.
	firstItem []int
	// pairOf is the pair of each request item.
	pairOf []int
}

// planBatch deduplicates req. Settings objects that are not valid JSON are
// an error, as in Canonicalize.
func planBatch(req *abi.ProjectBatchRequest) (*batchPlan, error) {
	plan := &batchPlan{pairOf: make([]int, len(req.Items))}
	settingsOf := make([]int, len(req.Settings)) // 1 + distinct index; 0 until seen
	snapOf := make([]int, len(req.Snapshots))
	settingsIdx := map[string]int{}
	snapIdx := map[string]int{}
	pairIdx := map[abi.BatchItem]int{}
	for i, it := range req.Items {
		if settingsOf[it.Settings] == 0 {
			raw := req.Settings[it.Settings]
			if len(raw) == 0 {
				raw = json.RawMessage("null")
			}
			k, ok := settingsIdx[string(raw)]
			if !ok {
				// Marshal compacts raw, as project calls send it, and
				// fails exactly when raw is not valid JSON.
				enc, err := json.Marshal(raw)
				if err != nil {
					return nil, fmt.Errorf("settings[%d] is not valid JSON", it.Settings)
				}
				k = len(plan.settings)
				settingsIdx[string(raw)] = k
				plan.settings = append(plan.settings, enc)
			}
			settingsOf[it.Settings] = k + 1
		}
		if snapOf[it.Snapshot] == 0 {
			s := &req.Snapshots[it.Snapshot]
			enc, err := json.Marshal(&abi.BatchSnapshot{
				Tools:           nonNil(s.Tools),
				ToolAnnotations: s.ToolAnnotations,
				Prompts:         nonNil(s.Prompts),
				Resources:       nonNil(s.Resources),
			})
			if err != nil {
				return nil, fmt.Errorf("encoding snapshots[%d]: %w", it.Snapshot, err)
			}
			k, ok := snapIdx[string(enc)]
			if !ok {
				k = len(plan.snaps)
				snapIdx[string(enc)] = k
				plan.snaps = append(plan.snaps, enc)
				plan.snapReq = append(plan.snapReq, s)
				plan.snapBound = append(plan.snapBound, answerBound(s))
			}
			snapOf[it.Snapshot] = k + 1
		}
		pair := abi.BatchItem{Settings: settingsOf[it.Settings] - 1, Snapshot: snapOf[it.Snapshot] - 1}
		k, ok := pairIdx[pair]
		if !ok {
			k = len(plan.pairs)
			pairIdx[pair] = k
			plan.pairs = append(plan.pairs, pair)
			plan.firstItem = append(plan.firstItem, i)
		}
		plan.pairOf[i] = k
	}
	return plan, nil
}

// answerBound is the length of the longest compact result a plugin could
// give for an item on snapshot s: every tool visible with both flags
// written out, every prompt and resource visible.
func answerBound(s *abi.BatchSnapshot) int {
	const (
		overhead = len(`{"tools":[],"prompts":[],"resources":[]},`)
		perTool  = len(`{"i":,"trust":false,"alwaysLoad":false},`)
	)
	digits := func(n int) int { return len(strconv.Itoa(n)) }
	return overhead + len(s.Tools)*(perTool+digits(len(s.Tools))) +
		len(s.Prompts)*(1+digits(len(s.Prompts))) + len(s.Resources)*(1+digits(len(s.Resources)))
}

// pairBound bounds the compact result of a pair: its projection, or a
// refusal message, which may quote the settings (escaped, at most six bytes
// for one).
func (plan *batchPlan) pairBound(pair abi.BatchItem) int {
	return max(plan.snapBound[pair.Snapshot], 64+6*len(plan.settings[pair.Settings]))
}

// projectPairs answers the distinct pairs of plan through project_batch, in
// as many calls as the limits need.
func (p *Plugin) projectPairs(ctx context.Context, plan *batchPlan) ([]abi.BatchResult, error) {
	const export = abi.ExportProjectBatch
	results := make([]abi.BatchResult, 0, len(plan.pairs))
	for start := 0; start < len(plan.pairs); {
		end, size := start, len(`{"results":[]}`)
		for end < len(plan.pairs) && end-start < abi.MaxBatch {
			b := plan.pairBound(plan.pairs[end])
			if end > start && size+b > batchOutputBudget {
				break
			}
			size += b
			end++
		}
		got, err := p.projectChunk(ctx, plan, plan.pairs[start:end])
		if err != nil {
			if end-start < len(plan.pairs) { // the batch was split
				return nil, p.errorf(export, "batch of %d items from #%d: %w", end-start, plan.firstItem[start], err)
			}
			return nil, p.errorf(export, "%w", err)
		}
		results = append(results, got...)
		start = end
	}
	return results, nil
}

// projectChunk makes one project_batch call for pairs.
func (p *Plugin) projectChunk(ctx context.Context, plan *batchPlan, pairs []abi.BatchItem) ([]abi.BatchResult, error) {
	// The call's own indexes: each settings object and snapshot the pairs
	// use, in the order of first use.
	var settings, snaps []int // distinct plan indexes in call order
	settingsAt, snapsAt := map[int]int{}, map[int]int{}
	local := func(at map[int]int, order *[]int, k int) int {
		j, ok := at[k]
		if !ok {
			j = len(*order)
			at[k] = j
			*order = append(*order, k)
		}
		return j
	}
	sub := &abi.ProjectBatchRequest{Items: make([]abi.BatchItem, len(pairs))}
	for j, pair := range pairs {
		sub.Items[j] = abi.BatchItem{
			Settings: local(settingsAt, &settings, pair.Settings),
			Snapshot: local(snapsAt, &snaps, pair.Snapshot),
		}
	}
	size := 64 + 16*len(pairs)
	for _, k := range settings {
		size += len(plan.settings[k]) + 1
	}
	for _, k := range snaps {
		size += len(plan.snaps[k]) + 1
	}
	in := make([]byte, 0, size)
	in = append(in, `{"settings":[`...)
	sub.Settings = make([]json.RawMessage, len(settings))
	for j, k := range settings {
		if j > 0 {
			in = append(in, ',')
		}
		in = append(in, plan.settings[k]...)
		sub.Settings[j] = plan.settings[k]
	}
	in = append(in, `],"snapshots":[`...)
	sub.Snapshots = make([]abi.BatchSnapshot, len(snaps))
	for j, k := range snaps {
		if j > 0 {
			in = append(in, ',')
		}
		in = append(in, plan.snaps[k]...)
		sub.Snapshots[j] = *plan.snapReq[k]
	}
	in = append(in, `],"items":[`...)
	for j, it := range sub.Items {
		if j > 0 {
			in = append(in, ',')
		}
		in = append(in, '[')
		in = strconv.AppendInt(in, int64(it.Settings), 10)
		in = append(in, ',')
		in = strconv.AppendInt(in, int64(it.Snapshot), 10)
		in = append(in, ']')
	}
	in = append(in, "]}"...)

	var resp *abi.ProjectBatchResponse
	err := p.call(ctx, abi.ExportProjectBatch, in, func(out []byte) (err error) {
		resp, err = decodeChecked(sub, out, decodeBatchCompact, p.validateProjectBatch)
		return err
	})
	if err != nil {
		return nil, err
	}
	for i := range resp.Results {
		r := &resp.Results[i]
		if r.Error != "" {
			r.Error = refusalText(r.Error)
		} else {
			r.ProjectResponse = nonNilResponse(r.ProjectResponse)
		}
	}
	return resp.Results, nil
}

// projectEach answers the distinct pairs of plan with one project call
// each, for a plugin without project_batch.
func (p *Plugin) projectEach(ctx context.Context, req *abi.ProjectBatchRequest, plan *batchPlan) ([]abi.BatchResult, error) {
	results := make([]abi.BatchResult, len(plan.pairs))
	for k, i := range plan.firstItem {
		resp, err := p.project(ctx, req.ItemRequest(i))
		var refused *refusedError
		switch {
		case errors.As(err, &refused):
			results[k].Error = refused.msg
		case err != nil:
			return nil, p.errorf(abi.ExportProjectBatch, "items[%d]: %s (the plugin has no %s export): %w",
				i, abi.ExportProject, abi.ExportProjectBatch, err)
		default:
			results[k].ProjectResponse = resp
		}
	}
	return results, nil
}
