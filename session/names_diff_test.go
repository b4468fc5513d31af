package session_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/session"
	"github.com/wasmhost/wasmhost/view"
)

// A diffItem is one tool or prompt of the model TestNamesDifferential keeps.
type diffItem struct {
	upstream string // the upstream's own name when renamed, else ""
	fail     bool   // a tool whose registration fails (its input schema is no object)
}

// diffNames are the item names the test draws from: few, so that names
// clash often, some shaped like another server's prefixed names, some
// long enough to be cut (ShortName), one the cut prefixed name of another.
var diffNames = func() []string {
	long61 := strings.Repeat("l", 61)
	long70 := strings.Repeat("m", 70)
	return []string{"x", "y", "a__x", "b__x", "x__y", "p_x", long61, "a__" + long61, long70,
		session.ExposedName("a", long70), session.ShortName(long70)}
}()

var diffServers = []string{"a", "b", "c"}

var diffNamings = []session.Naming{
	{Mode: session.NamesAuto},
	{Mode: session.NamesPrefixed},
	{Mode: session.NamesBare},
	{},
	{Mode: session.NamesAuto, Prefix: map[string]string{"a": "a__"}},
	{Mode: session.NamesAuto, Prefix: map[string]string{"c": "p_"}},
	{Mode: session.NamesPrefixed, Prefix: map[string]string{"b": ""}},
	{Mode: session.NamesBare, Prefix: map[string]string{"a": "b__", "b": "a__"}},
}

// refCandidates is the documented list of names an item may be exposed
// under, most preferred first (see Names in the package documentation).
func refCandidates(n session.Naming, server, name string) []string {
	if p, ok := n.Prefix[server]; ok {
		return []string{session.ShortName(p + name)}
	}
	switch n.Mode {
	case session.NamesBare:
		return []string{session.ShortName(name)}
	case session.NamesAuto:
		own, prefixed := session.ShortName(name), session.ExposedName(server, name)
		if own == prefixed {
			return []string{own}
		}
		return []string{own, prefixed}
	default:
		return []string{session.ExposedName(server, name)}
	}
}

// refResolve resolves every item from scratch by the documented rule: an
// item gets its first candidate no other item has among its candidates
// (and none if its registration fails). It returns the exposed name by
// "server:name" and where each exposed name routes.
func refResolve(n session.Naming, items map[string]map[string]diffItem) (exposed, routes map[string]string) {
	holders := make(map[string]int)
	for s, its := range items {
		for name := range its {
			for _, c := range refCandidates(n, s, name) {
				holders[c]++
			}
		}
	}
	exposed, routes = make(map[string]string), make(map[string]string)
	for s, its := range items {
		for name, it := range its {
			x := ""
			for _, c := range refCandidates(n, s, name) {
				if holders[c] == 1 {
					x = c
					break
				}
			}
			if it.fail {
				x = ""
			}
			exposed[s+":"+name] = x
			if x != "" {
				up := name
				if it.upstream != "" {
					up = it.upstream
				}
				routes[x] = s + ":" + up
			}
		}
	}
	return exposed, routes
}

func diffTool(name string, it diffItem) *mcp.Tool {
	t := &mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}}
	if it.fail {
		t.InputSchema = map[string]any{"type": "string"}
	}
	if it.upstream != "" {
		t.Meta = mcp.Meta{view.MetaUpstreamName: it.upstream}
	}
	return t
}

func diffPrompt(name string, it diffItem) *mcp.Prompt {
	p := &mcp.Prompt{Name: name}
	if it.upstream != "" {
		p.Meta = mcp.Meta{view.MetaUpstreamName: it.upstream}
	}
	return p
}

// diffModel is what TestNamesDifferential has put: tools and prompts by
// server and name.
type diffModel struct {
	naming         session.Naming
	tools, prompts map[string]map[string]diffItem
}

func (m *diffModel) put(items map[string]map[string]diffItem, server string, put map[string]diffItem) {
	if len(put) == 0 {
		return
	}
	if items[server] == nil {
		items[server] = make(map[string]diffItem)
	}
	maps.Copy(items[server], put)
}

func (m *diffModel) del(items map[string]map[string]diffItem, server string, names []string) {
	for _, n := range names {
		delete(items[server], n)
	}
	if len(items[server]) == 0 {
		delete(items, server)
	}
}

// build returns a fresh endpoint with m's items, put one at a time in an
// order rng chooses; with viaSetNaming, it starts under another naming
// and is given m's by SetNaming (the resolution of every item).
func (m *diffModel) build(rng *rand.Rand, viaSetNaming bool) *session.Endpoint {
	start := m.naming
	if viaSetNaming {
		for start.Equal(m.naming) {
			start = diffNamings[rng.IntN(len(diffNamings))]
		}
	}
	ep := namedEndpoint(nil, start)
	type one struct {
		tool         bool
		server, name string
		it           diffItem
	}
	var all []one
	for s, its := range m.tools {
		for n, it := range its {
			all = append(all, one{true, s, n, it})
		}
	}
	for s, its := range m.prompts {
		for n, it := range its {
			all = append(all, one{false, s, n, it})
		}
	}
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for _, o := range all {
		if o.tool {
			ep.PutTools(o.server, []*mcp.Tool{diffTool(o.name, o.it)})
		} else {
			ep.PutPrompts(o.server, []*mcp.Prompt{diffPrompt(o.name, o.it)})
		}
	}
	ep.SetNaming(m.naming)
	return ep
}

