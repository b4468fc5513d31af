package reconcile

import (
	"bytes"
	"encoding/json"

	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
)

// An adopter settles, without running them, the refreshes of one
// reconciling call whose new settings the policy has already found
// equivalent to what their views hold. Such a refresh would re-key to the
// same key and stop there; adopting it instead costs a lookup or two, with
// no task, no sorting and no worker, and counts as refreshed (in the
// Summary and in opcount.Counters.Refreshes), as the task would have. It
// adopts in one of three ways:
//
//   - by the wants alone (Reconciler.planChanges, trusted): while the
//     health epoch has not moved since the last Apply began, every binding
//     is healthy, on the transport its desired want names, with a view
//     keyed as its desired settings are (or not keyed yet). A desired want
//     replaced by one with the same transport and settings of the same key
//     then needs nothing: the binding stays as it is, its view keeps bytes
//     of the same meaning, and the desired want holds the new bytes, for a
//     policy swap to hand over (Reconciler.SetPolicy). One lookup per
//     distinct pair of settings objects decides for every binding moving
//     between them, without a look at a handle or a view.
//   - by the binding (settle, trusted): a binding whose want is replaced
//     by one with the same identity and settings of the same key takes the
//     new want; its view is not touched either.
//   - by the view (try, otherwise): a held handle keeping its live
//     transport whose view, healthy and on the reconciler's policy, has
//     the key that keys remembers for the new bytes takes the bytes there
//     and then (view.View.AdoptSettings).
//
// Keys are looked up once per distinct settings object, by address: wants
// are never modified, and wants of equal settings share their bytes (see
// builder). r.mu is held while an adopter is used.
type adopter struct {
	r       *Reconciler
	o       *op
	keys    *keyMemo
	trusted bool
	known   map[bytesAt]string // settings -> key, for settings keys knows
	// pairs caches equivalent by the settings of the old want and of the
	// new one; last is the pair it answered last.
	pairs  map[[2]bytesAt]equivalence
	last   [2]bytesAt
	lastEq equivalence
	// pending are the adopted bindings of the session being planned, not
	// yet published (see flush); kept counts the refreshes adopted by
	// their wants alone (see Reconciler.planChanges), which keep their
	// bindings; quiet counts the adoptions, of either kind, that left
	// their views untouched.
	pending []adoption
	kept    int
	quiet   int
}

// An adoption is the binding an adopted refresh publishes.
type adoption struct {
	s      *session
	server string
	b      binding
}

func (r *Reconciler) newAdopter(o *op, keys *keyMemo, trusted bool) *adopter {
	return &adopter{
		r: r, o: o, keys: keys, trusted: trusted,
		known: make(map[bytesAt]string),
		pairs: make(map[[2]bytesAt]equivalence),
	}
}

// key returns what keys remembers as the key of settings, which belong to
// a want.
func (a *adopter) key(settings json.RawMessage) (string, bool) {
	if len(settings) == 0 {
		return a.keys.lookup(settings)
	}
	at := addr(settings)
	if key, ok := a.known[at]; ok {
		return key, true
	}
	key, ok := a.keys.lookup(settings)
	if ok {
		a.known[at] = key
	}
	return key, ok
}

// A bytesAt is where a non-empty byte slice lives: two slices of wants
// (never modified) at the same place hold the same bytes.
type bytesAt struct {
	p *byte
	n int
}

// addr returns where s, which is not empty, lives.
func addr(s json.RawMessage) bytesAt { return bytesAt{&s[0], len(s)} }

// settle handles, if it can, the binding cur of server in s when w is
// desired, and reports whether it did: nothing to do (settled, or trusted
// and the same bytes), or adopted. Otherwise the caller makes a task.
func (a *adopter) settle(s *session, server string, cur *binding, w *want) bool {
	if cur == nil || cur.handle == nil || cur.want == nil || w == nil {
		return false
	}
	if a.trusted && cur.switchErr == nil {
		switch a.equivalent(cur.want, w) {
		case sameBytes:
			return true
		case sameKey:
			a.pending = append(a.pending, adoption{s: s, server: server, b: binding{handle: cur.handle, want: w}})
			a.quiet++
			return true
		}
	}
	return settled(cur, w) || a.try(task{s: s, server: server, cur: cur, want: w})
}

// An equivalence is how a want compares with another.
type equivalence int8

const (
	differ    equivalence = iota // another identity, or keys not known equal
	sameKey                      // same identity; settings of the same key
	sameBytes                    // same identity and settings bytes
)

