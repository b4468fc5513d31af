package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/wasmhost/wasmhost/internal/backoff"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
)

// backoffMemory is how long a binding must stay healthy after a retry
// brought it back before its backoff starts from RetryMin again.
const backoffMemory = time.Minute

// unhealthy reports whether a binding holds no live connection (its
// acquire failed, or its entry failed or closed: the pool gave up
// restarting it) or its view failed closed on a live one (a policy
// failure, which may pass). A binding a reconciling call is replacing is
// not.
func unhealthy(b reconcile.BindingState) bool {
	if b.Pending {
		return false
	}
	if b.Identity == "" || b.Error != "" {
		return true
	}
	st, ok := pool.ParseState(b.EntryState)
	return ok && st.Terminal()
}

// supervise retries unhealthy bindings with exponential backoff until ctx
// ends. A retry releases the binding and acquires it afresh
// (reconcile.Repair, which leaves alone a binding a reload has repaired
// meanwhile); a pooled connection other sessions share is joined,
// not duplicated. While the reconciler's health epoch has not moved since
// the last look, no binding can have turned unhealthy, so a tick at which
// no retry is due (and no recovery's memory runs out) costs nothing: the
// state of every binding is only built when it may have changed or a retry
// is due, not at every tick while a server stays down.
func (d *Daemon) supervise(ctx context.Context) {
	tick := max(d.opts.RetryMin/2, 50*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	type key struct{ session, server string }
	retries := backoff.Schedule[key]{Min: d.opts.RetryMin, Max: d.opts.RetryMax, Memory: backoffMemory}
	epoch := int64(-1) // not looked yet: HealthEpoch is never negative
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e := d.rec.HealthEpoch()
		now := time.Now()
		if e == epoch && retries.Quiet(now) {
			continue
		}
		epoch = e
		seen := make(map[key]bool)
		// The transports whose repair failed this round: the other sessions
		// bound to the same one wait for the next round instead of trying
		// the same dead server again a moment later.
		failed := make(map[string]bool)
		for _, s := range d.rec.State().Sessions {
			for _, b := range s.Servers {
				if !unhealthy(b) {
					continue
				}
				k := key{s.Name, b.Server}
				seen[k] = true
				if scheduled, delay := retries.ScheduleRetry(k, now); scheduled {
					d.log.Warn("upstream down; retrying with backoff", "session", s.Name, "server", b.Server, "in", delay, "err", b.Error)
					continue
				}
				if !retries.Due(k, now) {
					continue
				}
				if b.Desired != "" && failed[b.Desired] {
					d.log.Debug("upstream retry put off: the same server failed a moment ago", "session", s.Name, "server", b.Server, "next in", retries.Failed(k))
					continue
				}
				repaired, err := d.rec.Repair(ctx, s.Name, b.Server)
				switch {
				case !repaired:
					// A reload made it healthy meanwhile.
					retries.Forget(k)
				case err == nil:
					d.metrics.retries.WithLabelValues("ok").Inc()
					// Warn, as its going down was: an operator who was
					// told it went down is told it is back.
					d.log.Warn("upstream reconnected", "session", s.Name, "server", b.Server)
					retries.Recovered(k)
				case errors.Is(err, reconcile.ErrNotBound), errors.Is(err, reconcile.ErrUnknownSession), errors.Is(err, reconcile.ErrClosed), ctx.Err() != nil:
					retries.Forget(k)
				default:
					failed[b.Desired] = true
					d.metrics.retries.WithLabelValues("failed").Inc()
					d.log.Warn("upstream retry failed", "session", s.Name, "server", b.Server, "next in", retries.Failed(k), "err", err)
				}
			}
		}
		retries.Sweep(now, func(k key) bool { return seen[k] })
	}
}
