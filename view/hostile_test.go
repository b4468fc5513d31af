package view_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/view"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

// hostilePath is the misbehaving Go plugin (testplugins/hostile-go/README.md):
// it answers like the default policy unless its settings ask for a
// misbehaviour with {"mode": ...}.
var hostilePath = filepath.Join("..", "testplugins", "hostile-go", "hostile", "hostile.wasm")

// loadPlugin loads a wasm policy for a test and closes it when t ends.
func loadPlugin(t *testing.T, path string, opts host.Options) *host.Plugin {
	t.Helper()
	var (
		p   *host.Plugin
		err error
	)
	if path == "" {
		p, err = host.LoadEmbedded(context.Background(), policydefault.Name, policydefault.Wasm, policydefault.SHA256, opts)
	} else {
		p, err = host.LoadFile(context.Background(), path, opts)
	}
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close(context.Background())) })
	return p
}

// TestHostilePluginFailsClosed: a view whose wasm policy misbehaves (a
// trap, a timeout, a memory bomb, bad output, in either export) fails
// closed: nothing from the server stays registered in that session and the
// error is recorded; snapshots arriving meanwhile keep it closed; a later
// refresh with good settings restores it. A view of another session on the
// same snapshots, projected by the default wasm policy, is untouched
// throughout.
func TestHostilePluginFailsClosed(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the hostile Go plugin's misbehaviours")
	}
	cache := t.TempDir()
	hostile := loadPlugin(t, hostilePath, host.Options{
		CacheDir: cache, MemoryLimitBytes: 64 << 20, CallTimeout: 20 * time.Second, MaxInstances: 1,
	})
	// The loop mode needs a short limit; the other modes end by themselves.
	looping := loadPlugin(t, hostilePath, host.Options{
		CacheDir: cache, MemoryLimitBytes: 64 << 20, CallTimeout: time.Second, MaxInstances: 1,
	})
	def := loadPlugin(t, "", host.Options{CacheDir: cache, CallTimeout: time.Minute})

	tests := []struct {
		mode, in string
		want     error
	}{
		{"panic", "", host.ErrPluginTrap},
		{"panic", "project", host.ErrPluginTrap},
		{"bomb", "", host.ErrPluginTrap},
		{"recurse", "project", host.ErrPluginTrap},
		{"loop", "", host.ErrPluginTimeout},
		{"loop", "project", host.ErrPluginTimeout},
		{"big", "", host.ErrBadOutput},
		{"shape", "", host.ErrBadOutput},
		{"shape", "project", host.ErrBadOutput},
		{"fields", "", host.ErrBadOutput},
	}
	for _, tt := range tests {
		t.Run(tt.mode+"/"+tt.in, func(t *testing.T) {
			ctx := context.Background()
			p := hostile
			if tt.mode == "loop" {
				p = looping
			}
			const good = `{"mode":"good","excludeTools":["write"]}`
			snap := newSnapshot(1, "read", "write", "list")
			memo := view.NewMemo() // one snapshot owner for both sessions

			bad := &fixture{counters: &opcount.Counters{}, reg: viewtest.NewRegistry()}
			bad.view = view.New(view.Config{Session: "s1", Server: "fs", Registry: bad.reg, Counters: bad.counters,
				Policy: p, Settings: json.RawMessage(good), Logger: quiet})
			other := &fixture{counters: &opcount.Counters{}, reg: viewtest.NewRegistry()}
			other.view = view.New(view.Config{Session: "s2", Server: "fs", Registry: other.reg, Counters: other.counters,
				Policy: def, Settings: json.RawMessage(`{"trust":true}`), Logger: quiet})
			var err error
			bad.att, err = bad.view.Attach(memo)
			require.NoError(t, err)
			other.att, err = other.view.Attach(memo)
			require.NoError(t, err)
			for _, f := range []*fixture{bad, other} {
				require.NoError(t, f.att.Apply(ctx, snap))
			}
			requireRegistered(t, bad.reg, "fs", good, snap)
			requireRegistered(t, other.reg, "fs", `{"trust":true}`, snap)
			otherOps := other.reg.OpCount()

			// The misbehaving refresh.
			settings := fmt.Sprintf(`{"mode":%q,"in":%q,"excludeTools":["write"]}`, tt.mode, tt.in)
			_, err = bad.view.SetSettings(ctx, json.RawMessage(settings))
			require.ErrorIs(t, err, tt.want)
			assert.ErrorIs(t, bad.view.Err(), tt.want, "the error is recorded")
			assert.ErrorContains(t, bad.view.Err(), `session "s1", server "fs"`)
			assert.Empty(t, bad.reg.Servers(), "nothing from the server stays registered")
			assert.Nil(t, bad.view.Applied())
			assert.Empty(t, bad.view.Key())

			// A new snapshot reaches both sessions: the failing view stays
			// closed (the plugin still misbehaves for its settings), the
			// other one follows.
			snap2 := newSnapshot(2, "read", "write", "list", "delete")
			require.ErrorIs(t, bad.att.Apply(ctx, snap2), tt.want)
			assert.Empty(t, bad.reg.Servers())
			require.NoError(t, other.att.Apply(ctx, snap2))
			requireRegistered(t, other.reg, "fs", `{"trust":true}`, snap2)
			assert.Greater(t, other.reg.OpCount(), otherOps, "the other session got the new snapshot")
			otherOps = other.reg.OpCount()

			// A good refresh restores the failed view.
			const restored = `{"mode":"good","trust":false,"excludeTools":["delete"]}`
			changed, err := bad.view.SetSettings(ctx, json.RawMessage(restored))
			require.NoError(t, err)
			assert.True(t, changed)
			assert.NoError(t, bad.view.Err())
			requireRegistered(t, bad.reg, "fs", restored, snap2)

			// The other session saw none of it.
			assert.NoError(t, other.view.Err())
			assert.Equal(t, otherOps, other.reg.OpCount())
			requireRegistered(t, other.reg, "fs", `{"trust":true}`, snap2)
		})
	}
}

