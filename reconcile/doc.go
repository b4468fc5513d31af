// Package reconcile turns the daemon's desired settings (a loaded
// [config.Config], runtime overlays, a policy) into actions on the
// transport pool ([pool.Pool]) and the session views ([view.View]), and
// remembers which handle each (session, server) pair holds.
//
// # Bindings
//
// A binding is one session's use of one server: the [pool.Handle] it holds
// (whose view projects the server into the session's [view.Registry]) and
// the desired entry it was last reconciled against. For every session of
// the config and every server that session uses ([config.Session.Effective]
// reports it enabled), [Reconciler.Apply] decides:
//
//   - no binding yet (or the last acquire failed): create a view with the
//     session's effective settings and acquire a handle;
//   - a held handle whose captured transport identity ([pool.Handle.Identity])
//     differs from the desired [pool.Spec.Fingerprint], on a live entry:
//     change the transport make before break (see Transport changes);
//   - a held handle whose entry is failed or closed, or any handle of a
//     Teardown: release it first, then acquire again (the old view must
//     leave the registry before a new one fills it);
//   - a held handle with the desired identity: refresh its metadata
//     ([pool.Handle.RefreshMetadata]); an equal metadata key changes nothing
//     at all, a different key replays the entry's current snapshot;
//   - a binding the session no longer wants (server removed, disabled for
//     the session, dropped from its server list, or the session removed):
//     release it.
//
// Identities are compared as captured by the entry when it was created,
// never by the entry's lifecycle id (an unpooled entry's id is
// "NAME::unpooled-N", which never equals a fingerprint), and never by
// comparing config references: the desired side is compared by contents,
// against private copies, so a config mutated in place is seen as changed
// where it did change.
//
// # Transport changes: make before break
//
// A binding whose server's transport changed (anything in its identity:
// command, args, env, cwd, url, headers, timeout, ...) while it holds a
// live connection keeps that connection serving until the new one is
// ready. The bindings moving to one pooled transport move together (an
// unpooled one each on its own):
//
//  1. their new settings, if any, are applied at once on the running
//     connection ([pool.Handle.RefreshMetadata]), whatever becomes of the
//     new one;
//  2. the new connection is made ([pool.Pool.Standby]): started,
//     initialized and listed within the server's timeout, while the
//     running one serves; [BindingState.Pending] shows it meanwhile;
//  3. each binding's view moves onto it ([pool.Standby.Move]): the view
//     keeps its registrations and the new snapshot is applied over them
//     as a diff, so a session is told (list_changed) only what differs;
//     the new handle is published (calls go there from then on), and the
//     old handle is released, the last release closing the old connection
//     once the calls under way on it are answered.
//
// If the new connection cannot be made (it cannot start, its handshake or
// listing fails or times out), the bindings keep their running connections
// and what they show, and the failure is recorded for each binding
// (wrapping [ErrTransportNotChanged]), for the server in
// [Summary.TransportChanges], and in [BindingState.SwitchError], while
// [BindingState.Desired] names the transport asked for and
// [BindingState.Identity] the one running. The running transport stays in
// effect until a later reconciling call makes the change (every later
// Apply tries it again) or takes it back (the binding is then settled as
// it is, with no reconnect); a Repair, Teardown or Restart meanwhile
// reconnects the running transport, not the one that failed.
//
// Reconciling calls are serialised, and Apply waits for the connections
// it makes: an Apply asked for during a transport change runs after it
// and supersedes it, moving the server on, back, or removing it. The
// same holds for overlays (PutOverlay, DeleteOverlay).
//
// # A reload's cost follows what changed
//
// Apply keeps a private copy of what each session contributes (its server
// list and overrides) and of what each server contributes (transport
// identity, settings, Disabled), and the desired bindings derived from
// them. Each session's overrides are compared with its copy; where only
// override values changed, the copy is brought in line in place, and the
// session's changed desired bindings are told by the distinct pairs of old
// and new settings objects they move between (copies are shared by
// content, so a reload handles each distinct override once, not each
// binding). A session with another server list or other overridden
// servers, or new to the reconciler, is rebuilt in full; a server whose
// input changed gets new desired bindings in every session.
//
// While nothing may have broken since the last Apply began (no view failed
// closed and no entry turned terminal, as counted by
// churn.Counters.Failures, and no reconciling call recorded an error),
// every binding is known healthy and settled on its desired binding, so
// only changed ones get work: a session whose desired bindings did not
// change gets none, and bindings whose settings moved to settings the
// policy gives the same key (each distinct new settings object of the
// reload canonicalized once, in calls made while the overrides are still
// being compared), on the same transport, are settled by
// that pair alone, without a look at their handles or views. Those views
// keep their bytes, which mean the same under the current policy; the
// desired binding holds the new bytes, which [Reconciler.SetPolicy] hands
// to each view ([view.View.SetPolicyWith]), since another policy may tell
// them apart. Otherwise (or when nothing is known) each binding is
// checked, so a failure in the background is still repaired by the next
// reload: a healthy view whose new settings got the key it already has
// takes the new bytes there and then ([view.View.AdoptSettings]), with no
// further work. Bindings that do change are refreshed together, and the
// projections the refreshed views will need are computed in batched
// project_batch calls ([view.Prefill]) before the views ask for them.
//
// Apply keeps going when one binding fails: its error is recorded in the
// [Summary] (naming session and server) and in [Reconciler.State]; a failed
// acquire leaves the binding absent and the next Apply (or Teardown) tries
// again. Within one call, acquires and refreshes run before the releases of
// unwanted bindings, so a transport moving from one session to another is
// joined before it could be closed.
//
// # Runtime overlays
//
// [Reconciler.PutOverlay] adds or replaces one server for one session at run
// time. The overlay entry replaces the file's entry of the same name for
// that session only, as is: its transport fields, its metadata settings and
// its Disabled flag are the session's effective values (the session's file
// overrides and server list do not apply to it). Overlays survive later
// Apply calls until [Reconciler.DeleteOverlay] removes them, after which the
// file's entry (if the session uses one) takes over. The overlay follows the
// same rules as Apply: same identity refreshes, another identity
// reacquires, a new server acquires. Overlays of a session that a later
// Apply removes are dropped with the session. [Reconciler.CheckOverlay] and
// [Reconciler.CheckDeleteOverlay] ask the running policy, before a put or a
// delete, about the settings it would bring in force, as [Reconciler.Check]
// does for a config (which does not ask about the file's settings of a
// server an overlay replaces).
//
// # Approval, restart, policy swap
//
// wasmhost's config has no approval concept of its own. An embedder that
// gates servers behind an approval calls [Reconciler.Teardown] when an
// approval changes: it releases the binding and acquires it afresh (the
// teardown behaviour approval changes always had). [Reconciler.Restart]
// restarts every entry held for a server ([pool.Entry.Restart]): handles
// and views stay, the restart's fan-out replays the rediscovered snapshot.
// [Reconciler.SetPolicy] re-keys every view with a new policy at once, on
// its binding's desired settings ([view.View.SetPolicyWith]), with one
// canonicalize call and batched projections; no transport is touched.
//
// # Concurrency
//
// A Reconciler is safe for concurrent use. Apply, SetPolicy, PutOverlay,
// DeleteOverlay, Restart, Teardown and Close are serialised with one
// another; the read accessors (Handle, State, Bindings, Policy) never wait
// for them and see each binding either before or after its change.
package reconcile
