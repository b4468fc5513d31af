package session

// SyncSubscriptions runs the subscriptions' sync now, on the caller's
// goroutine, for tests that must know it ran.
func (e *Endpoint) SyncSubscriptions() { e.syncSubscriptions() }
