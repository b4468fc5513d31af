package reconcile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/config"
)

// A model is a config file under random edits: each step changes a few
// things, so that reloads mostly keep the sessions' structure and move
// override values (one at a time, or a session's batch at once, to values
// other sessions have too), and now and then change a server, a server
// list, which servers a session overrides, or which sessions there are.
type model struct {
	rng       *rand.Rand
	servers   map[string]string            // name -> JSON members
	lists     map[string][]string          // session -> server list (nil: none)
	overrides map[string]map[string]string // session -> server -> JSON object
}

var (
	modelServers  = []string{"s0", "s1", "s2", "s3"}
	modelSessions = []string{"a", "b", "c", "d", "e"}
)

func newModel(rng *rand.Rand) *model {
	m := &model{rng: rng, servers: map[string]string{}, lists: map[string][]string{}, overrides: map[string]map[string]string{}}
	for _, name := range modelServers {
		m.servers[name] = m.server(name)
	}
	for _, name := range modelSessions {
		m.session(name)
	}
	return m
}

func (m *model) pick(vs ...string) string { return vs[m.rng.IntN(len(vs))] }

// settings returns random settings members, from few values and forms.
func (m *model) settings() []string {
	var kv []string
	if v := m.pick("", `null`, `true`, `false`); v != "" {
		kv = append(kv, `"trust":`+v)
	}
	if v := m.pick("", `null`, `false`); v != "" {
		kv = append(kv, `"alwaysLoadTools":`+v)
	}
	if v := m.pick("", `null`, `[]`, `["a"]`, `["a(x)"]`, `["b","a"]`, `["a","b","a"]`); v != "" {
		kv = append(kv, `"includeTools":`+v)
	}
	if v := m.pick("", `[]`, `["c"]`); v != "" {
		kv = append(kv, `"excludeTools":`+v)
	}
	return kv
}

func (m *model) server(name string) string {
	kv := []string{fmt.Sprintf(`"command":"/bin/%s","args":["%s"]`, name, m.pick("x", "y"))}
	if m.rng.IntN(3) == 0 {
		kv = append(kv, m.settings()...)
	}
	if m.rng.IntN(8) == 0 {
		kv = append(kv, `"disabled":true`)
	}
	return join(kv)
}

func (m *model) override() string {
	kv := m.settings()
	if m.rng.IntN(8) == 0 {
		kv = append(kv, `"disabled":`+m.pick("true", "false"))
	}
	return "{" + join(kv) + "}"
}

// session gives session name a random server list and overrides.
func (m *model) session(name string) {
	m.lists[name] = nil
	if m.rng.IntN(4) == 0 {
		list := []string{}
		for _, s := range modelServers {
			if m.rng.IntN(2) == 0 {
				list = append(list, s)
			}
		}
		m.lists[name] = list
	}
	m.overrides[name] = map[string]string{}
	for _, s := range modelServers {
		if m.rng.IntN(4) > 0 {
			m.overrides[name][s] = m.override()
		}
	}
}

// step edits the model at random.
func (m *model) step() {
	name := modelSessions[m.rng.IntN(len(modelSessions))]
	server := modelServers[m.rng.IntN(len(modelServers))]
	switch n := m.rng.IntN(20); {
	case n < 8: // move one override
		if _, ok := m.overrides[name][server]; ok {
			m.overrides[name][server] = m.override()
		}
	case n < 14: // move a session's overrides to one value
		if o := m.overrides[name]; o != nil {
			v := m.override()
			for s := range o {
				o[s] = v
			}
		}
	case n < 16: // a server's own entry
		if _, ok := m.servers[server]; ok && m.rng.IntN(4) > 0 {
			m.servers[server] = m.server(server)
		} else if ok {
			delete(m.servers, server)
		} else {
			m.servers[server] = m.server(server)
		}
	case n < 17: // which servers a session overrides, or lists
		if o := m.overrides[name]; o != nil {
			if v, ok := o[server]; ok {
				delete(o, server)
				if other := modelServers[m.rng.IntN(len(modelServers))]; m.rng.IntN(2) == 0 {
					o[other] = v // as many overrides, of other servers
				}
			} else {
				o[server] = m.override()
			}
		}
	case n < 18:
		if _, ok := m.overrides[name]; ok {
			m.lists[name] = append([]string{}, modelServers[:m.rng.IntN(len(modelServers))]...)
		}
	default: // a session comes or goes
		if _, ok := m.overrides[name]; ok {
			delete(m.overrides, name)
			delete(m.lists, name)
		} else {
			m.session(name)
		}
	}
}

