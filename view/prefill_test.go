package view_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

// countingBatcher counts batch calls and items and can fail them all.
type countingBatcher struct {
	calls, items atomic.Int64
	fail         atomic.Bool
}

func (b *countingBatcher) ProjectBatch(ctx context.Context, req *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error) {
	b.calls.Add(1)
	b.items.Add(int64(len(req.Items)))
	if b.fail.Load() {
		return nil, errors.New("batch down")
	}
	return metakey.Reference{}.ProjectBatch(ctx, req)
}

// TestPrefill: projections computed in one batch are found by the views
// that ask their memos next, without a policy call of their own; a failed
// batch leaves the memos empty, so the views project for themselves; and a
// memo already on a newer snapshot is not given an older one.
func TestPrefill(t *testing.T) {
	ctx := context.Background()
	ref := metakey.Reference{}
	c := &opcount.Counters{}
	settings := json.RawMessage(`{"includeTools":["a","c"],"trust":true}`)
	key, err := view.CanonicalKey(ctx, ref, settings)
	require.NoError(t, err)
	memoFS, memoGit := view.NewMemo(), view.NewMemo()
	snapFS, snapGit := newSnapshot(1, "a", "b", "c"), newSnapshot(1, "c", "d")

	b := &countingBatcher{}
	items := []view.PrefillItem{
		{Memo: memoFS, Key: key, Settings: settings, Snap: snapFS},
		{Memo: memoGit, Key: key, Settings: settings, Snap: snapGit},
		{Memo: memoFS, Key: key, Settings: settings, Snap: snapFS}, // a repeat
		{Memo: nil, Key: key, Settings: settings, Snap: snapFS},    // nothing to fill
	}
	require.NoError(t, view.Prefill(ctx, ref, b, c, items))
	assert.Equal(t, int64(1), b.calls.Load())
	assert.Equal(t, int64(2), b.items.Load(), "each (memo, key) once")
	assert.Equal(t, int64(1), c.PolicyCalls.Load())

	// Asking again finds everything in place: no call at all.
	require.NoError(t, view.Prefill(ctx, ref, b, c, items))
	assert.Equal(t, int64(1), b.calls.Load())

	apply := func(memo *view.Memo, snap *pool.Snapshot) *viewtest.Registry {
		reg := viewtest.NewRegistry()
		v := view.New(view.Config{Session: "s", Server: "fs", Registry: reg, Counters: c, Policy: ref, Settings: settings, Logger: quiet})
		_, err := v.SetSettings(ctx, settings)
		require.NoError(t, err)
		att, err := v.Attach(memo)
		require.NoError(t, err)
		before := c.Snapshot()
		require.NoError(t, att.Apply(ctx, snap))
		assert.Zero(t, c.Snapshot().Sub(before).PolicyCalls, "the projection came from the memo")
		return reg
	}
	requireRegistered(t, apply(memoFS, snapFS), "fs", string(settings), snapFS)
	requireRegistered(t, apply(memoGit, snapGit), "fs", string(settings), snapGit)

	// A failed batch fills nothing: the view then projects itself.
	b.fail.Store(true)
	snapFS2 := newSnapshot(2, "a", "c", "e")
	require.Error(t, view.Prefill(ctx, ref, b, c, []view.PrefillItem{{Memo: memoFS, Key: key, Settings: settings, Snap: snapFS2}}))
	reg := viewtest.NewRegistry()
	v := view.New(view.Config{Session: "s", Server: "fs", Registry: reg, Counters: c, Policy: ref, Settings: settings, Logger: quiet})
	att, err := v.Attach(memoFS)
	require.NoError(t, err)
	require.NoError(t, att.Apply(ctx, snapFS2))
	requireRegistered(t, reg, "fs", string(settings), snapFS2)

	// The memo is on v2 now: a prefill for v1 is not made.
	b.fail.Store(false)
	calls := b.calls.Load()
	other := json.RawMessage(`{"trust":false}`)
	otherKey, err := view.CanonicalKey(ctx, ref, other)
	require.NoError(t, err)
	require.NoError(t, view.Prefill(ctx, ref, b, c, []view.PrefillItem{{Memo: memoFS, Key: otherKey, Settings: other, Snap: snapFS}}))
	assert.Equal(t, calls, b.calls.Load(), "no batch for an older snapshot")

	// An item the policy refuses is left out of its memo: asked again, it
	// is sent again.
	refused := []view.PrefillItem{{Memo: memoGit, Key: "refused", Settings: json.RawMessage(`{"excludeTools":{}}`), Snap: snapGit}}
	require.NoError(t, view.Prefill(ctx, ref, b, c, refused))
	require.NoError(t, view.Prefill(ctx, ref, b, c, refused))
	assert.Equal(t, calls+2, b.calls.Load(), "a refusal is not remembered")
}