// TestNondeterministicPluginDoesNotChurn: a plugin whose keys change from
// call to call (testplugins/hostile-go/nondeterministic) cannot make a view
// replay on every refresh with the same settings, because the host answers
// repeated settings from its memo; equivalent settings in other bytes get a
// new key, and the replay they cause changes nothing registered.
func TestNondeterministicPluginDoesNotChurn(t *testing.T) {
	ctx := context.Background()
	// A full run compiles the plugin into an empty cache; -short reuses
	// the one kept between runs, as the host's -short tests do.
	cache := t.TempDir()
	if d := host.DefaultCacheDir(); testing.Short() && d != "" {
		cache = d
	}
	p := loadPlugin(t, filepath.Join("..", "testplugins", "hostile-go", "nondeterministic", "nondeterministic.wasm"),
		host.Options{CacheDir: cache, CallTimeout: time.Minute})
	snap := newSnapshot(1, "read", "write")
	f := newFixture(t, p, `{"excludeTools":["write"]}`, snap)
	requireRegistered(t, f.reg, "fs", `{"excludeTools":["write"]}`, snap)
	key, ops := f.view.Key(), f.reg.OpCount()

	for range 3 {
		before := f.counters.Snapshot()
		changed, err := f.view.SetSettings(ctx, json.RawMessage(`{"excludeTools":["write"]}`))
		require.NoError(t, err)
		assert.False(t, changed, "the same settings bytes: the memoized key")
		assert.Equal(t, key, f.view.Key())
		assert.Zero(t, f.counters.Snapshot().Sub(before).Replays)
	}

	changed, err := f.view.SetSettings(ctx, json.RawMessage(`{ "excludeTools": ["write"] }`))
	require.NoError(t, err)
	assert.True(t, changed, "the plugin computed a new key")
	assert.NotEqual(t, key, f.view.Key())
	assert.Equal(t, ops, f.reg.OpCount(), "the replay changed nothing registered")
	requireRegistered(t, f.reg, "fs", `{"excludeTools":["write"]}`, snap)
}
