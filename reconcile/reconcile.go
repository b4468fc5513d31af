package reconcile

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/internal/churn"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
)

// Errors returned by the reconcilers, wrapped with the session or server
// they concern; test them with errors.Is.
var (
	// ErrClosed is returned by every mutating method after Close.
	ErrClosed = errors.New("reconciler closed")
	// ErrUnknownSession is returned by PutOverlay, DeleteOverlay and
	// Teardown for a session that the last applied config does not have
	// (or before the first Apply).
	ErrUnknownSession = errors.New("unknown session")
	// ErrNotBound is returned by Teardown for a server the session does
	// not use, and by Restart for a server no session holds.
	ErrNotBound = errors.New("no binding for server")
	// ErrNoOverlay is returned by DeleteOverlay when the session has no
	// overlay for the server.
	ErrNoOverlay = errors.New("no runtime overlay for server")
	// ErrTransportNotChanged is recorded for a binding whose server's
	// transport changed when the new connection could not be made: the
	// binding keeps its running connection, and the next reconciling call
	// tries again.
	ErrTransportNotChanged = errors.New("transport change not made")
)

// maxParallel bounds how many bindings one call works on at once.
const maxParallel = 8

// Options configure a Reconciler.
type Options struct {
	// Pool shares the upstream connections. Required. The Reconciler does
	// not close it.
	Pool *pool.Pool
	// Policy is the initial policy for every view. Required.
	Policy abi.Policy
	// Registry returns the registry of a session. It is called once when a
	// session first appears in an applied config (again if the session is
	// removed and comes back), outside the read accessors' lock; the
	// returned registry must be non-nil and safe for concurrent use.
	// Required.
	Registry func(session string) view.Registry
	// Counters receives the views' churn; nil means Pool.Counters(), which
	// is what it should be so that Summary counts are complete.
	Counters *churn.Counters
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// A Reconciler holds the bindings of every session of a daemon and brings
// them in line with the desired settings. See the package documentation.
type Reconciler struct {
	pool     *pool.Pool
	registry func(session string) view.Registry
	counters *churn.Counters
	log      *slog.Logger

	// mu serialises the mutating methods.
	mu     sync.Mutex
	closed bool
	// servers and inputs are what the last Apply knew of the config's
	// servers and sessions, and the wants it derived (see wants): inputs
	// has every session of the last applied config.
	servers  map[string]*serverInput
	inputs   map[string]*sessionInput
	overlays map[string]map[string]*want // runtime overlays: session -> server
	// mark is the HealthEpoch when the last Apply began. While the epoch
	// has not moved, every binding is known to be healthy, on the transport
	// its desired want names and with a view keyed as its desired settings
	// are (see Apply).
	mark int64
	// errs counts the binding errors reconciling calls recorded.
	errs atomic.Int64

	// smu guards what the read accessors look at. Mutators hold mu and take
	// smu only to write.
	smu      sync.RWMutex
	policy   abi.Policy
	keys     *keyMemo // policy as the views use it
	sessions map[string]*session
	// held counts the bindings holding a handle on each entry.
	held map[*pool.Entry]int
}

// A want is the desired binding of one server in one session, computed
// (and copied) when the desired settings were given. It is never modified,
// and is shared by the sessions that want the same (see builder).
type want struct {
	spec     *pool.Spec // shared with the server's input
	identity string
	// settings is a JSON object, never empty (config.Settings.JSON), so it
	// is what the view sends to the policy, byte for byte.
	settings json.RawMessage
	disabled bool // overlays only: the overlay disables the server
	overlay  bool
}

func newWant(srv *config.Server, settings json.RawMessage, overlay bool) *want {
	spec := SpecOf(srv)
	return &want{
		spec:     &spec,
		identity: spec.Fingerprint(),
		settings: slices.Clone(settings),
		disabled: srv.Disabled,
		overlay:  overlay,
	}
}

// A binding is what one session holds for one server. It is replaced, never
// modified, once published in session.bindings. Its handle captured
// want.identity, and its view holds want.settings or settings of the same
// key; the desired want may since have moved to other settings of that key
// (see adopter).
type binding struct {
	handle *pool.Handle // nil when the last acquire failed
	want   *want
	err    error // why handle is nil
	// switchErr is set while handle serves another transport than want's:
	// errSwitching while a reconciling call makes want's connection, then
	// why it could not (see switchOver). The binding is then not settled,
	// so the next reconciling call tries again.
	switchErr error
}

// A session is one session's registry and bindings.
type session struct {
	name     string
	reg      *trackedRegistry
	bindings map[string]*binding // guarded by Reconciler.smu
}

// New returns a Reconciler with no bindings. It panics if Pool, Policy or
// Registry is nil.
func New(opts Options) *Reconciler {
	if opts.Pool == nil || opts.Policy == nil || opts.Registry == nil {
		panic("reconcile.New: Pool, Policy and Registry are required")
	}
	r := &Reconciler{
		pool:     opts.Pool,
		registry: opts.Registry,
		counters: opts.Counters,
		log:      opts.Logger,
		overlays: make(map[string]map[string]*want),
		servers:  make(map[string]*serverInput),
		inputs:   make(map[string]*sessionInput),
		policy:   opts.Policy,
		keys:     newKeyMemo(opts.Policy),
		sessions: make(map[string]*session),
		held:     make(map[*pool.Entry]int),
	}
	if r.counters == nil {
		r.counters = opts.Pool.Counters()
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	return r
}

// Apply brings every binding in line with cfg (and the runtime overlays):
// it acquires what is missing, reacquires what changed transport, refreshes
// the metadata of what kept its transport, and releases what is no longer
// wanted, as described in the package documentation. Bindings are handled
// independently: a failure of one is recorded in the Summary (and in the
// returned error, which joins them) and the others go on. Apply reads cfg
// only during the call; it keeps private copies.
func (r *Reconciler) Apply(ctx context.Context, cfg *config.Config) (Summary, error) {
	if cfg == nil {
		return Summary{}, errors.New("reconcile: apply: nil config")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return Summary{}, fmt.Errorf("reconcile: apply %s: %w", cfg.File, ErrClosed)
	}
	o := r.begin()

	// If the health epoch did not move since the last Apply began, that
	// Apply left every binding it did not converge healthy, and the ones
	// it converged succeeded (as did every reconciling call since): each
	// binding is settled on its desired want, so only the wants this
	// reload changes can need work (see planChanges).
	mark := r.HealthEpoch()
	trusted := mark == r.mark
	r.mark = mark

	// The settings objects this reload builds are canonicalized while it
	// builds them (see ahead), so that planning can settle the refreshes
	// they leave equivalent on the spot (see adopter).
	keys := r.viewPolicy()
	early := startAhead(ctx, keys)
	deltas, fresh := r.wants(cfg, early.add)
	early.wait()
	for name := range r.overlays {
		if _, ok := r.inputs[name]; !ok {
			delete(r.overlays, name)
		}
	}

	ad := r.newAdopter(o, keys, trusted)
	var tasks []task
	for _, name := range slices.Sorted(maps.Keys(deltas)) {
		d := deltas[name]
		if s := r.sessions[name]; trusted && s != nil && !d.rebuilt {
			// Only the changed wants can need work.
			tasks = r.planChanges(tasks, s, name, d, ad)
			continue
		}
		s, err := r.sessionFor(name)
		if err != nil {
			for _, server := range slices.Sorted(maps.Keys(r.desired(name))) {
				o.fail(name, server, err)
			}
			continue
		}
		tasks = r.plan(tasks, s, name, ad)
	}
	var removed []*session
	for name, s := range r.sessions {
		if _, ok := r.inputs[name]; !ok {
			removed = append(removed, s)
			tasks = append(tasks, r.planRelease(s)...)
		}
	}
	r.warmKeys(ctx, keys, tasks, fresh)
	tasks, items := r.adopt(ad, tasks)
	r.prefill(ctx, keys, items)
	r.run(ctx, o, tasks)
	if len(removed) > 0 {
		r.smu.Lock()
		for _, s := range removed {
			delete(r.sessions, s.name)
		}
		r.smu.Unlock()
	}
	return o.finish()
}

// SetPolicy makes p the policy of every view, re-keying and re-projecting
// each held view with it at once, on its binding's desired settings
// ([view.View.SetPolicyWith]); later acquires use p too. No transport is
// touched. A view whose policy call fails fails closed; its error is in
// the Summary. Summary.Refreshed counts the views re-keyed.
func (r *Reconciler) SetPolicy(ctx context.Context, p abi.Policy) (Summary, error) {
	if p == nil {
		return Summary{}, errors.New("reconcile: set policy: nil policy")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return Summary{}, fmt.Errorf("reconcile: set policy: %w", ErrClosed)
	}
	o := r.begin()
	keys := newKeyMemo(p)
	r.smu.Lock()
	r.policy = p
	r.keys = keys
	r.smu.Unlock()
	// A binding's desired want holds the newest settings: its view may
	// hold older bytes of the same meaning under the old policy (see
	// adopter), which p may tell apart. Each view gets the desired
	// settings, and its binding the desired want.
	var hs []*pool.Handle
	var settings []json.RawMessage
	var rebound []adoption
	for name, s := range r.sessions {
		for server, b := range s.bindings {
			if b.handle == nil {
				continue
			}
			w := b.want
			if d := r.wantOf(name, server); d != nil && d != w && d.identity == w.identity {
				w = d
				rebound = append(rebound, adoption{s: s, server: server, b: binding{handle: b.handle, want: w}})
			}
			hs = append(hs, b.handle)
			settings = append(settings, w.settings)
		}
	}
	r.publish(rebound)
	// Every view re-keys and re-projects under p: one canonicalize call for
	// the distinct settings and batched projections, as in Apply.
	keys.warm(ctx, distinct(settings))
	var items []view.PrefillItem
	for i, h := range hs {
		if key, ok := keys.lookup(settings[i]); ok && !h.Released() {
			items = append(items, prefillItem(h, key, settings[i]))
		}
	}
	r.prefill(ctx, keys, items)
	parallel(len(hs), func(i int) {
		o.count(&o.sum.Refreshed)
		v := view.Of(hs[i])
		if err := v.SetPolicyWith(ctx, keys, settings[i]); err != nil {
			o.fail(v.Session(), v.Server(), err)
		}
	})
	return o.finish()
}

// PutOverlay adds or replaces, for session only, the server srv.Name with
// srv (copied), layered over the file config until DeleteOverlay; srv's
// settings and Disabled flag are the session's effective values. The
// binding is then reconciled at once: the same transport identity refreshes
// the held handle, another identity releases and reacquires, a new server
// acquires, a disabled one releases. It returns ErrUnknownSession for a
// session the last applied config lacks; an overlay whose transport is
// invalid (and which is not disabled) is refused with pool.ErrInvalidSpec
// and not stored. A failure to acquire is reported like Apply's, and the
// overlay stays for the next Apply to retry.
func (r *Reconciler) PutOverlay(ctx context.Context, sessionName string, srv *config.Server) (Summary, error) {
	if srv == nil || srv.Name == "" {
		return Summary{}, fmt.Errorf("reconcile: put overlay for session %q: server without a name", sessionName)
	}
	srv = srv.Clone()
	if !srv.Disabled {
		if err := SpecOf(srv).Validate(); err != nil {
			return Summary{}, fmt.Errorf("reconcile: put overlay for session %q: %w", sessionName, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return Summary{}, fmt.Errorf("reconcile: put overlay %q for session %q: %w", srv.Name, sessionName, ErrClosed)
	}
	if _, ok := r.inputs[sessionName]; !ok {
		return Summary{}, fmt.Errorf("reconcile: put overlay %q: session %q: %w", srv.Name, sessionName, ErrUnknownSession)
	}
	if r.overlays[sessionName] == nil {
		r.overlays[sessionName] = make(map[string]*want)
	}
	r.overlays[sessionName][srv.Name] = newWant(srv, srv.Metadata(), true)
	return r.reconcileOne(ctx, sessionName, srv.Name)
}

// DeleteOverlay removes session's runtime overlay for server and reconciles
// the binding against the file config: the file's entry, if the session
// uses one, takes over (refresh or reacquire as in Apply); otherwise the
// binding is released. It returns ErrNoOverlay if there is no such overlay.
func (r *Reconciler) DeleteOverlay(ctx context.Context, sessionName, server string) (Summary, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return Summary{}, fmt.Errorf("reconcile: delete overlay %q for session %q: %w", server, sessionName, ErrClosed)
	}
	if _, ok := r.overlays[sessionName][server]; !ok {
		return Summary{}, fmt.Errorf("reconcile: delete overlay %q for session %q: %w", server, sessionName, ErrNoOverlay)
	}
	delete(r.overlays[sessionName], server)
	if len(r.overlays[sessionName]) == 0 {
		delete(r.overlays, sessionName)
	}
	return r.reconcileOne(ctx, sessionName, server)
}

// reconcileOne converges one binding. r.mu is held.
func (r *Reconciler) reconcileOne(ctx context.Context, sessionName, server string) (Summary, error) {
	o := r.begin()
	w := r.wantOf(sessionName, server)
	s, err := r.sessionFor(sessionName)
	if err != nil {
		o.fail(sessionName, server, err)
		return o.finish()
	}
	cur := s.bindings[server]
	if settled(cur, w) {
		// Nothing to converge; the binding takes w (an overlay's, say).
		r.setBinding(s, server, &binding{handle: cur.handle, want: w})
		return o.finish()
	}
	r.run(ctx, o, []task{{s: s, server: server, cur: cur, want: w}})
	return o.finish()
}

// Restart restarts every connection held for server, in every session
// ([pool.Entry.Restart]): handles and views stay, and the restart's
// fan-out replays the rediscovered snapshot into each view with its current
// settings. Bindings without a live connection (a failed acquire, a failed
// entry, or a restart that failed to reconnect) are released and acquired
// afresh instead. It returns ErrNotBound if no session wants the server,
// and otherwise the joined failures.
func (r *Reconciler) Restart(ctx context.Context, server string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("reconcile: restart %q: %w", server, ErrClosed)
	}
	o := r.begin()
	byEntry := make(map[*pool.Entry][]task)
	var reacquire []task
	for _, name := range slices.Sorted(maps.Keys(r.sessions)) {
		s := r.sessions[name]
		w := r.wantOf(name, server)
		if w == nil {
			continue
		}
		t := task{s: s, server: server, cur: s.bindings[server], want: w, force: true}
		if t.cur == nil || t.cur.handle == nil || t.cur.handle.Entry().State().Terminal() {
			reacquire = append(reacquire, t)
			continue
		}
		e := t.cur.handle.Entry()
		byEntry[e] = append(byEntry[e], t)
	}
	if len(byEntry) == 0 && len(reacquire) == 0 {
		return fmt.Errorf("reconcile: restart %q: %w", server, ErrNotBound)
	}
	entries := slices.Collect(maps.Keys(byEntry))
	var mu sync.Mutex
	parallel(len(entries), func(i int) {
		e := entries[i]
		err := e.Restart(ctx)
		if err == nil {
			return
		}
		for _, t := range byEntry[e] {
			o.fail(t.s.name, server, err)
		}
		if errors.Is(err, pool.ErrTerminal) {
			mu.Lock()
			reacquire = append(reacquire, byEntry[e]...)
			mu.Unlock()
		}
	})
	r.run(ctx, o, reacquire)
	_, err := o.finish()
	return err
}

// Teardown releases session's binding for server and acquires it afresh
// with the desired settings: the transport teardown an approval change has
// always caused. wasmhost's config has no approval concept of its own;
// Teardown is the hook for an embedder that has one. A pooled connection
// that other sessions still hold stays up (this session rejoins it); one
// held by this session alone is closed and reconnected. It returns
// ErrUnknownSession or ErrNotBound when the session does not want the
// server, and the acquire's failure (the binding then stays absent until the
// next Apply or Teardown).
func (r *Reconciler) Teardown(ctx context.Context, sessionName, server string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.teardown(ctx, sessionName, server)
}

// teardown is Teardown with r.mu held.
func (r *Reconciler) teardown(ctx context.Context, sessionName, server string) error {
	if r.closed {
		return fmt.Errorf("reconcile: teardown %q for session %q: %w", server, sessionName, ErrClosed)
	}
	if _, ok := r.inputs[sessionName]; !ok {
		return fmt.Errorf("reconcile: teardown %q: session %q: %w", server, sessionName, ErrUnknownSession)
	}
	w := r.wantOf(sessionName, server)
	if w == nil {
		return fmt.Errorf("reconcile: teardown: session %q, server %q: %w", sessionName, server, ErrNotBound)
	}
	o := r.begin()
	s, err := r.sessionFor(sessionName)
	if err != nil {
		return fmt.Errorf("reconcile: teardown: %w", &BindingError{sessionName, server, err})
	}
	r.run(ctx, o, []task{{s: s, server: server, cur: s.bindings[server], want: w, force: true}})
	_, err = o.finish()
	return err
}

// Repair is Teardown for a binding that is still unhealthy once the
// reconciler is free: one whose last acquire failed, or whose entry failed
// or closed. A binding whose connection is up but whose view failed closed
// (a policy failure, which may have passed) is projected again in place,
// as the next Apply would, without reconnecting. A binding that a
// reconciling call made healthy while Repair waited for it (a reload that
// replaced its connection, say) is left as it is, and Repair returns
// false. Otherwise it returns true and what Teardown (or the projection)
// returns. A supervisor retries through Repair, so that its retry never
// tears down the connection a reload has just made.
func (r *Reconciler) Repair(ctx context.Context, sessionName, server string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.sessions[sessionName]; s != nil && !r.closed {
		if b := s.bindings[server]; b != nil && b.handle != nil && !b.handle.Entry().State().Terminal() {
			w := r.wantOf(sessionName, server)
			if view.Of(b.handle).Err() == nil || w == nil || b.handle.Identity() != w.identity {
				return false, nil
			}
			o := r.begin()
			r.run(ctx, o, []task{{s: s, server: server, cur: b, want: w}})
			_, err := o.finish()
			return true, err
		}
	}
	return true, r.teardown(ctx, sessionName, server)
}

// errReacquiring is the error of a binding while a reconciling call
// replaces its connection (BindingState.Pending).
var errReacquiring = errors.New("reacquiring")

// errSwitching is the switchErr of a binding while a reconciling call makes
// the connection of its changed transport (BindingState.Pending).
var errSwitching = errors.New("changing transport")

// Handle returns the handle session holds for server, or nil if none (not
// wanted, or the last acquire failed). The handle may be released by a
// later reconciling call; fetch it for each use.
func (r *Reconciler) Handle(sessionName, server string) *pool.Handle {
	if b := r.bindingOf(sessionName, server); b != nil {
		return b.handle
	}
	return nil
}

// bindingOf returns session's binding of server, or nil.
func (r *Reconciler) bindingOf(sessionName, server string) *binding {
	r.smu.RLock()
	defer r.smu.RUnlock()
	if s := r.sessions[sessionName]; s != nil {
		return s.bindings[server]
	}
	return nil
}

// Down says why session's binding of server shows the session nothing, in
// words for the session's clients (no error text, which is the operator's:
// the log and State have it): "" when the session has no binding of
// server, or a healthy one.
func (r *Reconciler) Down(sessionName, server string) string {
	b := r.bindingOf(sessionName, server)
	switch {
	case b == nil:
		return ""
	case b.handle == nil && b.err == errReacquiring:
		return "reconnecting; try again"
	case b.handle == nil:
		return "unavailable: it could not be reached (retried in the background)"
	}
	switch st := b.handle.Entry().Info().State; st {
	case pool.StateFailed, pool.StateClosed:
		return "unavailable: its connection failed"
	case pool.StateConnecting, pool.StateRestarting:
		return "reconnecting; try again"
	case pool.StateReady:
	default:
		panic(fmt.Sprintf("reconcile: unknown entry state %d", st))
	}
	if view.Of(b.handle).Err() != nil {
		return "unavailable to this session: the policy could not compute its view"
	}
	return ""
}

// Policy returns the current policy.
func (r *Reconciler) Policy() abi.Policy {
	r.smu.RLock()
	defer r.smu.RUnlock()
	return r.policy
}

// viewPolicy returns the current policy as views use it: with its
// canonicalize results remembered (see keyMemo).
func (r *Reconciler) viewPolicy() *keyMemo {
	r.smu.RLock()
	defer r.smu.RUnlock()
	return r.keys
}

// warmKeys canonicalizes with keys, in one policy call, the distinct
// settings of the tasks that keep or gain a binding and that keys has not
// seen, so that the views' own key computations are answered from memory.
// Settings with the contents of those in warmed were canonicalized already
// in this call: those keys lacks were refused, and are left to the views,
// whose errors are then the policy's own. r.mu is held.
func (r *Reconciler) warmKeys(ctx context.Context, keys *keyMemo, tasks []task, warmed []json.RawMessage) {
	var settings []json.RawMessage
	for _, t := range tasks {
		if t.want != nil {
			settings = append(settings, t.want.settings)
		}
	}
	settings = distinct(settings)
	if len(settings) == 0 {
		return
	}
	done := make(map[string]bool, len(warmed))
	for _, s := range warmed {
		done[string(s)] = true
	}
	keys.warm(ctx, slices.DeleteFunc(settings, func(s json.RawMessage) bool { return done[string(s)] }))
}

// distinct returns settings without repeated settings objects, told apart
// by address: wants share the bytes of equal settings (see builder), and
// keyMemo.warm drops the remaining repeats by contents.
func distinct(settings []json.RawMessage) []json.RawMessage {
	seen := make(map[bytesAt]bool)
	out := settings[:0:0]
	for _, s := range settings {
		if len(s) == 0 {
			out = append(out, s)
			continue
		}
		if at := addr(s); !seen[at] {
			seen[at] = true
			out = append(out, s)
		}
	}
	return out
}

// prefillItem is the projection h's view is about to ask its entry's memo
// for when it re-keys to key with settings.
func prefillItem(h *pool.Handle, key string, settings json.RawMessage) view.PrefillItem {
	e := h.Entry()
	return view.PrefillItem{Memo: view.MemoOf(e), Key: key, Settings: settings, Snap: e.Snapshot()}
}

// prefill computes items in batched policy calls (view.Prefill), when the
// policy of keys can batch, and leaves them in their memos for the views
// about to re-project under keys; anything left out projects as usual.
// r.mu is held.
func (r *Reconciler) prefill(ctx context.Context, keys *keyMemo, items []view.PrefillItem) {
	bp, ok := keys.Policy.(abi.BatchProjector)
	if !ok {
		return
	}
	if err := view.Prefill(ctx, keys, bp, r.counters, items); err != nil {
		r.log.Debug("batched projection failed; views project one by one", "err", err)
	}
}

// Sessions returns the names of the sessions of the last applied config,
// sorted.
func (r *Reconciler) Sessions() []string {
	r.smu.RLock()
	defer r.smu.RUnlock()
	return slices.Sorted(maps.Keys(r.sessions))
}

// Bindings describes session's bindings, sorted by server; nil for an
// unknown session.
func (r *Reconciler) Bindings(sessionName string) []BindingState {
	r.smu.RLock()
	s := r.sessions[sessionName]
	var bs map[string]*binding
	if s != nil {
		bs = maps.Clone(s.bindings)
	}
	r.smu.RUnlock()
	if s == nil {
		return nil
	}
	return describe(bs)
}

// State describes every session's bindings, sessions sorted by name.
func (r *Reconciler) State() State {
	r.smu.RLock()
	p := r.policy
	all := make(map[string]map[string]*binding, len(r.sessions))
	for name, s := range r.sessions {
		all[name] = maps.Clone(s.bindings)
	}
	r.smu.RUnlock()
	st := State{Policy: policyName(p), Sessions: []SessionState{}}
	for _, name := range slices.Sorted(maps.Keys(all)) {
		st.Sessions = append(st.Sessions, SessionState{Name: name, Servers: describe(all[name])})
	}
	return st
}

// Close releases every handle (deleting the views' registrations) and
// makes later mutating calls fail with ErrClosed. It does not close the
// pool. It returns the joined release failures.
func (r *Reconciler) Close(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	o := r.begin()
	var tasks []task
	for _, s := range r.sessions {
		tasks = append(tasks, r.planRelease(s)...)
	}
	r.run(ctx, o, tasks)
	r.smu.Lock()
	clear(r.sessions)
	r.smu.Unlock()
	_, err := o.finish()
	return err
}

// desired returns session's desired bindings: the file's, with the
// overlays layered over them (a disabled overlay removes the server).
// r.mu is held.
func (r *Reconciler) desired(sessionName string) map[string]*want {
	si, overlays := r.inputs[sessionName], r.overlays[sessionName]
	out := make(map[string]*want)
	if si != nil {
		for server, c := range si.cells {
			if w := c.want(); w != nil {
				out[server] = w
			}
		}
	}
	for server, w := range overlays {
		if w.disabled {
			delete(out, server)
		} else {
			out[server] = w
		}
	}
	return out
}

// wantOf returns session's desired binding of server, as desired would
// have it, or nil. r.mu is held.
func (r *Reconciler) wantOf(sessionName, server string) *want {
	return layered(r.inputs[sessionName], r.overlays[sessionName], server)
}

// layered returns the desired binding of server for a session whose input
// (nil: none) and overlays are si and overlays: the overlay's, if any (nil
// if it disables the server), else the file's.
func layered(si *sessionInput, overlays map[string]*want, server string) *want {
	if w, ok := overlays[server]; ok {
		if w.disabled {
			return nil
		}
		return w
	}
	if si == nil {
		return nil
	}
	return si.want(server)
}

// sessionFor returns the session named name, creating it (and asking for
// its registry) if needed. r.mu is held.
func (r *Reconciler) sessionFor(name string) (*session, error) {
	if s := r.sessions[name]; s != nil {
		return s, nil
	}
	reg := r.registry(name)
	if reg == nil {
		return nil, errors.New("no registry for the session")
	}
	s := &session{name: name, reg: &trackedRegistry{inner: reg}, bindings: make(map[string]*binding)}
	r.smu.Lock()
	r.sessions[name] = s
	r.smu.Unlock()
	return s, nil
}

// A task converges one binding from cur to want (nil: not wanted). force
// reacquires even when the identity matches.
type task struct {
	s      *session
	server string
	cur    *binding
	want   *want
	force  bool
}

// HealthEpoch returns a number that moves whenever a binding may have
// become unhealthy: a view failed closed or was withdrawn, an entry turned
// failed or closed (both counted in churn.Counters.Failures), or a
// reconciling call recorded a binding error (a failed acquire, refresh,
// release or teardown). While it stays the same, no binding that was
// healthy has turned unhealthy, so a supervisor that found nothing to
// repair need not look again. It is safe to call at any time.
func (r *Reconciler) HealthEpoch() int64 {
	n := r.counters.Failures.Load() + r.errs.Load()
	if c := r.pool.Counters(); c != r.counters {
		n += c.Failures.Load()
	}
	return n
}

// planRelease lists the tasks releasing every binding of s. r.mu is held.
func (r *Reconciler) planRelease(s *session) []task {
	tasks := make([]task, 0, len(s.bindings))
	for server, cur := range s.bindings {
		tasks = append(tasks, task{s: s, server: server, cur: cur})
	}
	return tasks
}

// plan appends to tasks those bringing s to what session name desires
// (see wantOf), read in place rather than copied. A binding already
// settled on its desired want needs no task, so a session that did not
// change costs a lookup and a health check per binding (a lookup alone
// while ad trusts the bindings); nor does a refresh that ad adopts, which
// plan publishes. r.mu is held.
func (r *Reconciler) plan(tasks []task, s *session, name string, ad *adopter) []task {
	defer ad.flush()
	si, overlays := r.inputs[name], r.overlays[name]
	if si != nil {
		for server := range si.cells {
			tasks = r.consider(tasks, s, server, si, overlays, ad)
		}
	}
	for server := range overlays {
		if si == nil || si.cells[server] == nil {
			tasks = r.consider(tasks, s, server, si, overlays, ad)
		}
	}
	for server := range s.bindings {
		_, overlaid := overlays[server]
		if !overlaid && (si == nil || si.cells[server] == nil) {
			tasks = r.consider(tasks, s, server, si, overlays, ad)
		}
	}
	return tasks
}

// consider appends to tasks the one bringing s's binding of server to what
// si and overlays desire, unless it is settled or ad adopts it. r.mu is
// held.
func (r *Reconciler) consider(tasks []task, s *session, server string, si *sessionInput, overlays map[string]*want, ad *adopter) []task {
	cur, w := s.bindings[server], layered(si, overlays, server)
	if (cur != nil || w != nil) && !ad.settle(s, server, cur, w) {
		tasks = append(tasks, task{s: s, server: server, cur: cur, want: w})
	}
	return tasks
}

// planChanges is plan for a session whose bindings ad trusts and whose
// desired wants changed only as d says. Wants whose settings moved to
// settings of the same key, the transport staying the same, are settled
// per distinct pair of settings objects (adopter.equivalentSettings), with
// no look at their bindings: each binding was settled on the old want (or
// on one of the same key) and so is on the new one (see adopter). If a
// pair changes keys, the session is planned in full; the servers of d are
// considered one by one. r.mu is held.
func (r *Reconciler) planChanges(tasks []task, s *session, name string, d delta, ad *adopter) []task {
	kept := 0
	for _, p := range d.pairs {
		switch ad.equivalentSettings(p.old, p.new) {
		case sameBytes:
		case sameKey:
			kept += p.n
		default:
			return r.plan(tasks, s, name, ad)
		}
	}
	defer ad.flush()
	ad.keep(kept)
	si, overlays := r.inputs[name], r.overlays[name]
	for _, server := range d.servers {
		tasks = r.consider(tasks, s, server, si, overlays, ad)
	}
	return tasks
}

// wants brings r.servers and r.inputs in line with cfg and returns, for
// each session of cfg, what changed in its desired bindings. Work follows
// what changed since the last Apply: each server's input is computed once;
// each session's overrides are compared with its private copy, which is
// updated in place where only override values changed (the delta tells
// the changed wants by the pairs of settings objects they move between,
// and the wants themselves are made when first needed); a session with
// another server list or other overridden servers is rebuilt in full; a
// server whose input changed (or that appeared or vanished) gets new wants
// in every session. A session override changes settings and Disabled
// only, never the transport, so a want is a function of the server's input
// and the session's override: the sessions built in one reload share the
// want of each distinct pair, and equal settings objects share their bytes
// (see builder). fresh lists the distinct settings objects this reload
// made, which the policy may not know; made, when not nil, is told of
// each as it is made. r.mu is held.
func (r *Reconciler) wants(cfg *config.Config, made func(json.RawMessage)) (deltas map[string]delta, fresh []json.RawMessage) {
	b := newBuilder()
	b.made = made
	for name, srv := range cfg.Servers {
		in, same := b.server(r.servers[name], srv)
		b.servers[name] = in
		if !same {
			b.changed = append(b.changed, name)
		}
	}
	for name := range r.servers {
		if _, ok := b.servers[name]; !ok {
			b.changed = append(b.changed, name)
		}
	}
	for _, name := range b.changed {
		b.moved[name] = true
	}
	deltas = make(map[string]delta, len(cfg.Sessions))
	inputs := make(map[string]*sessionInput, len(cfg.Sessions))
	for name, sess := range cfg.Sessions {
		if sess == nil {
			continue
		}
		inputs[name], deltas[name] = b.session(r.inputs[name], sess, r.overlays[name])
	}
	r.servers, r.inputs = b.servers, inputs
	return deltas, b.fresh
}

// run performs tasks: first everything that keeps or gains a binding, then
// the releases, so a transport moving between sessions is joined before its
// last holder lets go. r.mu is held.
func (r *Reconciler) run(ctx context.Context, o *op, tasks []task) {
	slices.SortFunc(tasks, func(a, b task) int {
		return cmp.Or(cmp.Compare(a.s.name, b.s.name), cmp.Compare(a.server, b.server))
	})
	var keep, drop []task
	var moves [][]task
	at := make(map[string]int) // moves of a pooled transport, by identity
	for _, t := range tasks {
		switch {
		case t.want == nil:
			drop = append(drop, t)
		case switching(t):
			// One connection for the sessions that share it (pooled),
			// one each otherwise.
			if i, ok := at[t.want.identity]; ok && t.want.spec.Pooled {
				moves[i] = append(moves[i], t)
				continue
			}
			at[t.want.identity] = len(moves)
			moves = append(moves, []task{t})
		default:
			keep = append(keep, t)
		}
	}
	parallel(len(keep)+len(moves), func(i int) {
		if i < len(keep) {
			r.converge(ctx, o, keep[i])
		} else {
			r.switchOver(ctx, o, moves[i-len(keep)])
		}
	})
	parallel(len(drop), func(i int) { r.converge(ctx, o, drop[i]) })
}

// switching reports whether t moves a binding from a live connection to
// another transport, which switchOver does, make before break.
func switching(t task) bool {
	if t.want == nil || t.force || t.cur == nil || t.cur.handle == nil || t.cur.want == nil {
		return false
	}
	h := t.cur.handle
	return h.Identity() != t.want.identity && !h.Released() && !h.Entry().State().Terminal()
}

// switchOver moves ts, bindings held on live connections whose desired
// transport changed to one transport (ts[0].want's), make before break:
//
//  1. each binding's new settings are applied at once, on the running
//     connection, whatever becomes of the new one;
//  2. the new connection is made (connected, initialized and listed,
//     within the server's timeout) while the running ones serve;
//  3. only then is each binding's view moved onto it (pool.Standby.Move:
//     its sessions are told only what differs), the new handle published
//     (calls go to the new connection from then on) and the old handle
//     released (the last release closes the old connection, once the
//     calls under way on it are answered).
//
// If the new connection cannot be made (or a move fails), the bindings
// keep their running connections and views, with the failure as their
// switchErr, and the failure is recorded for each binding and in
// Summary.TransportChanges. r.mu is held.
func (r *Reconciler) switchOver(ctx context.Context, o *op, ts []task) {
	server := ts[0].server
	live := ts[:0:0]
	for _, t := range ts {
		old := t.cur.handle
		r.setBinding(t.s, t.server, &binding{handle: old, want: t.want, switchErr: errSwitching})
		if bytes.Equal(t.cur.want.settings, t.want.settings) {
			live = append(live, t)
			continue
		}
		o.count(&o.sum.Refreshed)
		_, err := old.RefreshMetadata(ctx, t.want.settings)
		if errors.Is(err, pool.ErrTerminal) || errors.Is(err, pool.ErrReleased) {
			// The running connection went away meanwhile: nothing left
			// to keep serving, so reacquire as usual.
			r.converge(ctx, o, task{s: t.s, server: t.server, cur: &binding{handle: old, want: t.want}, want: t.want})
			continue
		}
		o.fail(t.s.name, t.server, err)
		live = append(live, t)
	}
	if len(live) == 0 {
		return
	}
	failed := func(t task, cause error) {
		err := fmt.Errorf("%w, the running connection keeps serving: %w", ErrTransportNotChanged, cause)
		r.setBinding(t.s, t.server, &binding{handle: t.cur.handle, want: t.want, switchErr: err})
		o.fail(t.s.name, t.server, err)
		o.switched(server, false, cause)
		r.log.Debug("transport change failed", "session", t.s.name, "server", t.server, "err", err)
	}
	sb, err := r.pool.Standby(ctx, *live[0].want.spec)
	if err != nil {
		for _, t := range live {
			failed(t, err)
		}
		return
	}
	defer sb.Release(ctx)
	parallel(len(live), func(i int) {
		t := live[i]
		old := t.cur.handle
		h, err := sb.Move(ctx, old)
		if err != nil {
			failed(t, err)
			return
		}
		o.count(&o.sum.Acquired)
		o.switched(server, true, nil)
		r.setBinding(t.s, t.server, &binding{handle: h, want: t.want})
		r.release(ctx, o, t, old)
		if err := view.Of(h).Err(); err != nil {
			o.fail(t.s.name, t.server, err)
		}
	})
}

// settled reports whether cur already is what w asks for: the same
// captured transport identity, byte-identical settings (compared with the
// private copy Apply kept last time, so settings mutated in place in the
// caller's config still count as changed), a live entry and a view that has
// not failed closed. A refresh of such a binding would compute the same key
// and return, so plan and reconcileOne give it no task: a reload then
// costs in proportion to the bindings that changed, not to all bindings.
func settled(cur *binding, w *want) bool {
	if cur == nil || w == nil || cur.handle == nil || cur.want == nil {
		return false
	}
	h := cur.handle
	return cur.switchErr == nil && h.Identity() == w.identity && bytes.Equal(cur.want.settings, w.settings) &&
		!h.Released() && !h.Entry().State().Terminal() && view.Of(h).Err() == nil
}

// converge performs one task. A forced one (Teardown, Repair, Restart)
// of a binding whose transport change failed reconnects the transport it
// runs, which stays in effect until a reconciling call makes the change
// (see switchOver), and keeps the failure on record.
func (r *Reconciler) converge(ctx context.Context, o *op, t task) {
	var held *pool.Handle
	if t.cur != nil {
		held = t.cur.handle
	}
	if t.want == nil {
		r.setBinding(t.s, t.server, nil)
		r.release(ctx, o, t, held)
		return
	}
	desired, acquire := t.want, t.want
	var switchErr error
	if t.force && held != nil && t.cur.switchErr != nil && t.cur.switchErr != errSwitching && held.Identity() != desired.identity {
		spec := held.Spec()
		acquire = &want{spec: &spec, identity: held.Identity(), settings: desired.settings, overlay: desired.overlay}
		switchErr = t.cur.switchErr
	}
	if held != nil && !t.force && held.Identity() == t.want.identity && !held.Entry().State().Terminal() {
		o.count(&o.sum.Refreshed)
		_, err := held.RefreshMetadata(ctx, t.want.settings)
		if err == nil || !(errors.Is(err, pool.ErrTerminal) || errors.Is(err, pool.ErrReleased)) {
			r.setBinding(t.s, t.server, &binding{handle: held, want: t.want})
			if err != nil {
				o.fail(t.s.name, t.server, err)
			}
			return
		}
		// The entry turned terminal since we looked: replace it.
	}
	if held != nil {
		// Release first: the old view must leave the registry before the
		// new one fills it.
		r.setBinding(t.s, t.server, &binding{want: desired, err: errReacquiring})
		r.release(ctx, o, t, held)
	}
	v := view.New(view.Config{
		Session:  t.s.name,
		Server:   t.server,
		Registry: t.s.reg,
		Counters: r.counters,
		Policy:   r.viewPolicy(),
		Settings: acquire.settings,
		Logger:   r.log,
	})
	h, err := r.pool.Acquire(ctx, *acquire.spec, v)
	if err != nil {
		r.setBinding(t.s, t.server, &binding{want: desired, err: err})
		o.fail(t.s.name, t.server, err)
		// Debug only: the caller reports the error (Apply's and Repair's
		// join it), and the pool has logged why the connection failed.
		r.log.Debug("acquire failed", "session", t.s.name, "server", t.server, "err", err)
		return
	}
	o.count(&o.sum.Acquired)
	r.setBinding(t.s, t.server, &binding{handle: h, want: desired, switchErr: switchErr})
	if err := v.Err(); err != nil {
		o.fail(t.s.name, t.server, err)
	}
}

func (r *Reconciler) release(ctx context.Context, o *op, t task, h *pool.Handle) {
	if h == nil {
		return
	}
	if err := h.Release(ctx); err != nil {
		o.fail(t.s.name, t.server, err)
		return
	}
	o.count(&o.sum.Released)
}

// setBinding publishes b (nil: none) for server in s.
func (r *Reconciler) setBinding(s *session, server string, b *binding) {
	r.smu.Lock()
	defer r.smu.Unlock()
	if old := s.bindings[server]; old != nil && old.handle != nil {
		e := old.handle.Entry()
		if r.held[e]--; r.held[e] <= 0 {
			delete(r.held, e)
		}
	}
	if b == nil {
		delete(s.bindings, server)
		return
	}
	s.bindings[server] = b
	if b.handle != nil {
		r.held[b.handle.Entry()]++
	}
}

// describe turns bindings into sorted BindingStates.
func describe(bs map[string]*binding) []BindingState {
	out := make([]BindingState, 0, len(bs))
	for _, server := range slices.Sorted(maps.Keys(bs)) {
		b := bs[server]
		st := BindingState{Server: server, Desired: b.want.identity, Overlay: b.want.overlay}
		if b.err != nil {
			st.Error = b.err.Error()
			st.Pending = b.err == errReacquiring
		}
		switch {
		case b.switchErr == errSwitching:
			st.Pending = true
		case b.switchErr != nil:
			st.SwitchError = b.switchErr.Error()
		}
		if h := b.handle; h != nil {
			info := h.Entry().Info()
			st.Identity, st.EntryID, st.EntryState = info.Identity, info.ID, info.State.String()
			describeView(&st, view.Of(h))
		}
		out = append(out, st)
	}
	return out
}

// describeView fills the view's part of st.
func describeView(st *BindingState, v *view.View) {
	st.Key = v.Key()
	if err := v.Err(); err != nil && st.Error == "" {
		st.Error = err.Error()
	}
	if p := v.Applied(); p != nil {
		st.Tools, st.Prompts, st.Resources = len(p.Tools), len(p.Prompts), len(p.Resources)
		for _, t := range p.Tools {
			if t.Meta[view.MetaTrust] == true {
				st.Trusted++
			}
		}
	}
}

// A ToolState is one tool a session's view of a server shows, under the
// upstream's name, with the flags the policy gave it for the session.
type ToolState struct {
	Name       string `json:"name"`
	Trust      bool   `json:"trust"`
	AlwaysLoad bool   `json:"alwaysLoad"`
	// UpstreamName is the upstream's own name of a tool the policy
	// renamed to Name; empty otherwise.
	UpstreamName string `json:"upstreamName,omitempty"`
}

// Tools returns the tools session's view of server shows, in the
// upstream's order, under the policy's names (the upstream's, unless the
// policy renamed them, when UpstreamName has the upstream's; the session
// may expose them prefixed). It returns ErrUnknownSession or ErrNotBound when there
// is no such session or binding, and an empty list while the binding
// holds no connection.
func (r *Reconciler) Tools(session, server string) ([]ToolState, error) {
	r.smu.RLock()
	s := r.sessions[session]
	var b *binding
	if s != nil {
		b = s.bindings[server]
	}
	r.smu.RUnlock()
	switch {
	case s == nil:
		return nil, fmt.Errorf("reconcile: session %q: %w", session, ErrUnknownSession)
	case b == nil:
		return nil, fmt.Errorf("reconcile: session %q: server %q: %w", session, server, ErrNotBound)
	}
	out := []ToolState{}
	if b.handle == nil {
		return out, nil
	}
	if p := view.Of(b.handle).Applied(); p != nil {
		for _, t := range p.Tools {
			ts := ToolState{Name: t.Name, Trust: t.Meta[view.MetaTrust] == true, AlwaysLoad: t.Meta[view.MetaAlwaysLoad] == true}
			if up, ok := t.Meta[view.MetaUpstreamName].(string); ok {
				ts.UpstreamName = up
			}
			out = append(out, ts)
		}
	}
	return out, nil
}

func policyName(p abi.Policy) string {
	if p == nil {
		return ""
	}
	hs := p.Handshake()
	return hs.Name + " " + hs.Version
}

// parallel calls f(0..n-1), in that order, with at most maxParallel calls
// at once and returns when all are done. A few workers take the indexes in
// turn, rather than a goroutine per call: a reload of 100,000 bindings
// would otherwise start (and grow the stacks of) 100,000 goroutines.
func parallel(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, maxParallel) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}
