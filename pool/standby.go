package pool

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// A Standby holds a reference on a ready entry that no view follows yet:
// a connection made before the one it replaces is let go. [Standby.Move]
// moves a held handle's view onto it; [Standby.Release] drops the
// standby's own reference, which closes the connection if no handle was
// moved onto it.
type Standby struct {
	pool  *Pool
	entry *Entry

	released atomic.Bool
}

// Standby makes (or, for a pooled spec, joins) the connection of spec and
// waits, within ctx, until it is ready: connected, initialized and listed
// within the spec's timeout. No view is attached, so no session sees it
// until a handle is moved onto it. It fails if the pool is closed, the spec
// is invalid, or the connection cannot be made (the error names the
// entry); the connection attempt then ends unless another caller holds it.
func (p *Pool) Standby(ctx context.Context, spec Spec) (*Standby, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("pool: standby: %w", err)
	}
	spec = spec.Clone()
	identity := spec.Fingerprint()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("pool: standby %s: %w", spec.Name, ErrClosed)
	}
	e := p.refEntry(spec, identity)
	p.mu.Unlock()
	if err := e.waitReady(ctx); err != nil {
		p.unref(ctx, e)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("pool: standby %s: %w", e.label(), err)
		}
		return nil, fmt.Errorf("pool: standby: %w", err) // err names the entry
	}
	e.mu.Unlock()
	e.fanMu.Unlock()
	return &Standby{pool: p, entry: e}, nil
}

// Entry returns the standby's entry.
func (s *Standby) Entry() *Entry { return s.entry }

// Identity returns the transport fingerprint the entry captured.
func (s *Standby) Identity() string { return s.entry.identity }

// Move moves old's view onto the standby's entry and returns the new
// handle holding it, without the session losing any item both connections
// have: the view keeps its registrations ([Attachment.HandoverTo]) and
// the entry's snapshot is applied over them as a diff, so the session's
// registry is told only what differs. Resource subscriptions old holds are
// joined on the new entry.
//
// old stays as it was otherwise: not released, its entry still
// connected, its Conn still answering calls, so that the caller can
// publish the new handle before it releases old ([Handle.Release] then
// deletes no registration: the view is no longer old's). Move fails,
// changing nothing, if old or the standby is released or the standby's
// entry turned terminal.
func (s *Standby) Move(ctx context.Context, old *Handle) (*Handle, error) {
	if old == nil {
		return nil, errors.New("pool: move: nil handle")
	}
	old.mu.Lock()
	defer old.mu.Unlock()
	v := old.follower
	if old.released.Load() {
		return nil, fmt.Errorf("pool: move %s for session %q: %w", old.entry.id, v.Session(), ErrReleased)
	}
	if s.released.Load() {
		return nil, fmt.Errorf("pool: move to %s for session %q: %w", s.entry.id, v.Session(), ErrReleased)
	}
	p, e := s.pool, s.entry
	p.mu.Lock()
	e.mu.Lock()
	e.refs++
	e.mu.Unlock()
	p.mu.Unlock()
	if err := e.waitReady(ctx); err != nil {
		p.unref(ctx, e)
		return nil, fmt.Errorf("pool: move to %s for session %q: %w", e.label(), v.Session(), err)
	}
	// waitReady returned with fanMu and mu held and the entry ready: no
	// fan-out can reach the new handle before its first Apply below.
	h := &Handle{pool: p, entry: e, follower: v}
	e.handles[h] = struct{}{}
	snap := e.snap
	e.mu.Unlock()
	h.att = old.att.HandoverTo(e)
	if h.att == nil {
		// Not released, so still attached: unreachable, but fail closed.
		e.mu.Lock()
		delete(e.handles, h)
		e.mu.Unlock()
		e.fanMu.Unlock()
		p.unref(ctx, e)
		return nil, fmt.Errorf("pool: move %s for session %q: the view is not attached", old.entry.id, v.Session())
	}
	if err := h.att.Apply(ctx, snap); err != nil {
		e.log.Warn("view failed closed on move", "session", v.Session(), "err", err)
	}
	e.fanMu.Unlock()
	p.counters.Acquires.Add(1)
	old.moveSubscriptions(ctx, h)
	return h, nil
}

// moveSubscriptions has h join every resource subscription old holds, with
// the same update functions. A subscription the new connection refuses is
// logged; the session's endpoint notices the lost hold at its next sync.
// old.mu is held.
func (old *Handle) moveSubscriptions(ctx context.Context, h *Handle) {
	oe := old.entry
	oe.mu.Lock()
	subs := make(map[string]UpdateFunc)
	for uri, hs := range oe.subs {
		if fn := hs[old]; fn != nil {
			subs[uri] = fn
		}
	}
	oe.mu.Unlock()
	for uri, fn := range subs {
		if err := h.Subscribe(ctx, uri, fn); err != nil {
			h.entry.log.Debug("subscription not moved to the new connection", "session", h.follower.Session(), "uri", uri, "err", err)
		}
	}
}

// Release drops the standby's reference; the connection closes if no
// handle holds it (waiting for the close within ctx). A second Release
// does nothing.
func (s *Standby) Release(ctx context.Context) {
	if s.released.Swap(true) {
		return
	}
	s.pool.unref(ctx, s.entry)
}
