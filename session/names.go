package session

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"

	"github.com/wasmhost/wasmhost/internal/mcpname"
)

// Separator joins a server name and an upstream tool or prompt name into the
// prefixed name a session exposes.
const Separator = "__"

// MaxNameLen is the longest tool or prompt name a session exposes, in
// bytes: popular clients refuse a tool list with a longer name (see
// ShortName).
const MaxNameLen = 64

// nameHashLen is how many hex digits of SHA-256 a shortened name ends with.
const nameHashLen = 8

// ExposedName returns the prefixed name of server's tool or prompt name:
// ShortName(server + Separator + name).
func ExposedName(server, name string) string { return ShortName(server + Separator + name) }

// ShortName returns name when it is at most MaxNameLen bytes long, and
// otherwise its first 55 bytes (fewer, not to split a UTF-8 sequence), "_"
// and the first 8 hex digits of the SHA-256 of the whole name: stable, and
// a function of the name alone.
func ShortName(name string) string {
	if len(name) <= MaxNameLen {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	cut := MaxNameLen - 1 - nameHashLen
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut] + "_" + hex.EncodeToString(sum[:])[:nameHashLen]
}

// A NameMode says how a session exposes its servers' tool and prompt names.
type NameMode string

// The name modes (see Names in the package documentation).
const (
	// NamesAuto exposes the upstream's own name unless another item of
	// the session could use that name; then it is prefixed.
	NamesAuto NameMode = "auto"
	// NamesPrefixed exposes every name as server + Separator + name.
	NamesPrefixed NameMode = "prefixed"
	// NamesBare exposes the upstream's own names; a clash leaves out
	// every item that clashes.
	NamesBare NameMode = "bare"
)

// Modes lists the name modes, in the order the config documents them.
var Modes = []NameMode{NamesAuto, NamesPrefixed, NamesBare}

// Naming configures how an Endpoint names tools and prompts.
type Naming struct {
	// Mode applies to servers without a Prefix; "" means NamesPrefixed
	// (the config's default is NamesAuto).
	Mode NameMode
	// Prefix holds, by server, a fixed prefix that server's names always
	// get, whatever Mode says; "" exposes the upstream's own names, as
	// NamesBare does.
	Prefix map[string]string
}

// Equal reports whether n and o name everything alike.
func (n Naming) Equal(o Naming) bool {
	return n.mode() == o.mode() && maps.Equal(n.Prefix, o.Prefix)
}

func (n Naming) mode() NameMode {
	if n.Mode == "" {
		return NamesPrefixed
	}
	return n.Mode
}

// candidates returns the names server's item name may be exposed under,
// most preferred first.
func (n Naming) candidates(server, name string) []string {
	if p, ok := n.Prefix[server]; ok {
		return []string{ShortName(p + name)}
	}
	switch n.mode() {
	case NamesBare:
		return []string{ShortName(name)}
	case NamesAuto:
		own, prefixed := ShortName(name), ExposedName(server, name)
		if own == prefixed { // two cut names whose hashes agree: count it once
			return []string{own}
		}
		return []string{own, prefixed}
	default:
		return []string{ExposedName(server, name)}
	}
}

// CheckPrefix refuses a server prefix that would make names outside the
// MCP tool-name rule, or one too long to leave room for a name.
func CheckPrefix(p string) error {
	if r, bad := mcpname.BadRune(p); bad {
		return fmt.Errorf("prefix has %q, outside the MCP naming rule (A-Z, a-z, 0-9, '_', '-', '.')", r)
	}
	if len(p) > MaxNameLen/2 {
		return fmt.Errorf("prefix is %d bytes long, over %d", len(p), MaxNameLen/2)
	}
	return nil
}

// An itemKey is one item of a server: its upstream name.
type itemKey struct{ server, name string }

// A named is one upstream tool or prompt of a named kind.
type named struct {
	// exposed is the name it is registered under; "" while it is left out.
	exposed string
	// upstream is the upstream's own name for the item when the policy
	// renamed it (view.MetaUpstreamName); "" when the item's name is the
	// upstream's.
	upstream string
	// add registers the item with the MCP server under a name.
	add func(exposed string) error
}

