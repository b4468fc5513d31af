package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
)

// batchPath starts the message of a case that failed on the batch path.
const batchPath = "batch path (project_batch): "

// batchProjector returns p as an abi.BatchProjector when its batch path is
// worth checking: p implements it and is not a host.Plugin without the
// project_batch export, whose batches are one project call per item, the
// very calls a case has already checked.
func batchProjector(p abi.Policy) (abi.BatchProjector, bool) {
	bp, ok := p.(abi.BatchProjector)
	if hp, isPlugin := p.(*host.Plugin); isPlugin && !hp.HasProjectBatch() {
		return nil, false
	}
	return bp, ok
}

// A suiteBatch is the batch path's answer for the project and reject cases
// of a suite: one ProjectBatch call for all of them, or, when that call
// fails as a whole, one call for each case alone, to tell which case makes
// it fail.
type suiteBatch struct {
	items map[*Case]*batchItem
	// failed is why the batch of all cases failed when every case alone
	// passed: then each case fails with it.
	failed string
	// renames is the policy's handshake's: whether its answers may rename.
	renames bool
}

// A batchItem is one case's part of a batch and its outcome.
type batchItem struct {
	snap *abi.BatchSnapshot
	// vsnap is the snapshot of a project case, whose descriptions tell a
	// replaced one; nil for a reject case.
	vsnap *pool.Snapshot
	// result is the case's answer; f is set instead when the batch the
	// case was last sent in failed as a whole.
	result abi.BatchResult
	f      *failure
}

// newSuiteBatch sends the project and reject cases among cases through
// p's batch path. It returns nil when p has no batch path to check.
func newSuiteBatch(ctx context.Context, p abi.Policy, cases []*Case) *suiteBatch {
	bp, ok := batchProjector(p)
	if !ok {
		return nil
	}
	sb := &suiteBatch{items: map[*Case]*batchItem{}, renames: handshake(p).Renames}
	annotations := slices.Contains(handshake(p).Wants, abi.WantToolAnnotations)
	var batch []*Case
	for _, c := range cases {
		var snap *abi.BatchSnapshot
		var vsnap *pool.Snapshot
		switch c.Kind {
		case KindProject:
			vs, err := DecodeSnapshot(c.Snapshot)
			if err != nil {
				continue // the case fails on its own
			}
			names, err := view.SnapshotNames(vs, annotations)
			if err != nil {
				continue
			}
			snap, vsnap = &names, vs
		case KindReject:
			// The snapshot runReject projects.
			snap = &abi.BatchSnapshot{Tools: []string{}, Prompts: []string{}, Resources: []string{}}
		default:
			continue
		}
		sb.items[c] = &batchItem{snap: snap, vsnap: vsnap}
		batch = append(batch, c)
	}
	if len(batch) == 0 {
		return sb
	}
	err := sb.send(ctx, bp, batch)
	if err == nil || len(batch) == 1 {
		return sb
	}
	// Find the cases that make the batch fail: each goes alone.
	culprits := 0
	for _, c := range batch {
		if sb.send(ctx, bp, []*Case{c}) != nil {
			culprits++
		}
	}
	if culprits == 0 {
		sb.failed = fmt.Sprintf("the batch of the suite's %d project and reject cases failed, though each case passes alone: %v", len(batch), err)
	}
	return sb
}

