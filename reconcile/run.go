package reconcile

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
)

// maxParallel bounds how many bindings one call works on at once.
const maxParallel = 8

// run performs tasks: first everything that keeps or gains a binding, then
// the releases, so a transport moving between sessions is joined before its
// last holder lets go. r.mu is held.
func (r *Reconciler) run(ctx context.Context, o *op, tasks []task) {
	slices.SortFunc(tasks, func(a, b task) int {
		return cmp.Or(cmp.Compare(a.s.name, b.s.name), cmp.Compare(a.server, b.server))
	})
	var keep, drop []task
	var moves [][]task
	at := make(map[string]int) // moves of a pooled transport, by identity
	for _, t := range tasks {
		switch {
		case t.want == nil:
			drop = append(drop, t)
		case switching(t):
			// One connection for the sessions that share it (pooled),
			// one each otherwise.
			if i, ok := at[t.want.identity]; ok && t.want.spec.Pooled {
				moves[i] = append(moves[i], t)
				continue
			}
			at[t.want.identity] = len(moves)
			moves = append(moves, []task{t})
		default:
			keep = append(keep, t)
		}
	}
	parallel(len(keep)+len(moves), func(i int) {
		if i < len(keep) {
			r.converge(ctx, o, keep[i])
		} else {
			r.switchOver(ctx, o, moves[i-len(keep)])
		}
	})
	parallel(len(drop), func(i int) { r.converge(ctx, o, drop[i]) })
}

// switching reports whether t moves a binding from a live connection to
// another transport, which switchOver does, make before break.
func switching(t task) bool {
	if t.want == nil || t.force || t.cur == nil || t.cur.handle == nil || t.cur.want == nil {
		return false
	}
	h := t.cur.handle
	return h.Identity() != t.want.identity && !h.Released() && !h.Entry().State().Terminal()
}

// switchOver moves ts, bindings held on live connections whose desired
// transport changed to one transport (ts[0].want's), make before break:
//
//  1. each binding's new settings are applied at once, on the running
//     connection, whatever becomes of the new one;
//  2. the new connection is made (connected, initialized and listed,
//     within the server's timeout) while the running ones serve;
//  3. only then is each binding's view moved onto it (pool.Standby.Move:
//     its sessions are told only what differs), the new handle published
//     (calls go to the new connection from then on) and the old handle
//     released (the last release closes the old connection, once the
//     calls under way on it are answered).
//
// If the new connection cannot be made (or a move fails), the bindings
// keep their running connections and views, with the failure as their
// switchErr, and the failure is recorded for each binding and in
// Summary.TransportChanges. r.mu is held.
func (r *Reconciler) switchOver(ctx context.Context, o *op, ts []task) {
	server := ts[0].server
	live := ts[:0:0]
	for _, t := range ts {
		old := t.cur.handle
		r.setBinding(t.s, t.server, &binding{handle: old, want: t.want, switchErr: errSwitching})
		if bytes.Equal(t.cur.want.settings, t.want.settings) {
			live = append(live, t)
			continue
		}
		o.count(&o.sum.Refreshed)
		_, err := old.RefreshMetadata(ctx, t.want.settings)
		if errors.Is(err, pool.ErrTerminal) || errors.Is(err, pool.ErrReleased) {
			// The running connection went away meanwhile: nothing left
			// to keep serving, so reacquire as usual.
			r.converge(ctx, o, task{s: t.s, server: t.server, cur: &binding{handle: old, want: t.want}, want: t.want})
			continue
		}
		o.fail(t.s.name, t.server, err)
		live = append(live, t)
	}
	if len(live) == 0 {
		return
	}
	failed := func(t task, cause error) {
		err := fmt.Errorf("%w, the running connection keeps serving: %w", ErrTransportNotChanged, cause)
		r.setBinding(t.s, t.server, &binding{handle: t.cur.handle, want: t.want, switchErr: err})
		o.fail(t.s.name, t.server, err)
		o.switched(server, false, cause)
		r.log.Debug("transport change failed", "session", t.s.name, "server", t.server, "err", err)
	}
	sb, err := r.pool.Standby(ctx, *live[0].want.spec)
	if err != nil {
		for _, t := range live {
			failed(t, err)
		}
		return
	}
	defer sb.Release(ctx)
	parallel(len(live), func(i int) {
		t := live[i]
		old := t.cur.handle
		h, err := sb.Move(ctx, old)
		if err != nil {
			failed(t, err)
			return
		}
		o.count(&o.sum.Acquired)
		o.switched(server, true, nil)
		r.setBinding(t.s, t.server, &binding{handle: h, want: t.want})
		r.release(ctx, o, t, old)
		if err := view.Of(h).Err(); err != nil {
			o.fail(t.s.name, t.server, err)
		}
	})
}

