package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/view"
)

var (
	hammerSessions = []string{"a", "b", "c", "d"}
	hammerServers  = []string{"fs", "git", "demo"}
)

// randomSettings returns a random metadata settings object (as a map for
// the cfg builder), keys absent at random.
func randomSettings(rng *rand.Rand) map[string]any {
	m := map[string]any{}
	includes := []string{"", `null`, `[]`, `["read"]`, `["read","log(x)","echo","echo"]`, `["list","diff","pid","dyn"]`}
	excludes := []string{"", `null`, `[]`, `["write"]`, `["echo","read"]`}
	bools := []string{"", `null`, `true`, `false`}
	if v := includes[rng.IntN(len(includes))]; v != "" {
		m["includeTools"] = raw(v)
	}
	if v := excludes[rng.IntN(len(excludes))]; v != "" {
		m["excludeTools"] = raw(v)
	}
	if v := bools[rng.IntN(len(bools))]; v != "" {
		m["trust"] = raw(v)
	}
	if v := bools[rng.IntN(len(bools))]; v != "" {
		m["alwaysLoadTools"] = raw(v)
	}
	return m
}

// randomCfg returns a random config over hammerServers and a random subset
// of hammerSessions.
func randomCfg(rng *rand.Rand) *cfg {
	c := newCfg()
	for _, name := range hammerServers {
		kv := []any{"args", []string{"--variant", string(rune('0' + rng.IntN(2)))}}
		if name == "git" {
			kv = append(kv, "pooled", rng.IntN(2) == 0)
		}
		if rng.IntN(10) == 0 {
			kv = append(kv, "disabled", true)
		}
		for k, v := range randomSettings(rng) {
			kv = append(kv, k, v)
		}
		c.server(name, kv...)
	}
	for _, s := range hammerSessions {
		if rng.IntN(4) == 0 {
			continue
		}
		var kv []any
		if rng.IntN(3) == 0 {
			var list []string
			for _, srv := range hammerServers {
				if rng.IntN(2) == 0 {
					list = append(list, srv)
				}
			}
			if list == nil {
				list = []string{}
			}
			kv = append(kv, "servers", list)
		}
		overrides := map[string]any{}
		for _, srv := range hammerServers {
			if rng.IntN(2) == 0 {
				o := randomSettings(rng)
				if rng.IntN(10) == 0 {
					o["disabled"] = true
				}
				overrides[srv] = o
			}
		}
		kv = append(kv, "overrides", overrides)
		c.session(s, kv...)
	}
	return c
}

// hammerN is n operations of one kind of a hammer, half as many under
// -short: the races are as varied, over fewer rounds.
func hammerN(n int) int {
	if testing.Short() {
		return n / 2
	}
	return n
}

