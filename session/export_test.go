package session

// SyncSubscriptions runs the subscriptions' sync now, on the caller's
// goroutine, for tests that must know it ran.
func (e *Endpoint) SyncSubscriptions() { e.syncSubscriptions() }

// ForgetUpdateSync lets the next update have the subscriptions synced,
// however recently the last one did.
func (e *Endpoint) ForgetUpdateSync() { e.lastUpdateSync.Store(0) }