// send makes one ProjectBatch call for cases, item j being case j's
// settings and snapshot, and records each case's outcome. (A plugin's
// host.Plugin sends each distinct settings object and snapshot once
// itself.) It returns the error of a call that failed as a whole.
func (sb *suiteBatch) send(ctx context.Context, bp abi.BatchProjector, cases []*Case) (err error) {
	req := &abi.ProjectBatchRequest{}
	for j, c := range cases {
		req.Settings = append(req.Settings, c.Settings)
		req.Snapshots = append(req.Snapshots, *sb.items[c].snap)
		req.Items = append(req.Items, abi.BatchItem{Settings: j, Snapshot: j})
	}
	var resp *abi.ProjectBatchResponse
	func() {
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("the policy panicked: %v", v)
			}
		}()
		resp, err = bp.ProjectBatch(ctx, req)
	}()
	switch {
	case err != nil:
	case resp == nil:
		err = errors.New("ProjectBatch returned no response")
	default:
		err = abi.ValidateProjectBatchWith(req, resp, sb.renames)
	}
	for j, c := range cases {
		it := sb.items[c]
		if err != nil {
			it.f = fail(batchPath+"the call failed: %v", err)
			continue
		}
		it.result, it.f = resp.Results[j], nil
	}
	return err
}

// check fails case c when its answer on the batch path differs from what
// the case expects, and records that answer in ans. For a reject case,
// refusal is the message project refused the settings with ("" when
// unknown): the batch path must refuse them with the same message
// (abi/SPEC.md section 5.1). A nil sb, or a case sb did not send, passes.
func (sb *suiteBatch) check(c *Case, ans *answers, refusal string) *failure {
	if sb == nil {
		return nil
	}
	it, ok := sb.items[c]
	switch {
	case !ok:
		return nil
	case sb.failed != "":
		return fail("%s%s", batchPath, sb.failed)
	case it.f != nil:
		return it.f
	}
	r := it.result
	var got Projected
	gotText := "error " + strconv.Quote(r.Error)
	if r.Error == "" {
		got = summarizeResult(it.snap, it.vsnap, r.ProjectResponse)
		gotText = got.String()
	}
	if c.Kind == KindReject {
		// Only a reject case's batch answer can differ between two ways
		// while the case passes both: a project case's must equal the
		// golden projection.
		ans.add("the batch path's answer", gotText)
		if r.Error == "" {
			return fail(batchPath+"the policy accepted settings it must refuse").wantGot("an error", gotText)
		}
		if refusal != "" && r.Error != refusal {
			return fail(batchPath+"the refusal message is not project's (abi/SPEC.md section 5.1)").
				wantGot("error "+strconv.Quote(refusal), gotText)
		}
		return nil
	}
	want := c.Project.String()
	if r.Error != "" {
		return fail(batchPath+"the policy refused the settings").wantGot(want, gotText)
	}
	if !c.Project.equal(got) {
		return fail(batchPath+"projection differs").wantGot(want, gotText)
	}
	return nil
}

// summarizeResult reduces a batch projection of snap (nil for an empty
// one), already checked against snap, to its golden form, as
// SummarizeSnapshot would the view's projection: a rename to the
// upstream's own name is none, and a description is listed when it is
// not vsnap's (the case's snapshot; nil for none).
func summarizeResult(snap *abi.BatchSnapshot, vsnap *pool.Snapshot, r *abi.ProjectResponse) Projected {
	out := Projected{}.normalized()
	if r == nil {
		return out
	}
	for _, d := range r.Tools {
		t := ProjectedTool{Name: snap.Tools[d.Index], Trust: d.Trust, AlwaysLoad: d.AlwaysLoad}
		if d.Name != t.Name {
			t.Rename = d.Name
		}
		if d.Description != "" && (vsnap == nil || d.Description != vsnap.Tools[d.Index].Description) {
			t.Description = d.Description
		}
		out.Tools = append(out.Tools, t)
	}
	for j, i := range r.Prompts {
		rn := r.PromptRename(j)
		p := ProjectedPrompt{Name: snap.Prompts[i]}
		if rn.Name != p.Name {
			p.Rename = rn.Name
		}
		if rn.Description != "" && (vsnap == nil || rn.Description != vsnap.Prompts[i].Description) {
			p.Description = rn.Description
		}
		out.Prompts = append(out.Prompts, p)
	}
	for _, i := range r.Resources {
		out.Resources = append(out.Resources, snap.Resources[i])
	}
	return out
}