// settled reports whether cur already is what w asks for: the same
// captured transport identity, byte-identical settings (compared with the
// private copy Apply kept last time, so settings mutated in place in the
// caller's config still count as changed), a live entry and a view that has
// not failed closed. A refresh of such a binding would compute the same key
// and return, so plan and reconcileOne give it no task: a reload then
// costs in proportion to the bindings that changed, not to all bindings.
func settled(cur *binding, w *want) bool {
	if cur == nil || w == nil || cur.handle == nil || cur.want == nil {
		return false
	}
	h := cur.handle
	return cur.switchErr == nil && h.Identity() == w.identity && bytes.Equal(cur.want.settings, w.settings) &&
		!h.Released() && !h.Entry().State().Terminal() && view.Of(h).Err() == nil
}

// converge performs one task. A forced one (Teardown, Repair, Restart)
// of a binding whose transport change failed reconnects the transport it
// runs, which stays in effect until a reconciling call makes the change
// (see switchOver), and keeps the failure on record.
func (r *Reconciler) converge(ctx context.Context, o *op, t task) {
	var held *pool.Handle
	if t.cur != nil {
		held = t.cur.handle
	}
	if t.want == nil {
		r.setBinding(t.s, t.server, nil)
		r.release(ctx, o, t, held)
		return
	}
	desired, acquire := t.want, t.want
	var switchErr error
	if t.force && held != nil && t.cur.switchErr != nil && t.cur.switchErr != errSwitching && held.Identity() != desired.identity {
		spec := held.Spec()
		acquire = &want{spec: &spec, identity: held.Identity(), settings: desired.settings, overlay: desired.overlay}
		switchErr = t.cur.switchErr
	}
	if held != nil && !t.force && held.Identity() == t.want.identity && !held.Entry().State().Terminal() {
		o.count(&o.sum.Refreshed)
		_, err := held.RefreshMetadata(ctx, t.want.settings)
		if err == nil || !(errors.Is(err, pool.ErrTerminal) || errors.Is(err, pool.ErrReleased)) {
			r.setBinding(t.s, t.server, &binding{handle: held, want: t.want})
			if err != nil {
				o.fail(t.s.name, t.server, err)
			}
			return
		}
		// The entry turned terminal since we looked: replace it.
	}
	if held != nil {
		// Release first: the old view must leave the registry before the
		// new one fills it.
		r.setBinding(t.s, t.server, &binding{want: desired, err: errReacquiring})
		r.release(ctx, o, t, held)
	}
	v := view.New(view.Config{
		Session:  t.s.name,
		Server:   t.server,
		Registry: t.s.reg,
		Counters: r.counters,
		Policy:   r.viewPolicy(),
		Settings: acquire.settings,
		Logger:   r.log,
	})
	h, err := r.pool.Acquire(ctx, *acquire.spec, v)
	if err != nil {
		r.setBinding(t.s, t.server, &binding{want: desired, err: err})
		o.fail(t.s.name, t.server, err)
		// Debug only: the caller reports the error (Apply's and Repair's
		// join it), and the pool has logged why the connection failed.
		r.log.Debug("acquire failed", "session", t.s.name, "server", t.server, "err", err)
		return
	}
	o.count(&o.sum.Acquired)
	r.setBinding(t.s, t.server, &binding{handle: h, want: desired, switchErr: switchErr})
	if err := v.Err(); err != nil {
		o.fail(t.s.name, t.server, err)
	}
}

func (r *Reconciler) release(ctx context.Context, o *op, t task, h *pool.Handle) {
	if h == nil {
		return
	}
	if err := h.Release(ctx); err != nil {
		o.fail(t.s.name, t.server, err)
		return
	}
	o.count(&o.sum.Released)
}

// setBinding publishes b (nil: none) for server in s.
func (r *Reconciler) setBinding(s *session, server string, b *binding) {
	r.smu.Lock()
	defer r.smu.Unlock()
	if old := s.bindings[server]; old != nil && old.handle != nil {
		e := old.handle.Entry()
		if r.held[e]--; r.held[e] <= 0 {
			delete(r.held, e)
		}
	}
	if b == nil {
		delete(s.bindings, server)
		return
	}
	s.bindings[server] = b
	if b.handle != nil {
		r.held[b.handle.Entry()]++
	}
}

// parallel calls f(0..n-1), in that order, with at most maxParallel calls
// at once and returns when all are done. A few workers take the indexes in
// turn, rather than a goroutine per call: a reload of 100,000 bindings
// would otherwise start (and grow the stacks of) 100,000 goroutines.
func parallel(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, maxParallel) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}
