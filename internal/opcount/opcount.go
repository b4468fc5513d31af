// Package opcount counts the work the transport pool and the session views do,
// so tests (and later metrics) can assert that a change caused exactly the
// connects, registry operations and plugin calls it should, and that an
// equivalent change caused none.
//
// A [Counters] is shared by one pool and every view attached to it. Counters
// only ever grow; tests take a [Values] before and after an action and
// compare the difference ([Values.Sub]) with what they expect. It imports
// nothing of wasmhost's and touches nothing but its counters.
package opcount

import "sync/atomic"

// Counters holds the operation counters. The zero value is ready to use; a
// Counters must not be copied after first use.
type Counters struct {
	// Connects counts upstream connections established (initialize done).
	Connects atomic.Int64
	// Disconnects counts upstream connections that ended, whether the pool
	// closed them or the upstream went away.
	Disconnects atomic.Int64
	// Acquires counts handles handed out by the pool.
	Acquires atomic.Int64
	// Releases counts handles released.
	Releases atomic.Int64
	// Refreshes counts settings refreshes of a view (one per call, whether
	// or not the metadata key changed).
	Refreshes atomic.Int64
	// Replays counts projections a view applied to its registry (each
	// replay diffs against what the view had registered).
	Replays atomic.Int64
	// RegistryOps counts calls into a session registry (one put or delete
	// of a batch of tools, prompts or resources).
	RegistryOps atomic.Int64
	// PolicyCalls counts calls into a policy (canonicalize or project).
	PolicyCalls atomic.Int64
	// Notifications counts list_changed notifications received from
	// upstream servers.
	Notifications atomic.Int64
	// Discoveries counts snapshot listings of an upstream server (at
	// connect, restart, or after a list_changed).
	Discoveries atomic.Int64

	// Failures counts views that failed closed or were withdrawn and
	// entries that turned terminal (failed or closed). It counts no work
	// and is not part of [Values]: a reconciler reads it to learn whether any
	// binding may have turned unhealthy since it last looked.
	Failures atomic.Int64
}

// Values is a plain copy of [Counters] at one instant. It is comparable, so
// tests can compare whole deltas with ==. Its JSON (the daemon's /v1/state
// "counters") names each counter in camelCase, like the rest of the state.
type Values struct {
	Connects      int64 `json:"connects"`
	Disconnects   int64 `json:"disconnects"`
	Acquires      int64 `json:"acquires"`
	Releases      int64 `json:"releases"`
	Refreshes     int64 `json:"refreshes"`
	Replays       int64 `json:"replays"`
	RegistryOps   int64 `json:"registryOps"`
	PolicyCalls   int64 `json:"policyCalls"`
	Notifications int64 `json:"notifications"`
	Discoveries   int64 `json:"discoveries"`
}

// Snapshot reads every counter. The counters are read one after another, not
// atomically as a set: take snapshots when the counted work is quiescent.
func (c *Counters) Snapshot() Values {
	return Values{
		Connects:      c.Connects.Load(),
		Disconnects:   c.Disconnects.Load(),
		Acquires:      c.Acquires.Load(),
		Releases:      c.Releases.Load(),
		Refreshes:     c.Refreshes.Load(),
		Replays:       c.Replays.Load(),
		RegistryOps:   c.RegistryOps.Load(),
		PolicyCalls:   c.PolicyCalls.Load(),
		Notifications: c.Notifications.Load(),
		Discoveries:   c.Discoveries.Load(),
	}
}

// Sub returns v minus earlier, field by field: the work done between two
// snapshots.
func (v Values) Sub(earlier Values) Values {
	return Values{
		Connects:      v.Connects - earlier.Connects,
		Disconnects:   v.Disconnects - earlier.Disconnects,
		Acquires:      v.Acquires - earlier.Acquires,
		Releases:      v.Releases - earlier.Releases,
		Refreshes:     v.Refreshes - earlier.Refreshes,
		Replays:       v.Replays - earlier.Replays,
		RegistryOps:   v.RegistryOps - earlier.RegistryOps,
		PolicyCalls:   v.PolicyCalls - earlier.PolicyCalls,
		Notifications: v.Notifications - earlier.Notifications,
		Discoveries:   v.Discoveries - earlier.Discoveries,
	}
}
