package reconcile

import (
	"fmt"
	"maps"
	"slices"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
)

// Handle returns the handle session holds for server, or nil if none (not
// wanted, or the last acquire failed). The handle may be released by a
// later reconciling call; fetch it for each use.
func (r *Reconciler) Handle(sessionName, server string) *pool.Handle {
	if b := r.bindingOf(sessionName, server); b != nil {
		return b.handle
	}
	return nil
}

// bindingOf returns session's binding of server, or nil.
func (r *Reconciler) bindingOf(sessionName, server string) *binding {
	r.smu.RLock()
	defer r.smu.RUnlock()
	if s := r.sessions[sessionName]; s != nil {
		return s.bindings[server]
	}
	return nil
}

// Unavailable says why session's binding of server shows the session nothing, in
// words for the session's clients (no error text, which is the operator's:
// the log and State have it): "" when the session has no binding of
// server, or a healthy one.
func (r *Reconciler) Unavailable(sessionName, server string) string {
	b := r.bindingOf(sessionName, server)
	switch {
	case b == nil:
		return ""
	case b.handle == nil && b.err == errReacquiring:
		return "reconnecting; try again"
	case b.handle == nil:
		return "unavailable: it could not be reached (retried in the background)"
	}
	switch st := b.handle.Entry().Info().State; st {
	case pool.StateFailed, pool.StateClosed:
		return "unavailable: its connection failed"
	case pool.StateConnecting, pool.StateRestarting:
		return "reconnecting; try again"
	case pool.StateReady:
	default:
		panic(fmt.Sprintf("reconcile: unknown entry state %d", st))
	}
	if view.Of(b.handle).Err() != nil {
		return "unavailable to this session: the policy could not compute its view"
	}
	return ""
}

// Policy returns the current policy.
func (r *Reconciler) Policy() abi.Policy {
	r.smu.RLock()
	defer r.smu.RUnlock()
	return r.policy
}

// viewPolicy returns the current policy as views use it: with its
// canonicalize results remembered (see keyMemo).
func (r *Reconciler) viewPolicy() *keyMemo {
	r.smu.RLock()
	defer r.smu.RUnlock()
	return r.keys
}

// Sessions returns the names of the sessions of the last applied config,
// sorted.
func (r *Reconciler) Sessions() []string {
	r.smu.RLock()
	defer r.smu.RUnlock()
	return slices.Sorted(maps.Keys(r.sessions))
}

// Bindings describes session's bindings, sorted by server; nil for an
// unknown session.
func (r *Reconciler) Bindings(sessionName string) []BindingState {
	r.smu.RLock()
	s := r.sessions[sessionName]
	var bs map[string]*binding
	if s != nil {
		bs = maps.Clone(s.bindings)
	}
	r.smu.RUnlock()
	if s == nil {
		return nil
	}
	return describe(bs)
}

// State describes every session's bindings, sessions sorted by name.
func (r *Reconciler) State() State {
	r.smu.RLock()
	p := r.policy
	all := make(map[string]map[string]*binding, len(r.sessions))
	for name, s := range r.sessions {
		all[name] = maps.Clone(s.bindings)
	}
	r.smu.RUnlock()
	st := State{Policy: policyName(p), Sessions: []SessionState{}}
	for _, name := range slices.Sorted(maps.Keys(all)) {
		st.Sessions = append(st.Sessions, SessionState{Name: name, Servers: describe(all[name])})
	}
	return st
}

// HealthEpoch returns a number that moves whenever a binding may have
// become unhealthy: a view failed closed or was withdrawn, an entry turned
// failed or closed (both counted in opcount.Counters.Failures), or a
// reconciling call recorded a binding error (a failed acquire, refresh,
// release or teardown). While it stays the same, no binding that was
// healthy has turned unhealthy, so a supervisor that found nothing to
// repair need not look again. It is safe to call at any time.
func (r *Reconciler) HealthEpoch() int64 {
	n := r.counters.Failures.Load() + r.errs.Load()
	if c := r.pool.Counters(); c != r.counters {
		n += c.Failures.Load()
	}
	return n
}

// describe turns bindings into sorted BindingStates.
func describe(bs map[string]*binding) []BindingState {
	out := make([]BindingState, 0, len(bs))
	for _, server := range slices.Sorted(maps.Keys(bs)) {
		b := bs[server]
		st := BindingState{Server: server, Desired: b.want.identity, Overlay: b.want.overlay}
		if b.err != nil {
			st.Error = b.err.Error()
			st.Pending = b.err == errReacquiring
		}
		switch {
		case b.switchErr == errSwitching:
			st.Pending = true
		case b.switchErr != nil:
			st.SwitchError = b.switchErr.Error()
		}
		if h := b.handle; h != nil {
			info := h.Entry().Info()
			st.Identity, st.EntryID, st.EntryState = info.Identity, info.ID, info.State.String()
			describeView(&st, view.Of(h))
		}
		out = append(out, st)
	}
	return out
}

// describeView fills the view's part of st.
func describeView(st *BindingState, v *view.View) {
	st.Key = v.Key()
	if err := v.Err(); err != nil && st.Error == "" {
		st.Error = err.Error()
	}
	if p := v.Applied(); p != nil {
		st.Tools, st.Prompts, st.Resources = len(p.Tools), len(p.Prompts), len(p.Resources)
		for _, t := range p.Tools {
			if t.Meta[view.MetaTrust] == true {
				st.Trusted++
			}
		}
	}
}

// A ToolState is one tool a session's view of a server shows, under the
// upstream's name, with the flags the policy gave it for the session.
type ToolState struct {
	Name       string `json:"name"`
	Trust      bool   `json:"trust"`
	AlwaysLoad bool   `json:"alwaysLoad"`
	// UpstreamName is the upstream's own name of a tool the policy
	// renamed to Name; empty otherwise.
	UpstreamName string `json:"upstreamName,omitempty"`
}

// Tools returns the tools session's view of server shows, in the
// upstream's order, under the policy's names (the upstream's, unless the
// policy renamed them, when UpstreamName has the upstream's; the session
// may expose them prefixed). It returns ErrUnknownSession or ErrNotBound when there
// is no such session or binding, and an empty list while the binding
// holds no connection.
func (r *Reconciler) Tools(session, server string) ([]ToolState, error) {
	r.smu.RLock()
	s := r.sessions[session]
	var b *binding
	if s != nil {
		b = s.bindings[server]
	}
	r.smu.RUnlock()
	switch {
	case s == nil:
		return nil, fmt.Errorf("reconcile: session %q: %w", session, ErrUnknownSession)
	case b == nil:
		return nil, fmt.Errorf("reconcile: session %q: server %q: %w", session, server, ErrNotBound)
	}
	out := []ToolState{}
	if b.handle == nil {
		return out, nil
	}
	if p := view.Of(b.handle).Applied(); p != nil {
		for _, t := range p.Tools {
			ts := ToolState{Name: t.Name, Trust: t.Meta[view.MetaTrust] == true, AlwaysLoad: t.Meta[view.MetaAlwaysLoad] == true}
			if up, ok := t.Meta[view.MetaUpstreamName].(string); ok {
				ts.UpstreamName = up
			}
			out = append(out, ts)
		}
	}
	return out, nil
}

func policyName(p abi.Policy) string {
	if p == nil {
		return ""
	}
	hs := p.Handshake()
	return hs.Name + " " + hs.Version
}
