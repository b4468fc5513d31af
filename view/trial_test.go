package view_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
)

// batchFails is the default policy whose batch call always fails as a
// whole (too big, say) while each item alone projects; it counts both.
type batchFails struct {
	metakey.Reference
	batches, singles atomic.Int64
}

func (p *batchFails) ProjectBatch(context.Context, *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error) {
	p.batches.Add(1)
	return nil, errors.New("batch too big (test)")
}

func (p *batchFails) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	p.singles.Add(1)
	return p.Reference.Project(ctx, req)
}

// TestTryProject: equal trials are projected once, in one batch call;
// a refused trial gets the refusal; a batch that fails while no trial
// fails alone is the call's error, pinned on none.
func TestTryProject(t *testing.T) {
	ctx := t.Context()
	a := &pool.Snapshot{Tools: []*mcp.Tool{{Name: "read"}}}
	b := &pool.Snapshot{Tools: []*mcp.Tool{{Name: "log"}}}
	trials := []view.Trial{
		{Settings: json.RawMessage(`{}`), Snap: a},
		{Settings: json.RawMessage(`{"trust":"yes"}`), Snap: b}, // refused: not a bool
		{Settings: json.RawMessage(`{}`), Snap: a},
		{Settings: json.RawMessage(`{}`), Snap: b},
	}
	errs, err := view.TryProject(ctx, metakey.Reference{}, trials)
	require.NoError(t, err)
	require.Len(t, errs, 4)
	assert.NoError(t, errs[0])
	assert.ErrorIs(t, errs[1], abi.ErrRefused)
	assert.NoError(t, errs[2])
	assert.NoError(t, errs[3])

	p := &batchFails{}
	errs, err = view.TryProject(ctx, p, trials)
	require.ErrorContains(t, err, "batch too big (test)")
	assert.Equal(t, int64(1), p.batches.Load())
	assert.Equal(t, int64(3), p.singles.Load(), "each distinct trial tried alone")
	assert.ErrorIs(t, errs[1], abi.ErrRefused, "refusals found alone are kept")
	assert.NoError(t, errs[0])
}
