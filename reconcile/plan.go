package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
)

// A task converges one binding from cur to want (nil: not wanted). force
// reacquires even when the identity matches.
type task struct {
	s      *session
	server string
	cur    *binding
	want   *want
	force  bool
}

// desired returns session's desired bindings: the file's, with the
// overlays layered over them (a disabled overlay removes the server).
// r.mu is held.
func (r *Reconciler) desired(sessionName string) map[string]*want {
	si, overlays := r.inputs[sessionName], r.overlays[sessionName]
	out := make(map[string]*want)
	if si != nil {
		for server, c := range si.cells {
			if w := c.want(); w != nil {
				out[server] = w
			}
		}
	}
	for server, w := range overlays {
		if w.disabled {
			delete(out, server)
		} else {
			out[server] = w
		}
	}
	return out
}

// wantOf returns session's desired binding of server, as desired would
// have it, or nil. r.mu is held.
func (r *Reconciler) wantOf(sessionName, server string) *want {
	return layered(r.inputs[sessionName], r.overlays[sessionName], server)
}

// layered returns the desired binding of server for a session whose input
// (nil: none) and overlays are si and overlays: the overlay's, if any (nil
// if it disables the server), else the file's.
func layered(si *sessionInput, overlays map[string]*want, server string) *want {
	if w, ok := overlays[server]; ok {
		if w.disabled {
			return nil
		}
		return w
	}
	if si == nil {
		return nil
	}
	return si.want(server)
}

// sessionFor returns the session named name, creating it (and asking for
// its registry) if needed. r.mu is held.
func (r *Reconciler) sessionFor(name string) (*session, error) {
	if s := r.sessions[name]; s != nil {
		return s, nil
	}
	reg := r.registry(name)
	if reg == nil {
		return nil, errors.New("no registry for the session")
	}
	s := &session{name: name, reg: &trackedRegistry{inner: reg}, bindings: make(map[string]*binding)}
	r.smu.Lock()
	r.sessions[name] = s
	r.smu.Unlock()
	return s, nil
}

// planRelease lists the tasks releasing every binding of s. r.mu is held.
func (r *Reconciler) planRelease(s *session) []task {
	tasks := make([]task, 0, len(s.bindings))
	for server, cur := range s.bindings {
		tasks = append(tasks, task{s: s, server: server, cur: cur})
	}
	return tasks
}

// plan appends to tasks those bringing s to what session name desires
// (see wantOf), read in place rather than copied. A binding already
// settled on its desired want needs no task, so a session that did not
// change costs a lookup and a health check per binding (a lookup alone
// while ad trusts the bindings); nor does a refresh that ad adopts, which
// plan publishes. r.mu is held.
func (r *Reconciler) plan(tasks []task, s *session, name string, ad *adopter) []task {
	defer ad.flush()
	si, overlays := r.inputs[name], r.overlays[name]
	if si != nil {
		for server := range si.cells {
			tasks = r.consider(tasks, s, server, si, overlays, ad)
		}
	}
	for server := range overlays {
		if si == nil || si.cells[server] == nil {
			tasks = r.consider(tasks, s, server, si, overlays, ad)
		}
	}
	for server := range s.bindings {
		_, overlaid := overlays[server]
		if !overlaid && (si == nil || si.cells[server] == nil) {
			tasks = r.consider(tasks, s, server, si, overlays, ad)
		}
	}
	return tasks
}

// consider appends to tasks the one bringing s's binding of server to what
// si and overlays desire, unless it is settled or ad adopts it. r.mu is
// held.
func (r *Reconciler) consider(tasks []task, s *session, server string, si *sessionInput, overlays map[string]*want, ad *adopter) []task {
	cur, w := s.bindings[server], layered(si, overlays, server)
	if (cur != nil || w != nil) && !ad.settle(s, server, cur, w) {
		tasks = append(tasks, task{s: s, server: server, cur: cur, want: w})
	}
	return tasks
}

// planChanges is plan for a session whose bindings ad trusts and whose
// desired wants changed only as d says. Wants whose settings moved to
// settings of the same key, the transport staying the same, are settled
// per distinct pair of settings objects (adopter.equivalentSettings), with
// no look at their bindings: each binding was settled on the old want (or
// on one of the same key) and so is on the new one (see adopter). If a
// pair changes keys, the session is planned in full; the servers of d are
// considered one by one. r.mu is held.
func (r *Reconciler) planChanges(tasks []task, s *session, name string, d delta, ad *adopter) []task {
	kept := 0
	for _, p := range d.pairs {
		switch ad.equivalentSettings(p.old, p.new) {
		case sameBytes:
		case sameKey:
			kept += p.n
		default:
			return r.plan(tasks, s, name, ad)
		}
	}
	defer ad.flush()
	ad.keep(kept)
	si, overlays := r.inputs[name], r.overlays[name]
	for _, server := range d.servers {
		tasks = r.consider(tasks, s, server, si, overlays, ad)
	}
	return tasks
}

