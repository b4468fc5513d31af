package view

import (
	"context"
	"encoding/json"
	"runtime"
	"sync"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/pool"
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
	Snap     *pool.Snapshot
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
func Prefill(ctx context.Context, p abi.Policy, bp abi.BatchProjector, c *opcount.Counters, items []PrefillItem) error {
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
func prefill(ctx context.Context, p abi.Policy, bp abi.BatchProjector, c *opcount.Counters, items []PrefillItem) error {
	b := newBatch()
	itemOf := make([]int, len(items))
	for i, it := range items {
		n, err := b.add(p, it.Settings, it.Snap)
		if err != nil {
			return err
		}
		itemOf[i] = n
	}
	c.PolicyCalls.Add(1)
	resp, err := bp.ProjectBatch(ctx, &b.req)
	if err == nil {
		err = abi.ValidateProjectBatchWith(&b.req, resp, p.Handshake().Renames)
	}
	if err != nil {
		return err
	}
	for i, it := range items {
		if r := resp.Results[itemOf[i]]; r.Error == "" {
			it.Memo.put(p, it.Key, it.Snap, projection(it.Snap, r.ProjectResponse))
		}
	}
	return nil
}

// A batch builds a project_batch request: each distinct settings object
// (by bytes) and snapshot (by address) once, and one item per distinct
// (settings, snapshot) pair.
type batch struct {
	req        abi.ProjectBatchRequest
	settingsAt map[string]int
	snapAt     map[*pool.Snapshot]int
	itemAt     map[batchPair]int
}

type batchPair struct {
	settings string
	snap     *pool.Snapshot
}

func newBatch() *batch {
	return &batch{settingsAt: make(map[string]int), snapAt: make(map[*pool.Snapshot]int), itemAt: make(map[batchPair]int)}
}

// add returns the index of the item projecting snap for settings, adding
// what the request lacks of them; what of snap crosses into p is as
// Project sends it.
func (b *batch) add(p abi.Policy, settings json.RawMessage, snap *pool.Snapshot) (int, error) {
	k := batchPair{string(settings), snap}
	if n, ok := b.itemAt[k]; ok {
		return n, nil
	}
	si, ok := b.settingsAt[k.settings]
	if !ok {
		si = len(b.req.Settings)
		b.settingsAt[k.settings] = si
		b.req.Settings = append(b.req.Settings, settings)
	}
	ni, ok := b.snapAt[snap]
	if !ok {
		names, err := snapshotNames(p, snap)
		if err != nil {
			return 0, err
		}
		ni = len(b.req.Snapshots)
		b.snapAt[snap] = ni
		b.req.Snapshots = append(b.req.Snapshots, names)
	}
	n := len(b.req.Items)
	b.itemAt[k] = n
	b.req.Items = append(b.req.Items, abi.BatchItem{Settings: si, Snapshot: ni})
	return n, nil
}
