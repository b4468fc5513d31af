package pool

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// listChanged records an upstream list_changed from connection generation
// gen and makes sure a refresh will run. While the entry is connecting or
// restarting, the attempt in progress looks at the dirty kinds when it
// publishes.
func (e *Entry) listChanged(gen uint64, k kinds) {
	e.pool.counters.Notifications.Add(1)
	e.markDirty(gen, k)
}

// markDirty records that the lists k of connection generation gen may have
// changed, as listChanged does, without a notification to count.
func (e *Entry) markDirty(gen uint64, k kinds) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.conn != gen || e.state.Terminal() {
		return
	}
	e.dirty |= k
	e.startRefreshLocked()
}

// startRefreshLocked starts the refresh loop if something is dirty, the
// entry is ready and no loop runs; a running loop picks new dirty kinds up
// itself, so notifications coalesce into at most one refresh in flight and
// one pending. e.mu is held.
func (e *Entry) startRefreshLocked() {
	if e.refreshing || e.dirty == 0 || e.state != StateReady {
		return
	}
	e.refreshing = true
	e.idle = make(chan struct{})
	go e.refreshLoop()
}

// The pace of an entry's rediscoveries: at most one per
// minRefreshInterval however fast an upstream sends list_changed (those
// that come meanwhile coalesce into the next one), and after a failed one a
// delay from minRefreshRetry doubling up to maxRefreshRetry before the
// lists it was to refresh are tried again.
const (
	minRefreshInterval = 100 * time.Millisecond
	minRefreshRetry    = 250 * time.Millisecond
	maxRefreshRetry    = 30 * time.Second
)

// refreshLoop rediscovers dirty lists and fans each new snapshot out until
// nothing is dirty. A listing equal to the current one is not published
// (views would replay it for nothing); a failed one is tried again.
func (e *Entry) refreshLoop() {
	var last time.Time
	var retry time.Duration
	for {
		wait := max(time.Until(last.Add(minRefreshInterval)), retry-time.Since(last))
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-e.stop.Done(): // closing: the check below ends the loop
			case <-t.C:
			}
			t.Stop()
		}
		e.mu.Lock()
		if e.dirty == 0 || e.state != StateReady {
			e.refreshing = false
			close(e.idle)
			e.mu.Unlock()
			return
		}
		which, cs, gen, base := e.dirty, e.upstream, e.conn, e.snap
		e.dirty = 0
		e.mu.Unlock()

		last = time.Now()
		ctx, cancel := context.WithTimeout(e.stop, e.timeout)
		snap, err := e.discover(ctx, cs, which, base)
		cancel()
		if errors.Is(err, ErrListingTooLarge) {
			// Trying again would only take the memory again.
			if e.fail(gen, fmt.Errorf("server %s: %w", e.spec.Name, err)) {
				e.closeConn(context.Background(), cs)
			}
			continue
		}
		if err != nil {
			retry = min(max(2*retry, minRefreshRetry), maxRefreshRetry)
			e.log.Warn("snapshot refresh failed; trying again", "err", err, "in", retry)
			e.mu.Lock()
			if e.conn == gen {
				e.dirty |= which // the change announced is still to be seen
			}
			e.mu.Unlock()
			continue
		}
		retry = 0
		e.fanMu.Lock()
		e.mu.Lock()
		if e.conn != gen || e.state != StateReady {
			// A restart or close superseded this connection and does its
			// own discovery.
			e.mu.Unlock()
			e.fanMu.Unlock()
			continue
		}
		if sameListing(e.snap, snap) {
			e.mu.Unlock()
			e.fanMu.Unlock()
			continue
		}
		e.version++
		snap.Version = e.version
		e.snap = snap
		handles := e.handleList()
		e.mu.Unlock()
		e.fanOut(handles, snap)
		e.fanMu.Unlock()
	}
}