// A nameIndex holds, for a kind of named items, each item's candidate
// names (Naming.candidates) and, by candidate name, the items that have it.
// An item's name depends only on how many items share each of its
// candidates, so a change needs to resolve only the items that share a
// candidate with what it added or removed (resolveNames), not every item
// of the session: a reload re-registering each of a session's servers in
// turn would otherwise cost the square of the session's items. The zero
// value is empty; SetNaming empties it.
type nameIndex struct {
	cands   map[itemKey][]string
	holders map[string][]itemKey
	// resolved counts the items resolveNames has looked at, for tests.
	resolved uint64
}

// drop forgets key's candidates, adding them to affected.
func (x *nameIndex) drop(key itemKey, affected map[string]bool) {
	for _, c := range x.cands[key] {
		affected[c] = true
		hs := slices.DeleteFunc(x.holders[c], func(h itemKey) bool { return h == key })
		if len(hs) == 0 {
			delete(x.holders, c)
		} else {
			x.holders[c] = hs
		}
	}
	delete(x.cands, key)
}

// add records key's candidates, adding them to affected.
func (x *nameIndex) add(key itemKey, cands []string, affected map[string]bool) {
	if x.cands == nil {
		x.cands = make(map[itemKey][]string)
		x.holders = make(map[string][]itemKey)
	}
	x.cands[key] = cands
	for _, c := range cands {
		affected[c] = true
		x.holders[c] = append(x.holders[c], key)
	}
}

// resolveNames gives the items of k (a kind of named items) the name the
// session's naming and the other items allow, and registers, renames or
// leaves out items accordingly. touched names the items added, replaced
// or removed since the last call (nil with all: every item, as after a
// naming change); redo names the items whose registration must be made
// again even if their name stays (they were replaced). The result depends
// only on the items and the naming, never on the order they came in: an
// item gets its first candidate name (Naming.candidates) that no other
// item of the session has among its candidates, and is left out, with a
// warning, when there is none. So a name one item holds is never given to
// another while the first is there, and an item renamed because another
// arrived loses its old name rather than seeing it go to the newcomer.
// Only the touched items and those sharing a candidate name with what a
// touched item had or has are looked at (nameIndex): no other item's name
// can change. e.putMu and e.mu are held; e.mu is let go between
// registrations (pause).
func (e *Endpoint) resolveNames(k *kind, touched []itemKey, all bool, redo map[itemKey]bool) {
	ix := &k.names
	if all {
		*ix = nameIndex{resolved: ix.resolved}
		touched = touched[:0]
		for s, items := range k.items {
			for n := range items {
				touched = append(touched, itemKey{s, n})
			}
		}
	}
	affected := make(map[string]bool)
	look := make(map[itemKey]bool, len(touched))
	for _, key := range touched {
		_, present := k.items[key.server][key.name]
		if _, indexed := ix.cands[key]; indexed && present {
			// Replaced: its candidates, a function of its key and the
			// naming, are the same, and so is every count.
			look[key] = true
			continue
		}
		ix.drop(key, affected)
		if present {
			ix.add(key, e.naming.candidates(key.server, key.name), affected)
		}
	}
	for c := range affected {
		for _, key := range ix.holders[c] {
			look[key] = true
		}
	}
	want := make(map[itemKey]string, len(look))
	for key := range look {
		for _, c := range ix.cands[key] {
			if len(ix.holders[c]) == 1 {
				want[key] = c
				break
			}
		}
	}
	ix.resolved += uint64(len(look))
	keys := slices.SortedFunc(maps.Keys(look), func(a, b itemKey) int {
		return cmp.Or(cmp.Compare(a.server, b.server), cmp.Compare(a.name, b.name))
	})
	// Names let go first, so that no name routes to two items at once.
	var gone []string
	lost := make(map[itemKey]bool)
	for _, key := range keys {
		it := k.items[key.server][key.name]
		if it.exposed != "" && it.exposed != want[key] {
			delete(k.routes, it.exposed)
			gone = append(gone, it.exposed)
			it.exposed = ""
			lost[key] = true
		}
	}
	if len(gone) > 0 {
		k.remove(gone...)
		e.changes += uint64(len(gone))
	}
	i := 0
	for _, key := range keys {
		it := k.items[key.server][key.name]
		x := want[key]
		if x == "" {
			if redo[key] || lost[key] {
				e.warnLeftOut("name collision: "+k.name+" left out: another item of the session could take each of its names", "server", key.server, k.name, key.name, "names", ix.cands[key])
			}
			continue
		}
		if x == it.exposed && !redo[key] {
			continue
		}
		e.pause(i)
		i++
		if err := it.add(x); err != nil {
			e.warnLeftOut("upstream "+k.name+" cannot be served, left out", "server", key.server, k.name, key.name, "err", err)
			if it.exposed != "" {
				delete(k.routes, it.exposed)
				k.remove(it.exposed)
				e.changes++
				it.exposed = ""
			}
			continue
		}
		it.exposed = x
		k.routes[x] = it.route(key)
		e.changes++
	}
}