// equivalent tells how w compares with old: a binding settled on old with
// a healthy view already is what w asks for unless they differ.
func (a *adopter) equivalent(old, w *want) equivalence {
	if old.identity != w.identity {
		return differ
	}
	return a.equivalentSettings(old.settings, w.settings)
}

// equivalentSettings is equivalent for two wants with the same transport
// identity and settings old and new.
func (a *adopter) equivalentSettings(old, new json.RawMessage) equivalence {
	if len(old) == 0 || len(new) == 0 {
		if bytes.Equal(old, new) {
			return sameBytes
		}
		return differ
	}
	k := [2]bytesAt{addr(old), addr(new)}
	if k == a.last {
		return a.lastEq
	}
	eq, ok := a.pairs[k]
	if !ok {
		eq = differ
		if bytes.Equal(old, new) {
			eq = sameBytes
		} else if ko, ok := a.key(old); ok {
			if kn, ok := a.key(new); ok && ko == kn {
				eq = sameKey
			}
		}
		a.pairs[k] = eq
	}
	a.last, a.lastEq = k, eq
	return eq
}

// try adopts t through its view (view.View.AdoptSettings) if it is such a
// refresh and reports whether it did.
func (a *adopter) try(t task) bool {
	h := inPlace(t)
	if h == nil {
		return false
	}
	key, ok := a.key(t.want.settings)
	return ok && a.into(t, h, key)
}

// into adopts t, a refresh of h (see inPlace) to settings of key key,
// through h's view, and reports whether the view took them.
func (a *adopter) into(t task, h *pool.Handle, key string) bool {
	if !view.Of(h).AdoptSettings(t.want.settings, a.keys, key) {
		return false
	}
	a.pending = append(a.pending, adoption{s: t.s, server: t.server, b: binding{handle: h, want: t.want}})
	return true
}

// inPlace returns the held handle that t refreshes keeping its live
// transport, or nil when t is no such refresh.
func inPlace(t task) *pool.Handle {
	if t.want == nil || t.force || t.cur == nil || t.cur.handle == nil {
		return nil
	}
	h := t.cur.handle
	if h.Identity() != t.want.identity || h.Released() || h.Entry().State().Terminal() {
		return nil
	}
	return h
}

// keep counts n refreshes adopted by their wants alone.
func (a *adopter) keep(n int) {
	a.kept += n
	a.quiet += n
}

// flush publishes the pending bindings and counts every adoption.
func (a *adopter) flush() {
	a.r.publish(a.pending)
	if n := len(a.pending) + a.kept; n > 0 {
		a.o.add(&a.o.sum.Refreshed, n)
	}
	if a.quiet > 0 {
		// What view.View.AdoptSettings counts for each view it adopts
		// into.
		a.r.counters.Refreshes.Add(int64(a.quiet))
	}
	clear(a.pending)
	a.pending, a.kept, a.quiet = a.pending[:0], 0, 0
}

// adopt settles, with ad, the tasks that are refreshes to equivalent
// settings (planning adopts most of them already; these are the ones whose
// keys warmKeys has just learnt) and publishes them. It returns the tasks
// still to run and, for the other refreshes whose keys are known and differ
// from their views' keys, the projections they are about to ask their
// entries' memos for (see prefill). r.mu is held.
func (r *Reconciler) adopt(ad *adopter, tasks []task) ([]task, []view.PrefillItem) {
	rest := tasks[:0]
	var items []view.PrefillItem
	for _, t := range tasks {
		if h := inPlace(t); h != nil {
			if key, ok := ad.key(t.want.settings); ok {
				if ad.into(t, h, key) {
					continue
				}
				if key != view.Of(h).Key() {
					items = append(items, prefillItem(h, key, t.want.settings))
				}
			}
		}
		rest = append(rest, t)
	}
	ad.flush()
	return rest, items
}

// publish makes each adoption's binding its session's. Each keeps the
// handle of the binding it replaces, so setBinding's held counts stay as
// they are: one lock publishes them all, and one allocation holds them.
// r.mu is held.
func (r *Reconciler) publish(as []adoption) {
	if len(as) == 0 {
		return
	}
	bs := make([]binding, len(as))
	r.smu.Lock()
	for i := range as {
		bs[i] = as[i].b
		as[i].s.bindings[as[i].server] = &bs[i]
	}
	r.smu.Unlock()
}