// randomItems draws a few item names of diffNames, each maybe renamed and,
// for tools, maybe failing to register.
func randomItems(rng *rand.Rand, tools bool) map[string]diffItem {
	out := make(map[string]diffItem)
	for range 1 + rng.IntN(4) {
		var it diffItem
		if rng.IntN(3) == 0 {
			it.upstream = fmt.Sprintf("up%d", rng.IntN(3))
		}
		it.fail = tools && rng.IntN(5) == 0
		out[diffNames[rng.IntN(len(diffNames))]] = it
	}
	return out
}

func randomNames(rng *rand.Rand) []string {
	var out []string
	for range 1 + rng.IntN(3) {
		out = append(out, diffNames[rng.IntN(len(diffNames))])
	}
	return out
}

// checkNames compares what ep exposes (its own state, and what a client
// lists) with the from-scratch resolution of m, and with fresh endpoints
// given m's items in another order.
func checkNames(t *testing.T, rng *rand.Rand, ep *session.Endpoint, cs *mcp.ClientSession, m *diffModel, step string) {
	t.Helper()
	for _, kind := range []string{"tool", "prompt"} {
		items := m.tools
		if kind == "prompt" {
			items = m.prompts
		}
		wantExposed, wantRoutes := refResolve(m.naming, items)
		gotExposed, gotRoutes := ep.NamedItems(kind)
		require.Equal(t, wantExposed, gotExposed, "%s: %ss' exposed names", step, kind)
		require.Equal(t, wantRoutes, gotRoutes, "%s: %s routes", step, kind)
		// Every exposed name is one item's: the routes and the items agree.
		seen := make(map[string]string)
		for key, x := range gotExposed {
			if x == "" {
				continue
			}
			require.NotContains(t, seen, x, "%s: %s name %q held by %s and %s", step, kind, x, seen[x], key)
			seen[x] = key
			require.Contains(t, gotRoutes, x, "%s: %s %s exposed as %q has no route", step, kind, key, x)
			require.True(t, strings.HasPrefix(gotRoutes[x], strings.SplitN(key, ":", 2)[0]+":"), "%s: %q routes to %s, not %s's server", step, x, gotRoutes[x], key)
		}
		require.Len(t, gotRoutes, len(seen), "%s: %s routes without an item", step, kind)

		var listed []string
		if kind == "tool" {
			for tool, err := range cs.Tools(t.Context(), nil) {
				require.NoError(t, err)
				listed = append(listed, tool.Name)
			}
		} else {
			for p, err := range cs.Prompts(t.Context(), nil) {
				require.NoError(t, err)
				listed = append(listed, p.Name)
			}
		}
		slices.Sort(listed)
		require.Equal(t, slices.Sorted(maps.Keys(wantRoutes)), listed, "%s: %ss a client lists", step, kind)
		if kind == "tool" {
			require.Equal(t, listed, ep.Tools(), step)
		} else {
			require.Equal(t, listed, ep.Prompts(), step)
		}

	}
	// A fresh endpoint, its items put in another order (and, half the
	// time, named by a SetNaming that resolves them all), agrees.
	via := rng.IntN(2) == 0
	fresh := m.build(rng, via)
	for _, kind := range []string{"tool", "prompt"} {
		gotExposed, gotRoutes := ep.NamedItems(kind)
		fe, fr := fresh.NamedItems(kind)
		require.Equal(t, gotExposed, fe, "%s: %ss of a fresh endpoint (via SetNaming: %v)", step, kind, via)
		require.Equal(t, gotRoutes, fr, "%s: %s routes of a fresh endpoint (via SetNaming: %v)", step, kind, via)
	}
}

