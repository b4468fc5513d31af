package view

import (
	"context"
	"encoding/json"
	"runtime"
	"sync"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/churn"
)

// prefillChunk is the fewest items worth a batch call of their own: a
// prefill is split into at most GOMAXPROCS calls, so that a plugin with
// several instances works on them side by side, but no smaller than this.
const prefillChunk = 64

// A PrefillItem is one projection a view is about to ask its memo for: the
// projection of Snap for settings whose metadata key is Key.
type PrefillItem struct {
	Memo     *Memo
	Key      string
	Settings json.RawMessage
	Snap     *Snapshot
}

// Prefill computes the projections of items that their memos lack in a few
// batched calls of bp and leaves each in its memo under p, the policy the
// views use (bp is p, or the policy p wraps), where the views that ask for
// it next find it: a reload re-projecting 2,000 (key, snapshot) pairs then
// makes a handful of plugin calls instead of 2,000. It does nothing when p
// cannot be a memo key.
// Items refused by the policy, and all items of a failed call, are left out
// of the memos; their views then ask the policy themselves and fail closed
// with its own error, as without Prefill. The returned error is the first
// failed call's, for the caller's log; it is never a view's error.
func Prefill(ctx context.Context, p abi.Policy, bp abi.BatchProjector, c *churn.Counters, items []PrefillItem) error {
	if bp == nil || !usableAsKey(p) {
		return nil
	}
	type pending struct {
		memo *Memo
		key  string
	}
	seen := make(map[pending]bool)
	var todo []PrefillItem
	for _, it := range items {
		if it.Memo == nil || it.Snap == nil || it.Key == "" || seen[pending{it.Memo, it.Key}] {
			continue
		}
		seen[pending{it.Memo, it.Key}] = true
		if it.Memo.wants(p, it.Key, it.Snap) {
			todo = append(todo, it)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	chunks := min(runtime.GOMAXPROCS(0), (len(todo)+prefillChunk-1)/prefillChunk)
	per := (len(todo) + chunks - 1) / chunks
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for start := 0; start < len(todo); start += per {
		part := todo[start:min(start+per, len(todo))]
		wg.Go(func() {
			if err := prefill(ctx, p, bp, c, part); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return firstErr
}

// prefill makes one batch call for items and memoizes its answers.
func prefill(ctx context.Context, p abi.Policy, bp abi.BatchProjector, c *churn.Counters, items []PrefillItem) error {
	req := &abi.ProjectBatchRequest{Items: make([]abi.BatchItem, len(items))}
	settingsAt := make(map[string]int)
	snapAt := make(map[*Snapshot]int)
	for i, it := range items {
		si, ok := settingsAt[string(it.Settings)]
		if !ok {
			si = len(req.Settings)
			settingsAt[string(it.Settings)] = si
			req.Settings = append(req.Settings, it.Settings)
		}
		ni, ok := snapAt[it.Snap]
		if !ok {
			names, err := snapshotNames(p, it.Snap)
			if err != nil {
				return err
			}
			ni = len(req.Snapshots)
			snapAt[it.Snap] = ni
			req.Snapshots = append(req.Snapshots, names)
		}
		req.Items[i] = abi.BatchItem{Settings: si, Snapshot: ni}
	}
	c.PolicyCalls.Add(1)
	resp, err := bp.ProjectBatch(ctx, req)
	if err == nil {
		err = abi.ValidateProjectBatch(req, resp)
	}
	if err != nil {
		return err
	}
	for i, it := range items {
		if r := resp.Results[i]; r.Error == "" {
			it.Memo.put(p, it.Key, it.Snap, projection(it.Snap, r.ProjectResponse))
		}
	}
	return nil
}
