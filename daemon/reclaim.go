package daemon

import (
	"context"
	"runtime/debug"
	"time"
)

// reclaimEvery is how often the daemon counts its client sessions to see
// whether many ended (see reclaimer).
const reclaimEvery = 5 * time.Second

// reclaimMin is the fewest client sessions that must have ended since the
// peak for a reclaim; a quarter of the peak counts too, when it is more.
const reclaimMin = 256

// A reclaimer gives the memory of ended client sessions back to the
// operating system. The Go runtime returns freed memory only after a
// garbage collection, and an idle daemon allocates too little to start
// one (the runtime forces one every two minutes, and then returns the
// memory bit by bit): after a thousand clients leave, the process would
// keep their megabytes for minutes. When the number of client sessions has
// fallen from its peak by reclaimMin, or a quarter of the peak if more,
// and stayed down for a tick, the reclaimer runs debug.FreeOSMemory once
// (a collection and a full scavenge, some milliseconds for a heap of
// megabytes) and takes the current number as the new peak.
type reclaimer struct {
	clients func() int // client sessions now, across every endpoint
	free    func()     // debug.FreeOSMemory, or a test's
	peak    int
	last    int // the count at the previous tick
}

// tick counts the client sessions and reclaims when enough have ended and
// none ended since the previous tick (a burst of closes is over). It
// reports whether it reclaimed.
func (r *reclaimer) tick() bool {
	n := r.clients()
	defer func() { r.last = n }()
	if n > r.peak {
		r.peak = n
		return false
	}
	ended := r.peak - n
	if ended < max(reclaimMin, r.peak/4) || n < r.last {
		return false
	}
	r.free()
	r.peak = n
	return true
}

// reclaim runs a reclaimer over the daemon's endpoints until ctx ends.
func (d *Daemon) reclaim(ctx context.Context) {
	r := &reclaimer{clients: d.clientSessions, free: debug.FreeOSMemory}
	t := time.NewTicker(reclaimEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if r.tick() {
				d.log.Debug("gave the memory of ended client sessions back to the system", "clients", r.peak)
			}
		case <-ctx.Done():
			return
		}
	}
}

// clientSessions counts the client sessions of every endpoint.
func (d *Daemon) clientSessions() int {
	d.mu.Lock()
	eps := make([]*endpoint, 0, len(d.endpoints))
	for _, e := range d.endpoints {
		eps = append(eps, e)
	}
	d.mu.Unlock()
	n := 0
	for _, e := range eps {
		n += e.ep.Clients()
	}
	return n
}