func TestHammer(t *testing.T) {
	t.Parallel()
	fs := newUpstream("fs", "read", "write", "list")
	e := newEnv(t, fs, newUpstream("git", "log", "diff"), newUpstream("demo"))
	ctx := context.Background()
	var wg sync.WaitGroup
	var stop atomic.Bool
	var dyn atomic.Bool // whether fs currently has the "dyn" tool

	base := randomCfg(rand.New(rand.NewPCG(1, 1))).build(t)
	e.apply(base)

	// Appliers: concurrent Apply calls with random configs.
	for g := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g)+10, 7))
			for range hammerN(20) {
				_, err := e.rec.Apply(ctx, randomCfg(rng).build(t))
				assert.NoError(t, err)
			}
		})
	}
	// Overlays: random puts and deletes.
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(20, 7))
		for range hammerN(40) {
			session := hammerSessions[rng.IntN(len(hammerSessions))]
			server := hammerServers[rng.IntN(len(hammerServers))]
			if rng.IntN(2) == 0 {
				_, err := e.rec.DeleteOverlay(ctx, session, server)
				if err != nil {
					assert.ErrorIs(t, err, reconcile.ErrNoOverlay)
				}
				continue
			}
			srv := &config.Server{Name: server, Command: "/usr/bin/" + server + "-server", Args: []string{"--variant", string(rune('0' + rng.IntN(3)))}, Pooled: rng.IntN(3) > 0, Disabled: rng.IntN(8) == 0}
			s := randomSettings(rng)
			srv.Settings = config.Settings{}
			if v, ok := s["includeTools"]; ok {
				srv.Settings.IncludeTools = v.(json.RawMessage)
			}
			if v, ok := s["trust"]; ok {
				srv.Settings.Trust = v.(json.RawMessage)
			}
			_, err := e.rec.PutOverlay(ctx, session, srv)
			if err != nil {
				assert.ErrorIs(t, err, reconcile.ErrUnknownSession)
			}
		}
	})
	// Policy swaps.
	wg.Go(func() {
		for i := range hammerN(10) {
			var p abi.Policy = ref
			if i%2 == 0 {
				p = altPolicy{}
			}
			_, err := e.rec.SetPolicy(ctx, p)
			assert.NoError(t, err)
		}
	})
	// Restarts and teardowns.
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(30, 7))
		for range hammerN(10) {
			server := hammerServers[rng.IntN(len(hammerServers))]
			if rng.IntN(2) == 0 {
				if err := e.rec.Restart(ctx, server); err != nil {
					assert.ErrorIs(t, err, reconcile.ErrNotBound)
				}
				continue
			}
			session := hammerSessions[rng.IntN(len(hammerSessions))]
			if err := e.rec.Teardown(ctx, session, server); err != nil && !errors.Is(err, reconcile.ErrNotBound) {
				assert.ErrorIs(t, err, reconcile.ErrUnknownSession)
			}
		}
	})
	// Upstream list changes.
	wg.Go(func() {
		for range hammerN(30) {
			if dyn.Load() {
				fs.Server.RemoveTools("dyn")
				dyn.Store(false)
			} else {
				fs.AddTool("dyn")
				dyn.Store(true)
			}
			time.Sleep(time.Millisecond)
		}
	})
	// Readers, concurrent with everything above.
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for !stop.Load() {
				st := e.rec.State()
				for _, s := range st.Sessions {
					for _, b := range s.Servers {
						if h := e.rec.Handle(s.Name, b.Server); h != nil {
							_ = h.Conn()
							_ = view.Of(h).Applied()
						}
					}
				}
				_ = e.rec.Bindings("a")
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	readers.Wait()

	// Bring the desired state to a known one: the reference policy, no
	// overlays, a final config.
	_, err := e.rec.SetPolicy(ctx, ref)
	require.NoError(t, err)
	final := randomCfg(rand.New(rand.NewPCG(99, 99)))
	final.session("a") // at least one session using everything
	c := final.build(t)
	e.apply(c)
	for _, s := range hammerSessions {
		for _, server := range hammerServers {
			if _, err := e.rec.DeleteOverlay(ctx, s, server); err != nil {
				require.ErrorIs(t, err, reconcile.ErrNoOverlay)
			}
		}
	}

	// Every fs entry has caught up with the upstream's last change.
	wantFS := []string{"list", "read", "write"}
	if dyn.Load() {
		wantFS = []string{"dyn", "list", "read", "write"}
	}
	require.Eventually(t, func() bool {
		for _, s := range c.SessionNames() {
			if h := e.rec.Handle(s, "fs"); h != nil {
				var names []string
				for _, tool := range h.Entry().Snapshot().Tools {
					names = append(names, tool.Name)
				}
				slices.Sort(names)
				if !slices.Equal(names, wantFS) {
					return false
				}
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond)

	e.requireProjected(c, ref)
	e.requireRefsMatch()
	for _, s := range hammerSessions {
		if _, ok := c.Sessions[s]; !ok {
			assert.Empty(t, e.reg(s).Servers(), "session %q was removed", s)
		}
		for _, b := range e.rec.Bindings(s) {
			assert.False(t, b.Overlay)
			assert.Empty(t, b.Error)
			assert.Equal(t, b.Desired, b.Identity)
			assert.Equal(t, pool.StateReady.String(), b.EntryState)
		}
	}
}