// route returns where the item key (its server and the policy's name for
// it) leads: the upstream's own name for it.
func (it *named) route(key itemKey) route {
	if it.upstream != "" {
		return route{key.server, it.upstream}
	}
	return route(key)
}

// putNamed records server's items of k (name -> add) and resolves k's
// names; upstream holds the upstream's own name of each item the policy
// renamed (view.MetaUpstreamName), by the policy's name. e.putMu and e.mu
// are held.
func (e *Endpoint) putNamed(k *kind, server string, adds map[string]func(string) error, upstream map[string]string) {
	delete(k.gone, server) // it is up: its names are known again
	if k.items[server] == nil {
		k.items[server] = make(map[string]*named)
	}
	redo := make(map[itemKey]bool, len(adds))
	touched := make([]itemKey, 0, len(adds))
	for n, add := range adds {
		if it := k.items[server][n]; it != nil {
			it.add = add
			it.upstream = upstream[n]
		} else {
			k.items[server][n] = &named{add: add, upstream: upstream[n]}
		}
		redo[itemKey{server, n}] = true
		touched = append(touched, itemKey{server, n})
	}
	e.resolveNames(k, touched, false, redo)
}

// deleteNamed forgets server's items names of k, remembering their
// exposed names for the answer to a call of one while the server is down
// (unknownNames), and resolves k's names. e.putMu and e.mu are held.
func (e *Endpoint) deleteNamed(k *kind, server string, names []string) {
	var gone []string
	var touched []itemKey
	for _, n := range names {
		it := k.items[server][n]
		if it == nil {
			continue
		}
		delete(k.items[server], n)
		touched = append(touched, itemKey{server, n})
		if it.exposed != "" {
			delete(k.routes, it.exposed)
			gone = append(gone, it.exposed)
			if k.gone[server] == nil {
				k.gone[server] = make(map[string]bool)
			}
			k.gone[server][it.exposed] = true
		}
	}
	if len(k.items[server]) == 0 {
		delete(k.items, server)
	}
	if len(gone) > 0 {
		k.remove(gone...)
		e.changes += uint64(len(gone))
	}
	e.resolveNames(k, touched, false, nil)
}

// goneServer returns the server that last exposed name in k and has let it
// go, or "".
func (k *kind) goneServer(name string) string {
	for s, names := range k.gone {
		if names[name] {
			return s
		}
	}
	return ""
}

// SetNaming changes how the endpoint names tools and prompts; what changes
// name is registered again under its new name, and connected clients get
// a list_changed.
func (e *Endpoint) SetNaming(n Naming) {
	e.putMu.Lock()
	defer e.putMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if n.Equal(e.naming) {
		return
	}
	e.naming = Naming{Mode: n.mode(), Prefix: maps.Clone(n.Prefix)}
	e.resolveNames(&e.tools, nil, true, nil)
	e.resolveNames(&e.prompts, nil, true, nil)
}
