package view

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/pool"
)

// A Trial is a projection a caller needs to know a policy can make before
// it lets views depend on that policy: Snap projected for Settings.
type Trial struct {
	Settings json.RawMessage
	Snap     *pool.Snapshot
}

// TryProject projects each trial with p and keeps nothing: a policy swap
// asks it whether the new policy can project what the sessions see now
// before any view depends on it. It returns one error per trial, nil for
// those p projects, a refusal (wrapping abi.ErrRefused) or the failure of
// the call for the others. Equal trials (the same settings bytes and
// snapshot) are projected once, all distinct ones in one call when p is an
// abi.BatchProjector (one call each otherwise, see abi.ProjectAll). When
// that call fails as a whole (a trap, a timeout, bad output), the trials
// are tried one by one until one fails alone, which gets the error (the
// refusals found on the way are kept, the trials not tried keep nil); err
// is the batch's failure when no trial failed alone.
func TryProject(ctx context.Context, p abi.Policy, trials []Trial) (errs []error, err error) {
	b := newBatch()
	itemOf := make([]int, len(trials))
	var firstOf []int // the first trial of each item
	for i, tr := range trials {
		n, err := b.add(p, tr.Settings, snapOrEmpty(tr.Snap))
		if err != nil {
			return nil, err
		}
		if itemOf[i] = n; n == len(firstOf) {
			firstOf = append(firstOf, i)
		}
	}
	errs = make([]error, len(trials))
	if len(firstOf) == 0 {
		return errs, nil
	}
	itemErrs := make([]error, len(firstOf))
	resp, batchErr := abi.ProjectAll(ctx, p, &b.req)
	if batchErr == nil {
		for n, r := range resp.Results {
			itemErrs[n] = r.Err()
		}
	} else {
		err = batchErr // unless a trial fails alone
		for n, i := range firstOf {
			if ctx.Err() != nil {
				break
			}
			_, perr := Project(ctx, p, trials[i].Settings, snapOrEmpty(trials[i].Snap))
			itemErrs[n] = perr
			if perr != nil && !errors.Is(perr, abi.ErrRefused) {
				err = nil
				break
			}
		}
	}
	for i, n := range itemOf {
		errs[i] = itemErrs[n]
	}
	return errs, err
}

// snapOrEmpty returns snap, or one shared empty snapshot for nil.
func snapOrEmpty(snap *pool.Snapshot) *pool.Snapshot {
	if snap == nil {
		return emptySnapshot
	}
	return snap
}

var emptySnapshot = &pool.Snapshot{}