// config renders the model as a config, dropping what names a server
// the config does not have.
func (m *model) config(t *testing.T) *config.Config {
	t.Helper()
	var servers, sessions []string
	for _, name := range modelServers {
		if v, ok := m.servers[name]; ok {
			servers = append(servers, fmt.Sprintf(`%q:{%s}`, name, v))
		}
	}
	for _, name := range modelSessions {
		o, ok := m.overrides[name]
		if !ok {
			continue
		}
		fields := []string{fmt.Sprintf(`"token":"token-%s-0123456789"`, name)}
		if list := m.lists[name]; list != nil {
			var known []string
			for _, s := range list {
				if _, ok := m.servers[s]; ok {
					known = append(known, fmt.Sprintf("%q", s))
				}
			}
			fields = append(fields, `"servers":[`+join(known)+`]`)
		}
		var kv []string
		for _, s := range modelServers {
			if v, ok := o[s]; ok {
				if _, known := m.servers[s]; known {
					kv = append(kv, fmt.Sprintf(`%q:%s`, s, v))
				}
			}
		}
		fields = append(fields, `"overrides":{`+join(kv)+`}`)
		sessions = append(sessions, fmt.Sprintf(`%q:{%s}`, name, join(fields)))
	}
	file := `{"mcpServers":{` + join(servers) + `},"sessions":{` + join(sessions) + `}}`
	cfg, _, err := config.Parse("model.json", []byte(file), func(string) (string, bool) { return "", false }, nil)
	require.NoError(t, err, file)
	return cfg
}

// desiredOf returns every (session, server) want of r's inputs: settings
// bytes and identity, by session and server.
func desiredOf(r *Reconciler) map[string]map[string]*want {
	out := make(map[string]map[string]*want)
	for name := range r.inputs {
		out[name] = r.desired(name)
	}
	return out
}

