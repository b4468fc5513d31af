package view

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/wasmhost/wasmhost/abi"
)

// A Trial is a projection a caller needs to know a policy can make before
// it lets views depend on that policy: Snap projected for Settings.
type Trial struct {
	Settings json.RawMessage
	Snap     *Snapshot
}

// TryProject projects each trial with p and keeps nothing: a policy swap
// asks it whether the new policy can project what the sessions see now
// before any view depends on it. It returns one error per trial, nil for
// those p projects, a refusal (wrapping abi.ErrRefused) or the failure of
// the call for the others. Equal trials (the same settings bytes and
// snapshot) are projected once, all distinct ones in one call when p is an
// abi.BatchProjector (one call each otherwise, see abi.ProjectAll). When
// that call fails as a whole (a trap, a timeout, bad output), the trials
// are tried one by one until one fails alone, which gets the error; the
// others keep nil. err is the batch's failure when no trial failed alone.
func TryProject(ctx context.Context, p abi.Policy, trials []Trial) (errs []error, err error) {
	type pair struct {
		settings string
		snap     *Snapshot
	}
	errs = make([]error, len(trials))
	at := make(map[pair]int) // distinct pair -> its item
	itemOf := make([]int, len(trials))
	var firstOf []int // the first trial of each item
	req := &abi.ProjectBatchRequest{}
	settingsAt := make(map[string]int)
	snapAt := make(map[*Snapshot]int)
	for i, tr := range trials {
		k := pair{string(tr.Settings), tr.Snap}
		if n, ok := at[k]; ok {
			itemOf[i] = n
			continue
		}
		si, ok := settingsAt[k.settings]
		if !ok {
			si = len(req.Settings)
			settingsAt[k.settings] = si
			req.Settings = append(req.Settings, tr.Settings)
		}
		ni, ok := snapAt[tr.Snap]
		if !ok {
			names, err := snapshotNames(p, snapOrEmpty(tr.Snap))
			if err != nil {
				return nil, err
			}
			ni = len(req.Snapshots)
			snapAt[tr.Snap] = ni
			req.Snapshots = append(req.Snapshots, names)
		}
		at[k] = len(req.Items)
		itemOf[i] = len(req.Items)
		firstOf = append(firstOf, i)
		req.Items = append(req.Items, abi.BatchItem{Settings: si, Snapshot: ni})
	}
	if len(req.Items) == 0 {
		return errs, nil
	}
	itemErrs := make([]error, len(req.Items))
	resp, batchErr := abi.ProjectAll(ctx, p, req)
	if batchErr == nil {
		for n, r := range resp.Results {
			itemErrs[n] = r.Err()
		}
	} else {
		pinned := false
		for n, i := range firstOf {
			if ctx.Err() != nil {
				break
			}
			_, err := Project(ctx, p, trials[i].Settings, snapOrEmpty(trials[i].Snap))
			if err != nil {
				itemErrs[n] = err
				if !errors.Is(err, abi.ErrRefused) {
					pinned = true
					break
				}
			}
		}
		if !pinned {
			err = batchErr
		}
	}
	for i := range trials {
		errs[i] = itemErrs[itemOf[i]]
	}
	return errs, err
}

// snapOrEmpty returns snap, or an empty snapshot for nil.
func snapOrEmpty(snap *Snapshot) *Snapshot {
	if snap == nil {
		return &Snapshot{}
	}
	return snap
}
