package session

import "time"

// SyncSubscriptions runs the subscriptions' sync now, on the caller's
// goroutine, for tests that must know it ran.
func (e *Endpoint) SyncSubscriptions() { e.syncSubscriptions() }

// KeepAliveInterval is the keep-alive interval the endpoint resolved from
// Options.KeepAlive (<= 0: none).
func (e *Endpoint) KeepAliveInterval() time.Duration { return e.keepAlive }

// BridgedCalls returns how many forwarded calls r holds for bridging.
func BridgedCalls(r *ProgressRelay) int {
	r.bmu.Lock()
	defer r.bmu.Unlock()
	return len(r.byToken)
}

// ResolvedTools returns how many tools the endpoint's name resolution has
// looked at so far.
func (e *Endpoint) ResolvedTools() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.tools.names.resolved
}
