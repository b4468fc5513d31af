// Package reconcile turns the daemon's desired settings (a loaded
// [config.Config], runtime overlays, a policy) into actions on the
// transport pool ([pool.Pool]) and the session views ([view.View]), and
// remembers which handle each (session, server) pair holds: its bindings.
//
// [Reconciler.Apply] acquires what is new, and refreshes metadata on a
// held handle whose captured identity still matches (an equal key changes
// nothing). It changes a transport make before break ([pool.Pool.Standby]),
// reacquires a failed or closed entry, and releases what is no longer
// wanted. One failing binding does not stop the others ([Summary]). It also
// owns runtime overlays ([Reconciler.PutOverlay]), restarts, teardowns,
// policy swaps ([Reconciler.SetPolicy]), pre-checks ([Reconciler.Check]),
// and in-place repairs of failed views ([Reconciler.Repair]).
//
// It reads config and drives pool and view; it touches no HTTP and no
// session endpoint. A Reconciler is safe for concurrent use; reconciling
// calls are serialised, and readers (State, Handle, Bindings) never wait
// for them. Why a reload costs only what changed, and why transports are
// made before they break: docs/design.md.
package reconcile