// wants brings r.servers and r.inputs in line with cfg and returns, for
// each session of cfg, what changed in its desired bindings. Work follows
// what changed since the last Apply: each server's input is computed once;
// each session's overrides are compared with its private copy, which is
// updated in place where only override values changed (the delta tells
// the changed wants by the pairs of settings objects they move between,
// and the wants themselves are made when first needed); a session with
// another server list or other overridden servers is rebuilt in full; a
// server whose input changed (or that appeared or vanished) gets new wants
// in every session. A session override changes settings and Disabled
// only, never the transport, so a want is a function of the server's input
// and the session's override: the sessions built in one reload share the
// want of each distinct pair, and equal settings objects share their bytes
// (see builder). fresh lists the distinct settings objects this reload
// made, which the policy may not know; made, when not nil, is told of
// each as it is made. The runtime overlays of the sessions and servers cfg
// no longer has are dropped. r.mu is held.
func (r *Reconciler) wants(cfg *config.Config, made func(json.RawMessage)) (deltas map[string]delta, fresh []json.RawMessage) {
	b := newBuilder()
	b.made = made
	for name, srv := range cfg.Servers {
		in, same := b.server(r.servers[name], srv)
		b.servers[name] = in
		if !same {
			b.changed = append(b.changed, name)
		}
	}
	for name := range r.servers {
		if _, ok := b.servers[name]; !ok {
			b.changed = append(b.changed, name)
			// A server the config removes goes from every session, its
			// runtime overlays with it, as a removed session's do: an
			// overlay must not keep serving what the file took away.
			for session, ov := range r.overlays {
				delete(ov, name)
				if len(ov) == 0 {
					delete(r.overlays, session)
				}
			}
		}
	}
	for _, name := range b.changed {
		b.moved[name] = true
	}
	deltas = make(map[string]delta, len(cfg.Sessions))
	inputs := make(map[string]*sessionInput, len(cfg.Sessions))
	for name, sess := range cfg.Sessions {
		if sess == nil {
			continue
		}
		inputs[name], deltas[name] = b.session(r.inputs[name], sess, r.overlays[name])
	}
	r.servers, r.inputs = b.servers, inputs
	for name := range r.overlays {
		if inputs[name] == nil {
			delete(r.overlays, name) // a removed session's go with it
		}
	}
	return deltas, b.fresh
}

// warmKeys canonicalizes with keys, in one policy call, the distinct
// settings of the tasks that keep or gain a binding and that keys has not
// seen, so that the views' own key computations are answered from memory.
// Settings with the contents of those in warmed were canonicalized already
// in this call: those keys lacks were refused, and are left to the views,
// whose errors are then the policy's own. r.mu is held.
func (r *Reconciler) warmKeys(ctx context.Context, keys *keyMemo, tasks []task, warmed []json.RawMessage) {
	var settings []json.RawMessage
	for _, t := range tasks {
		if t.want != nil {
			settings = append(settings, t.want.settings)
		}
	}
	settings = distinct(settings)
	if len(settings) == 0 {
		return
	}
	done := make(map[string]bool, len(warmed))
	for _, s := range warmed {
		done[string(s)] = true
	}
	keys.warm(ctx, slices.DeleteFunc(settings, func(s json.RawMessage) bool { return done[string(s)] }))
}

// distinct returns settings without repeated settings objects, told apart
// by address: wants share the bytes of equal settings (see builder), and
// keyMemo.warm drops the remaining repeats by contents.
func distinct(settings []json.RawMessage) []json.RawMessage {
	seen := make(map[bytesAt]bool)
	out := settings[:0:0]
	for _, s := range settings {
		if len(s) == 0 {
			out = append(out, s)
			continue
		}
		if at := addr(s); !seen[at] {
			seen[at] = true
			out = append(out, s)
		}
	}
	return out
}

// prefillItem is the projection h's view is about to ask its entry's memo
// for when it re-keys to key with settings.
func prefillItem(h *pool.Handle, key string, settings json.RawMessage) view.PrefillItem {
	e := h.Entry()
	return view.PrefillItem{Memo: view.MemoOf(e), Key: key, Settings: settings, Snap: e.Snapshot()}
}

// prefill computes items in batched policy calls (view.Prefill), when the
// policy of keys can batch, and leaves them in their memos for the views
// about to re-project under keys; anything left out projects as usual.
// r.mu is held.
func (r *Reconciler) prefill(ctx context.Context, keys *keyMemo, items []view.PrefillItem) {
	bp, ok := keys.Policy.(abi.BatchProjector)
	if !ok {
		return
	}
	if err := view.Prefill(ctx, keys, bp, r.counters, items); err != nil {
		r.log.Debug("batched projection failed; views project one by one", "err", err)
	}
}
