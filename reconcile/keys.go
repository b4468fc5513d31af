package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/wasmhost/wasmhost/abi"
)

// keyMemoEntries bounds a keyMemo; it is cleared when it would grow past it.
const keyMemoEntries = 65536

// A keyMemo is the policy the reconciler's views use: the reconciler's
// policy, with canonicalize results remembered by the exact settings bytes.
// Views only read keys, so a keyMemo keeps and answers the key alone
// (Canonical is optional in a result, see abi.CanonicalResult).
// A policy is a pure function of its input (abi/SPEC.md, "Determinism"), so
// a remembered result is the one the policy would give again. Apply
// canonicalizes every distinct settings object it is about to hand to views
// before the views need them (ahead, then warm), after which the views' own
// canonicalize calls are answered from memory: a reload touching n views
// with k distinct settings sends each of the k to the policy once, in a few
// calls, not n calls. Only successful results are remembered; per-item
// refusals and failed calls go to the policy each time, so a view's error
// is always the policy's own. Project calls pass through (views share
// projections through their entry's view.Memo). A keyMemo is used by
// pointer, so views sharing it share projections; a policy swap makes a new
// one.
type keyMemo struct {
	abi.Policy

	mu   sync.Mutex
	keys map[string]string // settings bytes -> key
}

func newKeyMemo(p abi.Policy) *keyMemo {
	return &keyMemo{Policy: p, keys: make(map[string]string)}
}

// Canonicalize answers from memory what it can and asks the policy, in one
// call, for the distinct settings it has not seen.
func (m *keyMemo) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	if req == nil {
		return m.Policy.Canonicalize(ctx, req)
	}
	results := make([]abi.CanonicalResult, len(req.Settings))
	var (
		missing []json.RawMessage // distinct settings not remembered, first-seen order
		where   map[string][]int  // positions of each missing settings object
	)
	m.mu.Lock()
	for i, s := range req.Settings {
		if key, ok := m.keys[string(s)]; ok {
			results[i].Key = key
			continue
		}
		if where == nil {
			where = make(map[string][]int)
		}
		if _, seen := where[string(s)]; !seen {
			missing = append(missing, s)
		}
		where[string(s)] = append(where[string(s)], i)
	}
	m.mu.Unlock()
	if len(missing) == 0 {
		return &abi.CanonicalizeResponse{Results: results}, nil
	}
	sub := &abi.CanonicalizeRequest{Settings: missing}
	resp, err := m.Policy.Canonicalize(ctx, sub)
	if err != nil {
		return nil, err
	}
	if resp == nil {
		return nil, fmt.Errorf("canonicalize: policy returned no response")
	}
	if err := abi.ValidateCanonicalize(sub, resp); err != nil {
		return nil, err
	}
	m.mu.Lock()
	if len(m.keys)+len(missing) > keyMemoEntries {
		clear(m.keys)
	}
	for j, s := range missing {
		r := abi.CanonicalResult{Key: resp.Results[j].Key, Error: resp.Results[j].Error}
		if r.Error == "" && len(m.keys) < keyMemoEntries {
			m.keys[string(s)] = r.Key
		}
		for _, i := range where[string(s)] {
			results[i] = r
		}
	}
	m.mu.Unlock()
	return &abi.CanonicalizeResponse{Results: results}, nil
}

// warm canonicalizes, in one call, the distinct settings (settings may
// repeat) that the memo lacks. A failure is not reported: each view's own
// call then reaches the policy and records the failure where it belongs.
func (m *keyMemo) warm(ctx context.Context, settings []json.RawMessage) {
	seen := make(map[string]bool)
	var distinct []json.RawMessage
	for _, s := range settings {
		if !seen[string(s)] {
			seen[string(s)] = true
			distinct = append(distinct, s)
		}
	}
	if len(distinct) == 0 {
		return
	}
	_, _ = m.Canonicalize(ctx, &abi.CanonicalizeRequest{Settings: distinct})
}

// lookup returns the remembered key of settings, if any.
func (m *keyMemo) lookup(settings json.RawMessage) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key, ok := m.keys[string(settings)]
	return key, ok
}

// An ahead canonicalizes settings objects in the background while Apply is
// still building wants: the builder hands over each settings object it
// makes (add), and one goroutine canonicalizes whatever has arrived since
// its last call, through the keyMemo, until Apply says it is done (wait).
// The plugin call, the one part of an equivalent reload only the policy can
// answer, then runs beside the comparison of every session's overrides
// instead of after it. A settings object is sent once; the number of calls
// depends on how the objects arrive, and is at most their number.
type ahead struct {
	keys *keyMemo
	ctx  context.Context
	wake chan struct{} // holds at most one token: something was added
	done chan struct{} // closed when the goroutine has returned

	mu       sync.Mutex
	pending  []json.RawMessage
	finished bool // wait was called: no more adds
}

// startAhead starts canonicalizing through keys what add hands over.
func startAhead(ctx context.Context, keys *keyMemo) *ahead {
	a := &ahead{keys: keys, ctx: ctx, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go a.run()
	return a
}

// add queues settings, a settings object no earlier add queued.
func (a *ahead) add(settings json.RawMessage) {
	a.mu.Lock()
	a.pending = append(a.pending, settings)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// wait ends the adds and returns once everything added has been
// canonicalized (or has failed: keyMemo.warm reports nothing, and views
// then ask the policy themselves).
func (a *ahead) wait() {
	a.mu.Lock()
	a.finished = true
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
	<-a.done
}

// run is the goroutine: at each wake it canonicalizes what is pending, and
// returns after the wake that wait sends.
func (a *ahead) run() {
	defer close(a.done)
	for range a.wake {
		a.mu.Lock()
		batch, finished := a.pending, a.finished
		a.pending = nil
		a.mu.Unlock()
		if len(batch) > 0 {
			a.keys.warm(a.ctx, batch)
		}
		if finished {
			return
		}
	}
}