// TestWantsFollowConfigs: over a random sequence of configs (most moving
// override values, some edited in place, some given again), with runtime
// overlays on a few servers, the wants Apply derives are exactly what
// config.Session.EffectiveSettings says (under the overlays), and what a
// reload reports as changed covers every desired want that changed: the
// whole session (rebuilt), a server, or a pair of old and new settings.
func TestWantsFollowConfigs(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	m := newModel(rng)
	r := &Reconciler{servers: map[string]*serverInput{}, inputs: map[string]*sessionInput{}, overlays: map[string]map[string]*want{}}
	off := &want{disabled: true, overlay: true}
	on := &want{identity: "overlay", settings: json.RawMessage(`{"trust":true}`), overlay: true}
	r.overlays["a"] = map[string]*want{"s1": off}
	r.overlays["b"] = map[string]*want{"s2": on}
	var cfg *config.Config
	var stats struct{ rebuilt, servers, pairs, batched int }
	for step := range 2000 {
		switch {
		case cfg != nil && rng.IntN(8) == 0:
			// The same config again, perhaps edited in place.
			if rng.IntN(2) == 0 {
				for _, name := range cfg.SessionNames() {
					for _, o := range cfg.Sessions[name].Overrides {
						if v := o.Settings.IncludeTools; len(v) > 2 && v[1] == '"' {
							v[2] = 'z' // ["a"...] -> ["z"...]
						}
					}
					break
				}
			}
		default:
			m.step()
			cfg = m.config(t)
		}
		before := desiredOf(r)
		deltas, _ := r.wants(cfg, nil)
		after := desiredOf(r)
		require.Len(t, after, len(cfg.Sessions), "step %d", step)
		for name, sess := range cfg.Sessions {
			for server, srv := range cfg.Servers {
				w, at := after[name][server], fmt.Sprintf("step %d: session %s, server %s", step, name, server)
				if o, ok := r.overlays[name][server]; ok {
					if o.disabled {
						require.Nil(t, w, at)
					} else {
						require.Same(t, o, w, at)
					}
					continue
				}
				settings, enabled := sess.EffectiveSettings(server)
				if !enabled {
					require.Nil(t, w, at)
					continue
				}
				require.NotNil(t, w, at)
				require.Equal(t, string(settings), string(w.settings), at)
				require.Equal(t, SpecOf(srv).Fingerprint(), w.identity, at)
			}

			d := deltas[name]
			if d.rebuilt {
				stats.rebuilt++
				continue
			}
			require.NotNil(t, before[name], "step %d: a session new to the reconciler is rebuilt", step)
			stats.servers += len(d.servers)
			for _, p := range d.pairs {
				stats.pairs++
				if p.n > 1 {
					stats.batched++
				}
			}
			for server := range union(before[name], after[name]) {
				old, new, at := before[name][server], after[name][server], fmt.Sprintf("step %d: session %s, server %s", step, name, server)
				if old != nil && new != nil && old.identity == new.identity && bytes.Equal(old.settings, new.settings) {
					continue
				}
				if slices.Contains(d.servers, server) {
					continue
				}
				require.True(t, old != nil && new != nil && old.identity == new.identity, "%s: %v -> %v not reported", at, old, new)
				require.True(t, slices.ContainsFunc(d.pairs, func(p pair) bool {
					return bytes.Equal(p.old, old.settings) && bytes.Equal(p.new, new.settings)
				}), "%s: %s -> %s not in the pairs %v", at, old.settings, new.settings, d.pairs)
			}
		}
	}
	t.Logf("%+v", stats)
	require.Positive(t, stats.pairs)
	require.Positive(t, stats.batched)
	require.Positive(t, stats.servers)
}

func join(s []string) string { return strings.Join(s, ",") }

func union(a, b map[string]*want) map[string]bool {
	out := make(map[string]bool)
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// TestInternShares: equal overrides share one private copy, which is not
// the caller's, and settings objects of equal contents share their bytes.
func TestInternShares(t *testing.T) {
	t.Parallel()
	b := newBuilder()
	yes := true
	o1 := config.Override{Settings: config.Settings{IncludeTools: json.RawMessage(`["a"]`), Trust: json.RawMessage(`null`)}, Disabled: &yes}
	o2 := config.Override{Settings: config.Settings{IncludeTools: json.RawMessage(`["a"]`), Trust: json.RawMessage(`null`)}, Disabled: &yes}
	c1, c2 := b.intern(o1), b.intern(o2)
	require.Same(t, c1, c2)
	require.NotSame(t, &o1.Settings.IncludeTools[0], &c1.Settings.IncludeTools[0], "a private copy")
	require.NotSame(t, o1.Disabled, c1.Disabled)
	for _, other := range []config.Override{
		{Settings: config.Settings{IncludeTools: json.RawMessage(`["a"]`), Trust: json.RawMessage(`null`)}},
		{Settings: config.Settings{IncludeTools: json.RawMessage(`["a"]`), AlwaysLoadTools: json.RawMessage(`null`)}, Disabled: &yes},
		{Settings: config.Settings{IncludeTools: json.RawMessage(`["a"]`), Trust: json.RawMessage(``)}, Disabled: &yes},
		{Settings: config.Settings{ExcludeTools: json.RawMessage(`["a"]`), Trust: json.RawMessage(`null`)}, Disabled: &yes},
	} {
		require.NotSame(t, c1, b.intern(other), "%+v", other)
	}

	base := b.intern(config.Override{})
	x := b.object(base, c1)
	y := b.object(b.intern(config.Override{Settings: config.Settings{IncludeTools: json.RawMessage(`["a"]`)}}), b.intern(config.Override{Settings: config.Settings{Trust: json.RawMessage(`null`)}}))
	require.Equal(t, `{"trust":null,"includeTools":["a"]}`, string(x))
	require.Same(t, &x[0], &y[0], "equal settings objects share their bytes")
	require.Len(t, b.fresh, 1)
}
