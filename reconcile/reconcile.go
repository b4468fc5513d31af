package reconcile

import (
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
	"github.com/wasmhost/wasmhost/internal/opcount"
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
	// Counters counts the views' work; nil means Pool.Counters(), which
	// is what it should be so that Summary counts are complete.
	Counters *opcount.Counters
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// A Reconciler holds the bindings of every session of a daemon and brings
// them in line with the desired settings. See the package documentation.
type Reconciler struct {
	pool     *pool.Pool
	registry func(session string) view.Registry
	counters *opcount.Counters
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
	return r.setPolicy(ctx, p, nil)
}

// SetPolicyFor is SetPolicy for a swap that comes with cfg, the config
// the caller applies next (with Apply, which must follow): each view is
// re-keyed on the settings cfg (and the runtime overlays) desire for its
// binding, so that it goes from its settings under the old policy
// straight to cfg's under p, never showing the old settings under p, which
// may read them otherwise (a key p does not know, say, which it ignores).
// A view cfg no longer wants keeps its old policy and settings until that
// Apply releases it; the caller closes the old policy after the Apply.
func (r *Reconciler) SetPolicyFor(ctx context.Context, p abi.Policy, cfg *config.Config) (Summary, error) {
	if cfg == nil {
		return Summary{}, errors.New("reconcile: set policy: nil config")
	}
	return r.setPolicy(ctx, p, cfg)
}

// setPolicy is SetPolicy, or SetPolicyFor when cfg is not nil.
func (r *Reconciler) setPolicy(ctx context.Context, p abi.Policy, cfg *config.Config) (Summary, error) {
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
	if cfg != nil {
		// The desired wants become cfg's now. The Apply that follows
		// finds no change in them: it must plan every binding, not
		// only the changed wants (see Apply).
		r.wants(cfg, nil)
		r.mark = -1
	}
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
			d := r.wantOf(name, server)
			if d == nil && cfg != nil {
				continue // released by the Apply that follows
			}
			if d != nil && d != w && d.identity == w.identity {
				w = d
				rebound = append(rebound, adoption{s: s, server: server, b: binding{handle: b.handle, want: w}})
			} else if d != nil && cfg != nil {
				// Another transport: the Apply applies d's settings on
				// the running connection at once (see switchOver); they
				// are the ones p is to read.
				w = d
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
// srv (copied), layered over the file config until DeleteOverlay, or
// until an Apply removes the session or a server the last Apply had; srv's
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
