package view

import (
	"context"
	"encoding/json"
	"sync"
	"weak"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/pool"
)

// A Memo shares projection work between the views attached to one snapshot
// owner (a pool entry). Views whose metadata keys are equal under the same
// policy see the same projection of a snapshot, so the memo computes it
// once per (policy, key, snapshot) and hands the same immutable
// [Projection] to each: a fan-out to n views with k distinct keys makes k
// project calls, not n.
//
// A memo remembers only the newest snapshot it was asked about (by
// Version): asking about a newer one forgets the older results, and asking
// about an older one computes without memoizing. Failed projections are
// never remembered, so a later attempt calls the policy again. Policies whose
// dynamic type is not comparable cannot be used as map keys and bypass the
// memo. The zero value is not usable; a nil *Memo memoizes nothing.
type Memo struct {
	mu    sync.Mutex
	snap  *pool.Snapshot
	calls map[memoKey]*memoCall
	// deltas are the registry deltas computed from one projection to
	// another of the memo's snapshot, by (old, new) pair: a rediscovery or
	// reload moves all the views of one key from the same projection to
	// the same new one, and one delta (which compares the tools deeply)
	// serves them all. Weak keys keep no projection alive; the map is
	// emptied with calls, and when it reaches maxDeltas.
	deltas map[deltaKey]*delta
}

type deltaKey struct {
	old, next weak.Pointer[Projection]
}

// maxDeltas bounds Memo.deltas: reloads on an unchanged snapshot add pairs
// without a new snapshot to clear them.
const maxDeltas = 1024

type memoKey struct {
	policy abi.Policy
	key    string
}

// A memoCall is one projection, in flight until done is closed.
type memoCall struct {
	done chan struct{}
	proj *Projection
	err  error
}

// NewMemo returns an empty memo.
func NewMemo() *Memo {
	return &Memo{calls: make(map[memoKey]*memoCall)}
}

// project returns the projection of snap for settings whose metadata key
// under p is key, computing it at most once per (p, key, snap) while snap
// is the memo's newest snapshot.
func (m *Memo) project(ctx context.Context, p abi.Policy, c *opcount.Counters, key string, settings json.RawMessage, snap *pool.Snapshot) (*Projection, error) {
	compute := func() (*Projection, error) {
		return Project(ctx, counted{p, c}, settings, snap)
	}
	if m == nil || snap == nil || key == "" || !usableAsKey(p) {
		return compute()
	}
	k := memoKey{p, key}
	m.mu.Lock()
	if !m.adopt(snap) {
		m.mu.Unlock()
		return compute()
	}
	if call, ok := m.calls[k]; ok {
		m.mu.Unlock()
		select {
		case <-call.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if call.err == nil {
			return call.proj, nil
		}
		// The leader failed, perhaps only because its own context ended:
		// try once more under this caller's context.
		return compute()
	}
	call := &memoCall{done: make(chan struct{})}
	m.calls[k] = call
	m.mu.Unlock()

	call.proj, call.err = compute()
	if call.err != nil {
		m.mu.Lock()
		if m.calls[k] == call {
			delete(m.calls, k)
		}
		m.mu.Unlock()
	}
	close(call.done)
	return call.proj, call.err
}

// adopt makes snap the memo's snapshot, forgetting the results for an
// older one, and reports true; for a snapshot older than the memo's it
// changes nothing and reports false. m.mu is held.
func (m *Memo) adopt(snap *pool.Snapshot) bool {
	if m.snap == snap {
		return true
	}
	if m.snap != nil && snap.Version < m.snap.Version {
		return false
	}
	m.snap = snap
	clear(m.calls)
	clear(m.deltas)
	return true
}

// delta returns the registry delta from old to next (either may be nil),
// computing it once per pair while next is a projection of the memo's
// snapshot (snap); a nil *Memo computes it every time, and so does a
// delta from or to nothing, which compares no items.
func (m *Memo) delta(old, next *Projection, snap *pool.Snapshot) *delta {
	if m == nil || old == nil || next == nil {
		return diffOf(old, next) // nothing to compare
	}
	k := deltaKey{weak.Make(old), weak.Make(next)}
	m.mu.Lock()
	if m.snap != snap {
		m.mu.Unlock()
		return diffOf(old, next)
	}
	d, ok := m.deltas[k]
	m.mu.Unlock()
	if ok {
		return d
	}
	d = diffOf(old, next)
	m.mu.Lock()
	if m.snap == snap {
		if m.deltas == nil || len(m.deltas) >= maxDeltas {
			m.deltas = make(map[deltaKey]*delta)
		}
		m.deltas[k] = d
	}
	m.mu.Unlock()
	return d
}

// wants reports whether the memo would compute the projection of snap for
// (p, key) if asked now: snap is not older than the memo's snapshot and no
// call for (p, key) is remembered or in flight for it.
func (m *Memo) wants(p abi.Policy, key string, snap *pool.Snapshot) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.snap != snap {
		return m.snap == nil || snap.Version >= m.snap.Version
	}
	_, ok := m.calls[memoKey{p, key}]
	return !ok
}

// put remembers proj as the projection of snap for (p, key), as if a call
// had computed it, unless snap is older than the memo's snapshot or the
// memo already has a call for (p, key).
func (m *Memo) put(p abi.Policy, key string, snap *pool.Snapshot, proj *Projection) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.adopt(snap) {
		return
	}
	k := memoKey{p, key}
	if _, ok := m.calls[k]; ok {
		return
	}
	done := make(chan struct{})
	close(done)
	m.calls[k] = &memoCall{done: done, proj: proj}
}

// Counted returns p wrapped so that each of its canonicalize and project
// calls counts in c.PolicyCalls. Views count their own calls this way;
// callers computing keys outside a view can use it to count theirs.
func Counted(p abi.Policy, c *opcount.Counters) abi.Policy { return counted{p, c} }

// counted wraps a policy to count each call in PolicyCalls. It is built per
// call so that the memo can key on the bare policy.
type counted struct {
	abi.Policy
	c *opcount.Counters
}

func (p counted) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	p.c.PolicyCalls.Add(1)
	return p.Policy.Canonicalize(ctx, req)
}

func (p counted) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	p.c.PolicyCalls.Add(1)
	return p.Policy.Project(ctx, req)
}

// usableAsKey reports whether p can be a map key: its dynamic type, and
// every interface value nested in it, must be comparable, or the insert
// panics; the probe insert turns that panic into false.
func usableAsKey(p abi.Policy) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	_ = map[abi.Policy]struct{}{p: {}}
	return true
}
