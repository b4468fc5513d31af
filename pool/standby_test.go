package pool_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

// TestStandbyMove: a handle moved onto a standby connection keeps every
// registration both connections have (no registry call when they list
// the same), serves through the new connection once moved, and the old
// connection closes only when the old handle is released.
func TestStandbyMove(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := newEnv(t, pool.Options{}, newUpstream(t, "fs", "read", "write"))
	oldSpec := stdioSpec("fs")
	reg := viewtest.NewRegistry()
	old := e.acquire(oldSpec, "s1", `{"trust":true}`, reg)
	other := e.acquire(oldSpec, "s2", `{}`, viewtest.NewRegistry())
	n := reg.OpCount()

	newSpec := oldSpec.Clone()
	newSpec.Args = []string{"--root", "/srv2"}
	sb, err := e.pool.Standby(ctx, newSpec)
	require.NoError(t, err)
	assert.Equal(t, newSpec.Fingerprint(), sb.Identity())
	assert.Equal(t, 2, e.upstreams["fs"].Dials(), "the new connection is made while the old one serves")
	assert.Equal(t, n, reg.OpCount(), "a standby is seen by no session")

	h, err := sb.Move(ctx, old)
	require.NoError(t, err)
	sb.Release(ctx)
	assert.Equal(t, newSpec.Fingerprint(), h.Identity())
	assert.Same(t, view.Of(old), view.Of(h))
	assert.Equal(t, n, reg.OpCount(), "the same lists on both connections: the session's registry is not touched")
	requireProjection(t, reg, "fs", `{"trust":true}`, h.Entry().Snapshot())
	require.NotNil(t, h.Conn())
	require.NotNil(t, old.Conn(), "the old handle serves until it is released")
	assert.Equal(t, pool.StateReady, old.Entry().State())

	require.NoError(t, old.Release(ctx))
	assert.Equal(t, n, reg.OpCount(), "releasing the moved-from handle deletes nothing")
	assert.Equal(t, []string{"read", "write"}, reg.ToolNames("fs"))
	assert.Equal(t, pool.StateReady, old.Entry().State(), "another session still holds the old connection")
	require.NoError(t, other.Release(ctx))
	assert.Equal(t, pool.StateClosed, old.Entry().State())
	assert.Equal(t, []string{newSpec.Fingerprint()}, entryIDs(e.pool))

	// A moved handle behaves as any: a refresh replays its snapshot.
	changed, err := h.RefreshMetadata(ctx, []byte(`{"excludeTools":["write"]}`))
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, []string{"read"}, reg.ToolNames("fs"))
	require.NoError(t, h.Release(ctx))
	assert.Empty(t, reg.Servers())
	assert.Empty(t, e.pool.Entries())
}

// TestStandbyFails: a standby whose connection cannot be made leaves
// nothing behind, and a held handle is not touched.
func TestStandbyFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := newEnv(t, pool.Options{}, newUpstream(t, "fs", "read"))
	boom := errors.New("no such file")
	fail := func(_ context.Context, spec pool.Spec) error {
		if slices.Contains(spec.Args, "/missing") {
			return boom
		}
		return nil
	}
	e.beforeDial.Store(&fail)
	reg := viewtest.NewRegistry()
	old := e.acquire(stdioSpec("fs"), "s1", `{}`, reg)
	n := reg.OpCount()

	bad := stdioSpec("fs")
	bad.Args = []string{"/missing"}
	_, err := e.pool.Standby(ctx, bad)
	require.ErrorIs(t, err, boom)
	assert.Equal(t, []string{stdioSpec("fs").Fingerprint()}, entryIDs(e.pool))
	assert.Equal(t, n, reg.OpCount())
	require.NotNil(t, old.Conn())

	// A standby released without a move closes its connection.
	good := stdioSpec("fs")
	good.Args = []string{"/elsewhere"}
	sb, err := e.pool.Standby(ctx, good)
	require.NoError(t, err)
	sb.Release(ctx)
	sb.Release(ctx)
	assert.Equal(t, pool.StateClosed, sb.Entry().State())
	_, err = sb.Move(ctx, old)
	require.ErrorIs(t, err, pool.ErrReleased)
	require.NoError(t, old.Release(ctx))
	_, err = sb.Move(ctx, old)
	require.ErrorIs(t, err, pool.ErrReleased)
}

func entryIDs(p *pool.Pool) []string {
	var ids []string
	for _, info := range p.Entries() {
		ids = append(ids, info.ID)
	}
	return ids
}