// TestNamesDifferential: random sequences of puts and deletes of tools and
// prompts over a few servers, with names that clash often, renames,
// registrations that fail and naming changes, leave the endpoint exposing
// after every step what resolving its items from scratch exposes: the
// documented rule, and a fresh endpoint given the same items in another
// order. WASMHOST_NAMES_SEED reruns one seed.
func TestNamesDifferential(t *testing.T) {
	t.Parallel()
	seeds := []uint64{uint64(time.Now().UnixNano())}
	for i := range 5 {
		seeds = append(seeds, uint64(i+1))
	}
	if s := testingSeed(t); s != 0 {
		seeds = []uint64{s}
	}
	steps := 50
	if testing.Short() {
		steps = 20
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d (rerun with WASMHOST_NAMES_SEED=%d)", seed, seed)
			rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
			m := &diffModel{naming: diffNamings[rng.IntN(len(diffNamings))],
				tools: map[string]map[string]diffItem{}, prompts: map[string]map[string]diffItem{}}
			ep := namedEndpoint(nil, m.naming)
			cs := connectClient(t, ep)
			for i := range steps {
				s := diffServers[rng.IntN(len(diffServers))]
				var step string
				switch op := rng.IntN(10); op {
				case 0, 1, 2:
					put := randomItems(rng, true)
					tools := make([]*mcp.Tool, 0, len(put))
					for n, it := range put {
						tools = append(tools, diffTool(n, it))
					}
					step = fmt.Sprintf("PutTools(%s, %v)", s, put)
					ep.PutTools(s, tools)
					m.put(m.tools, s, put)
				case 3:
					put := randomItems(rng, false)
					prompts := make([]*mcp.Prompt, 0, len(put))
					for n, it := range put {
						prompts = append(prompts, diffPrompt(n, it))
					}
					step = fmt.Sprintf("PutPrompts(%s, %v)", s, put)
					ep.PutPrompts(s, prompts)
					m.put(m.prompts, s, put)
				case 4, 5:
					names := randomNames(rng)
					step = fmt.Sprintf("DeleteTools(%s, %q)", s, names)
					ep.DeleteTools(s, names)
					m.del(m.tools, s, names)
				case 6:
					names := randomNames(rng)
					step = fmt.Sprintf("DeletePrompts(%s, %q)", s, names)
					ep.DeletePrompts(s, names)
					m.del(m.prompts, s, names)
				case 7: // the server goes
					tn, pn := slices.Collect(maps.Keys(m.tools[s])), slices.Collect(maps.Keys(m.prompts[s]))
					step = fmt.Sprintf("server %s removed", s)
					ep.DeleteTools(s, tn)
					ep.DeletePrompts(s, pn)
					m.del(m.tools, s, tn)
					m.del(m.prompts, s, pn)
				case 8: // delete one and put it back
					n := diffNames[rng.IntN(len(diffNames))]
					it := diffItem{fail: rng.IntN(3) == 0}
					step = fmt.Sprintf("DeleteTools+PutTools(%s, %q, %+v)", s, n, it)
					ep.DeleteTools(s, []string{n})
					m.del(m.tools, s, []string{n})
					ep.PutTools(s, []*mcp.Tool{diffTool(n, it)})
					m.put(m.tools, s, map[string]diffItem{n: it})
				case 9:
					m.naming = diffNamings[rng.IntN(len(diffNamings))]
					step = fmt.Sprintf("SetNaming(%+v)", m.naming)
					ep.SetNaming(m.naming)
				}
				checkNames(t, rng, ep, cs, m, fmt.Sprintf("seed %d step %d %s", seed, i, step))
			}
		})
	}
}

// testingSeed returns the seed WASMHOST_NAMES_SEED names, or 0.
func testingSeed(t *testing.T) uint64 {
	v := os.Getenv("WASMHOST_NAMES_SEED")
	if v == "" {
		return 0
	}
	s, err := strconv.ParseUint(v, 10, 64)
	require.NoError(t, err, "WASMHOST_NAMES_SEED")
	return s
}

// TestNamesReplacedItem: an item put again under the same name keeps its
// candidates (they depend on its server, its name and the naming, not on
// the upstream's name the policy renamed it from), but its route follows
// the new upstream name; one whose registration failed is served once a
// put replaces it with one that registers, and one put again failing
// leaves its name to nobody.
func TestNamesReplacedItem(t *testing.T) {
	t.Parallel()
	ep := namedEndpoint(nil, session.Naming{Mode: session.NamesAuto})
	ep.PutTools("b", tools("find"))
	ep.PutTools("a", []*mcp.Tool{diffTool("find", diffItem{upstream: "search_files"})})
	_, routes := ep.NamedItems("tool")
	require.Equal(t, map[string]string{"a__find": "a:search_files", "b__find": "b:find"}, routes)

	ep.PutTools("a", []*mcp.Tool{diffTool("find", diffItem{upstream: "lookup"})})
	_, routes = ep.NamedItems("tool")
	require.Equal(t, map[string]string{"a__find": "a:lookup", "b__find": "b:find"}, routes, "the rename changed")

	ep.PutTools("a", []*mcp.Tool{diffTool("find", diffItem{fail: true})})
	exposed, routes := ep.NamedItems("tool")
	require.Equal(t, map[string]string{"b__find": "b:find"}, routes, "a's find fails to register")
	require.Equal(t, map[string]string{"a:find": "", "b:find": "b__find"}, exposed, "b's find does not take the shared name")

	ep.PutTools("a", []*mcp.Tool{diffTool("find", diffItem{})})
	_, routes = ep.NamedItems("tool")
	require.Equal(t, map[string]string{"a__find": "a:find", "b__find": "b:find"}, routes, "a's find registers again")

	ep.DeleteTools("a", []string{"find"})
	_, routes = ep.NamedItems("tool")
	require.Equal(t, map[string]string{"find": "b:find"}, routes, "a's find gone")
	ep.PutTools("a", []*mcp.Tool{diffTool("find", diffItem{})})
	_, routes = ep.NamedItems("tool")
	require.Equal(t, map[string]string{"a__find": "a:find", "b__find": "b:find"}, routes, "a's find back")
}
