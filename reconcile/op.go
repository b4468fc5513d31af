package reconcile

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/wasmhost/wasmhost/internal/opcount"
)

// An op accumulates the Summary of one reconciling call.
type op struct {
	counters   *opcount.Counters // views' work
	conns      *opcount.Counters // connects and disconnects
	before     opcount.Values
	connBefore opcount.Values
	regs       map[string]*trackedRegistry // registries at the start
	regOps     map[*trackedRegistry]int64  // their op counts at the start
	held       map[any]struct{}            // connections held at the start
	// after reports the registries and connections at the end.
	after func() (map[string]*trackedRegistry, map[any]struct{})
	// errs, if set, is where finish adds the number of errors the op
	// recorded.
	errs *atomic.Int64

	mu       sync.Mutex
	sum      Summary
	switches map[string]*TransportChange // by server
}

func newOp(counters, conns *opcount.Counters, regs map[string]*trackedRegistry, held map[any]struct{}, after func() (map[string]*trackedRegistry, map[any]struct{})) *op {
	o := &op{
		counters: counters,
		conns:    conns,
		regs:     regs,
		regOps:   make(map[*trackedRegistry]int64, len(regs)),
		held:     held,
		after:    after,
	}
	for _, reg := range regs {
		o.regOps[reg] = reg.ops.Load()
	}
	o.before = counters.Snapshot()
	o.connBefore = conns.Snapshot()
	return o
}

// begin starts an op over the current sessions. r.mu is held.
func (r *Reconciler) begin() *op {
	state := func() (map[string]*trackedRegistry, map[any]struct{}) {
		regs := make(map[string]*trackedRegistry, len(r.sessions))
		held := make(map[any]struct{}, len(r.held))
		r.smu.RLock()
		defer r.smu.RUnlock()
		for name, s := range r.sessions {
			regs[name] = s.reg
		}
		for e := range r.held {
			held[e] = struct{}{}
		}
		return regs, held
	}
	regs, held := state()
	o := newOp(r.counters, r.pool.Counters(), regs, held, state)
	o.errs = &r.errs
	return o
}

// count adds one to a field of o.sum.
func (o *op) count(field *int) { o.add(field, 1) }

// add adds n to one of o.sum's counts.
func (o *op) add(field *int, n int) {
	o.mu.Lock()
	*field += n
	o.mu.Unlock()
}

// fail records err for (session, server); nil is ignored.
func (o *op) fail(session, server string, err error) {
	if err == nil {
		return
	}
	o.mu.Lock()
	o.sum.Errors = append(o.sum.Errors, &BindingError{Session: session, Server: server, Err: err})
	o.mu.Unlock()
}

// switched records that a binding of server moved to its new transport
// (moved) or kept its running one because of err.
func (o *op) switched(server string, moved bool, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.switches == nil {
		o.switches = make(map[string]*TransportChange)
	}
	c := o.switches[server]
	if c == nil {
		c = &TransportChange{Server: server}
		o.switches[server] = c
	}
	if moved {
		c.Moved++
		return
	}
	c.Kept++
	if c.Err == nil {
		c.Err = err
	}
}

// finish completes the Summary and returns it with its joined errors.
func (o *op) finish() (Summary, error) {
	regs, held := o.after()
	delta := o.counters.Snapshot().Sub(o.before)
	conns := o.conns.Snapshot().Sub(o.connBefore)

	o.mu.Lock()
	defer o.mu.Unlock()
	if o.errs != nil {
		o.errs.Add(int64(len(o.sum.Errors)))
	}
	s := o.sum
	s.Replayed = int(delta.Replays)
	s.RegistryOps = int(delta.RegistryOps)
	s.TransportsStarted = int(conns.Connects)
	s.TransportsStopped = int(conns.Disconnects)
	for c := range held {
		if _, ok := o.held[c]; ok {
			s.TransportsReused++
		}
	}
	// Registries are told apart by identity, named by their session at the
	// end (or at the start for sessions that went away).
	changed := make(map[string]bool)
	seen := make(map[*trackedRegistry]bool)
	for name, reg := range regs {
		seen[reg] = true
		if reg.ops.Load() != o.regOps[reg] {
			changed[name] = true
		}
	}
	for name, reg := range o.regs {
		if !seen[reg] && reg.ops.Load() != o.regOps[reg] {
			changed[name] = true
		}
	}
	s.Changed = nil
	for name := range changed {
		s.Changed = append(s.Changed, name)
	}
	slices.Sort(s.Changed)
	s.TransportChanges = nil
	for _, server := range slices.Sorted(maps.Keys(o.switches)) {
		s.TransportChanges = append(s.TransportChanges, *o.switches[server])
	}
	s.Errors = slices.Clone(s.Errors)
	slices.SortStableFunc(s.Errors, func(a, b *BindingError) int {
		return cmp.Or(cmp.Compare(a.Session, b.Session), cmp.Compare(a.Server, b.Server))
	})
	return s, s.Err()
}
