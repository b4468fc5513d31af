package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/internal/churn"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
)

// LegacyOptions configure a Legacy reconciler.
type LegacyOptions struct {
	// Dialer makes transports; nil means pool.DefaultDialer.
	Dialer pool.Dialer
	// Policy is the initial policy. Required.
	Policy abi.Policy
	// Registry is the one session's registry. Required.
	Registry view.Registry
	// Counters receives the churn (connects and disconnects included);
	// nil means a fresh set (see Legacy.Counters).
	Counters *churn.Counters
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Client is the implementation announced upstream; nil means
	// {Name: "wasmhost", Version: "dev"}.
	Client *mcp.Implementation
	// Timeout bounds connect plus discovery (and each rediscovery) for
	// servers whose own timeout is 0; 0 means pool.DefaultTimeout.
	Timeout time.Duration
	// OnProgress, when set, receives every notifications/progress an
	// upstream sends (see pool.Options.OnProgress).
	OnProgress func(context.Context, *mcp.ProgressNotificationClientRequest)
}

// A Legacy reconciler serves one session without the pool: each enabled
// server gets its own upstream connection, discovered with pool.Discover
// and projected through a view into the session's registry. A connection's
// identity is its transport fingerprint, "#", and the metadata key of its
// settings, so Apply reconnects and rediscovers a server whose metadata
// changed, and leaves alone one whose settings are canonical-equivalent.
// Upstream list_changed notifications rediscover the lists (coalesced, off
// the notification goroutine). A connection that ends by itself is
// withdrawn (its view shows nothing and records ErrDisconnected) and the
// next Apply or Restart reconnects it; a view that failed closed on a
// connection that stayed up is re-projected by the next Apply, in place.
// Closing a connection (a reconnect, Restart, Close) fails the requests
// under way on it rather than waiting for the upstream to answer them.
// A Legacy is safe for concurrent use; its mutating methods are serialised.
type Legacy struct {
	dial     pool.Dialer
	client   *mcp.Implementation
	reg      *trackedRegistry
	counters *churn.Counters
	log      *slog.Logger
	timeout  time.Duration
	progress func(context.Context, *mcp.ProgressNotificationClientRequest)

	// mu serialises the mutating methods.
	mu      sync.Mutex
	closed  bool
	applied bool

	// smu guards what the read accessors look at; mutators hold mu and take
	// smu only to write.
	smu     sync.RWMutex
	session string
	policy  abi.Policy
	conns   map[string]*legacyConn
}

// A legacyWant is the desired connection of one server.
type legacyWant struct {
	spec     pool.Spec
	settings json.RawMessage
	identity string // fingerprint "#" key; "" when keyErr is set
	keyErr   error
}

// A legacyConn is one server's connection, or the failure to make it.
type legacyConn struct {
	l      *Legacy
	server string
	view   *view.View       // nil when the connect failed
	att    *view.Attachment // nil when the connect failed
	err    error            // why there is no connection; fixed at creation

	mu sync.Mutex
	// want is what the last Apply (or Restart) wanted of the server: the
	// want the connection was made for, or a later one of the same
	// identity, whose settings may differ in bytes but not in key (see
	// desired).
	want       *legacyWant
	identity   string // the connection's identity, re-keyed by SetPolicy
	cs         *mcp.ClientSession
	conn       *pool.Closer // the transport connection beneath cs
	lost       error        // set when the upstream went away by itself
	closed     bool
	version    uint64
	dirty      bool
	refreshing bool
	wg         sync.WaitGroup // watch and refresh goroutines
	// subs holds what receives the upstream's updates of each URI the
	// session subscribed to (the connection is a pool.Subscriber).
	subs map[string]pool.UpdateFunc
	// pending is the want whose new connection could not be made (see
	// Legacy.switchOver), and switchErr why; the connection, of want,
	// keeps serving.
	pending   *legacyWant
	switchErr error
}

// NewLegacy returns a Legacy reconciler with no connections. It panics if
// Policy or Registry is nil.
func NewLegacy(opts LegacyOptions) *Legacy {
	if opts.Policy == nil || opts.Registry == nil {
		panic("reconcile.NewLegacy: Policy and Registry are required")
	}
	l := &Legacy{
		dial:     opts.Dialer,
		client:   opts.Client,
		reg:      &trackedRegistry{inner: opts.Registry},
		counters: opts.Counters,
		log:      opts.Logger,
		timeout:  opts.Timeout,
		progress: opts.OnProgress,
		policy:   opts.Policy,
		conns:    make(map[string]*legacyConn),
	}
	if l.dial == nil {
		l.dial = pool.DefaultDialer
	}
	if l.client == nil {
		l.client = &mcp.Implementation{Name: "wasmhost", Version: "dev"}
	}
	if l.counters == nil {
		l.counters = &churn.Counters{}
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	if l.timeout <= 0 {
		l.timeout = pool.DefaultTimeout
	}
	return l
}

// Counters returns the churn counters.
func (l *Legacy) Counters() *churn.Counters { return l.counters }

// Apply connects, reconnects or disconnects each server of cfg as session
// sees it ([config.Session.Effective]); session "" means every server that
// is not disabled, with its own settings (for a config without sessions).
// A server whose connected identity (fingerprint "#" key) equals the
// desired one is left alone; one whose identity differs, or whose
// connection is gone, is closed and connected afresh (a reconnect and a
// rediscovery); one no longer enabled is closed. Settings the policy
// refuses leave that server unconnected with the refusal as its error.
// Failures are per server, as in Reconciler.Apply. It returns
// ErrUnknownSession if cfg has no such session. Switching to another
// session name reconnects everything.
func (l *Legacy) Apply(ctx context.Context, cfg *config.Config, sessionName string) (Summary, error) {
	if cfg == nil {
		return Summary{}, errors.New("reconcile: legacy apply: nil config")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return Summary{}, fmt.Errorf("reconcile: legacy apply %s: %w", cfg.File, ErrClosed)
	}
	var sess *config.Session
	if sessionName != "" {
		if sess = cfg.Sessions[sessionName]; sess == nil {
			return Summary{}, fmt.Errorf("reconcile: legacy apply %s: session %q: %w", cfg.File, sessionName, ErrUnknownSession)
		}
	}
	o := l.begin()
	policy := l.Policy()
	desired := make(map[string]*legacyWant)
	for name, base := range cfg.Servers {
		var srv *config.Server
		var settings json.RawMessage
		if sess != nil {
			var ok bool
			if srv, settings, ok = sess.Effective(name); !ok {
				continue
			}
		} else {
			if base == nil || base.Disabled {
				continue
			}
			srv, settings = base.Clone(), base.Metadata()
		}
		desired[name] = l.newWant(ctx, policy, pool.FromConfig(srv), settings)
	}
	if err := ctx.Err(); err != nil {
		// Keys computed under a dead context are not refusals: change nothing.
		return Summary{}, fmt.Errorf("reconcile: legacy apply %s: %w", cfg.File, err)
	}
	reconnectAll := l.applied && sessionName != l.session
	l.smu.Lock()
	l.session = sessionName
	l.smu.Unlock()
	l.applied = true

	servers := slices.Sorted(maps.Keys(desired))
	var drop []string
	for name := range l.conns {
		if desired[name] == nil {
			drop = append(drop, name)
		}
	}
	slices.Sort(drop)
	parallel(len(servers), func(i int) {
		name := servers[i]
		w := desired[name]
		l.bind(ctx, o, name, l.conn(name), w, reconnectAll)
	})
	parallel(len(drop), func(i int) { l.replace(ctx, o, drop[i], l.conn(drop[i]), nil) })
	return o.finish()
}

// keep leaves cur, whose connection already has w's identity, connected.
// It records w as cur's desired state (its settings bytes may differ but
// mean the same, and a later SetPolicy keys the view by them), and
// re-projects a view that failed closed, so that a policy failure that has
// passed is repaired by the next Apply as it is in the pooled Reconciler.
func (l *Legacy) keep(ctx context.Context, o *op, cur *legacyConn, w *legacyWant) {
	cur.mu.Lock()
	cur.want = w
	cur.pending, cur.switchErr = nil, nil // a change that failed is taken back
	cur.mu.Unlock()
	if cur.view.Err() == nil {
		return
	}
	o.count(&o.sum.Refreshed)
	_, err := cur.view.SetSettings(ctx, w.settings)
	o.fail(l.sessionName(), cur.server, err)
}

// Restart closes server's connection and connects it afresh with the same
// desired settings (a reconnect and a rediscovery). It returns ErrNotBound
// when the last Apply did not want the server.
func (l *Legacy) Restart(ctx context.Context, server string) error {
	return l.rebind(ctx, "restart", server, true)
}

// Repair repairs server's binding for a supervisor: a live connection
// that already has the desired identity is kept and only its view, if it
// failed closed, is projected again (a policy failure that has passed);
// otherwise the connection is replaced as by Restart. It returns ErrNotBound
// when the last Apply did not want the server.
func (l *Legacy) Repair(ctx context.Context, server string) error {
	return l.rebind(ctx, "repair", server, false)
}

// rebind is Restart (reconnect) and Repair (reconnect only what needs it).
// The key is computed again either way: a policy failure may have passed.
func (l *Legacy) rebind(ctx context.Context, what, server string, reconnect bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("reconcile: legacy %s %q: %w", what, server, ErrClosed)
	}
	cur := l.conn(server)
	if cur == nil {
		return fmt.Errorf("reconcile: legacy %s: server %q: %w", what, server, ErrNotBound)
	}
	o := l.begin()
	old := cur.desired()
	w := l.newWant(ctx, l.Policy(), old.spec, old.settings)
	l.bind(ctx, o, server, cur, w, reconnect)
	_, err := o.finish()
	return err
}

// bind makes server's connection serve w: it keeps cur, a live connection
// of w's identity, unless reconnect is set, and replaces it otherwise.
func (l *Legacy) bind(ctx context.Context, o *op, server string, cur *legacyConn, w *legacyWant, reconnect bool) {
	if cur != nil && !reconnect && w.keyErr == nil && cur.live() {
		if cur.currentIdentity() == w.identity {
			l.keep(ctx, o, cur, w)
			return
		}
		// Another transport is made before break; other metadata alone
		// reconnects the same transport, break then make.
		if cur.view != nil && cur.desired().spec.Fingerprint() != w.spec.Fingerprint() {
			l.switchOver(ctx, o, server, cur, w)
			return
		}
	}
	l.replace(ctx, o, server, cur, w)
}

// switchOver replaces cur, a live connection, by one for w, make before
// break, as Reconciler does for a changed transport: w's settings are
// applied at once on cur; the new connection is made (connected and
// listed) while cur serves; then cur's view moves onto it
// (view.Attachment.Handover: the session is told only what differs), it
// is published, and cur is closed, its calls under way given the
// server's timeout to be answered. If the new connection cannot be made,
// cur keeps serving with w as its pending want and the failure recorded.
// l.mu is held.
func (l *Legacy) switchOver(ctx context.Context, o *op, server string, cur *legacyConn, w *legacyWant) {
	running := cur.desired()
	if !bytes.Equal(running.settings, w.settings) {
		o.count(&o.sum.Refreshed)
		_, err := cur.view.SetSettings(ctx, w.settings)
		o.fail(l.sessionName(), server, err)
		key := strings.TrimPrefix(w.identity, w.spec.Fingerprint()+"#")
		running = &legacyWant{spec: running.spec, settings: w.settings, identity: legacyIdentity(running.spec, key)}
		cur.mu.Lock()
		cur.want, cur.identity = running, running.identity
		cur.mu.Unlock()
	}
	c, cause := l.connect(ctx, server, w, cur)
	if cause != nil {
		err := fmt.Errorf("%w, the running connection keeps serving: %w", ErrTransportNotChanged, cause)
		cur.mu.Lock()
		cur.pending, cur.switchErr = w, err
		cur.mu.Unlock()
		o.fail(l.sessionName(), server, err)
		o.switched(server, false, cause)
		l.log.Warn("legacy transport change failed", "server", server, "err", err)
		return
	}
	o.count(&o.sum.Acquired)
	o.switched(server, true, nil)
	l.setConn(server, c)
	cur.mu.Lock()
	subs := maps.Clone(cur.subs)
	cur.mu.Unlock()
	for uri, fn := range subs {
		if err := c.Subscribe(ctx, uri, fn); err != nil {
			l.log.Debug("subscription not moved to the new connection", "server", server, "uri", uri, "err", err)
		}
	}
	if cur.closeGracefully(ctx) {
		o.count(&o.sum.Released)
	}
	if err := c.view.Err(); err != nil {
		o.fail(l.sessionName(), server, err)
	}
}

// newWant computes the desired identity of spec with settings under
// policy.
func (l *Legacy) newWant(ctx context.Context, policy abi.Policy, spec pool.Spec, settings json.RawMessage) *legacyWant {
	w := &legacyWant{spec: spec, settings: slices.Clone(settings)}
	key, err := view.CanonicalKey(ctx, view.Counted(policy, l.counters), settings)
	if err != nil {
		w.keyErr = fmt.Errorf("metadata key: %w", err)
	} else {
		w.identity = legacyIdentity(spec, key)
	}
	return w
}

// SetPolicy re-keys every connected view with p, by the settings the last
// Apply wanted ([view.View.SetPolicyWith]), and stores the new keys in the
// connections' identities; no connection is touched. A view whose
// projection fails under p fails closed, and its connection's identity
// still holds the key p gives its settings, so the next Apply repairs the
// view in place. Later connects use p too.
func (l *Legacy) SetPolicy(ctx context.Context, p abi.Policy) (Summary, error) {
	if p == nil {
		return Summary{}, errors.New("reconcile: legacy set policy: nil policy")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return Summary{}, fmt.Errorf("reconcile: legacy set policy: %w", ErrClosed)
	}
	o := l.begin()
	l.smu.Lock()
	l.policy = p
	l.smu.Unlock()
	servers := slices.Sorted(maps.Keys(l.conns))
	parallel(len(servers), func(i int) {
		c := l.conn(servers[i])
		if c.view == nil {
			return
		}
		o.count(&o.sum.Refreshed)
		w := c.desired()
		err := c.view.SetPolicyWith(ctx, p, w.settings)
		key := c.view.Key()
		nw := &legacyWant{spec: w.spec, settings: w.settings, identity: legacyIdentity(w.spec, key)}
		if key == "" {
			// The view failed closed and forgot its key. It still belongs
			// to a connection made for the key p gives its settings:
			// keeping that key in the identity lets the next Apply repair
			// the view in place (see keep) instead of taking the failure
			// for a metadata change and reconnecting.
			nw = l.newWant(ctx, p, w.spec, w.settings)
		}
		c.mu.Lock()
		if nw.keyErr == nil {
			c.identity, c.want = nw.identity, nw
		} else {
			c.identity = legacyIdentity(w.spec, "")
		}
		c.mu.Unlock()
		o.fail(l.sessionName(), servers[i], err)
	})
	return o.finish()
}

// Session returns server's upstream client session for forwarding calls,
// or nil when it is not connected. Fetch it for each call: Apply and
// Restart replace it.
func (l *Legacy) Session(server string) *mcp.ClientSession {
	c := l.conn(server)
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cs
}

// Upstream returns server's upstream client session, or nil when it is not
// connected, the timeout configured for calls forwarded to it (its entry's
// "timeout"; 0: none), and what holds the session's resource subscriptions
// to it (nil when it is not connected). Fetch them for each call: Apply and
// Restart replace the connection.
func (l *Legacy) Upstream(server string) (*mcp.ClientSession, time.Duration, pool.Subscriber) {
	c := l.conn(server)
	if c == nil {
		return nil, 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cs, c.want.spec.Timeout, c
}

// Subscribe implements pool.Subscriber: the one session of a Legacy is the
// connection's only subscriber.
func (c *legacyConn) Subscribe(ctx context.Context, uri string, fn pool.UpdateFunc) error {
	c.mu.Lock()
	cs, held := c.cs, c.subs[uri] != nil
	c.mu.Unlock()
	switch {
	case cs == nil:
		return fmt.Errorf("server %s: subscribe %q: %w", c.server, uri, pool.ErrNotReady)
	case !pool.OffersSubscriptions(cs):
		return fmt.Errorf("server %s: subscribe %q: %w", c.server, uri, pool.ErrNoSubscriptions)
	case !held:
		current := func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.cs == cs && !c.closed }
		ctx, cancel := context.WithTimeout(ctx, c.timeout())
		defer cancel()
		if err := pool.SubscribeWhile(ctx, cs, uri, current); err != nil {
			return fmt.Errorf("server %s: subscribe %q: %w", c.server, uri, err)
		}
	}
	c.mu.Lock()
	if c.subs == nil {
		c.subs = make(map[string]pool.UpdateFunc)
	}
	c.subs[uri] = fn
	c.mu.Unlock()
	return nil
}

// Unsubscribe implements pool.Subscriber.
func (c *legacyConn) Unsubscribe(ctx context.Context, uri string) error {
	c.mu.Lock()
	cs, held := c.cs, c.subs[uri] != nil
	delete(c.subs, uri)
	c.mu.Unlock()
	if !held || cs == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		return fmt.Errorf("server %s: unsubscribe %q: %w", c.server, uri, err)
	}
	return nil
}

// timeout bounds one request of c's own to its upstream (requestTimeout).
func (c *legacyConn) timeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.l.requestTimeout(c.want)
}

// requestTimeout bounds a connect, or one request of wasmhost's own, to the
// upstream w wants: the server entry's "timeout", or the Legacy's.
func (l *Legacy) requestTimeout(w *legacyWant) time.Duration {
	if w.spec.Timeout > 0 {
		return w.spec.Timeout
	}
	return l.timeout
}

// resourceUpdated passes an upstream's notifications/resources/updated to
// the session's subscription of its URI.
func (c *legacyConn) resourceUpdated(p *mcp.ResourceUpdatedNotificationParams) {
	if p == nil {
		return
	}
	c.mu.Lock()
	fn := c.subs[p.URI]
	c.mu.Unlock()
	if fn != nil {
		fn(p)
	}
}

// Policy returns the current policy.
func (l *Legacy) Policy() abi.Policy {
	l.smu.RLock()
	defer l.smu.RUnlock()
	return l.policy
}

// State describes the session's connections. Desired and Identity are
// "fingerprint#key"; EntryID is the server name (there are no pool
// entries); EntryState is "ready", "failed" or "closed".
func (l *Legacy) State() State {
	l.smu.RLock()
	p, name := l.policy, l.session
	conns := maps.Clone(l.conns)
	l.smu.RUnlock()
	ss := SessionState{Name: name, Servers: make([]BindingState, 0, len(conns))}
	for _, server := range slices.Sorted(maps.Keys(conns)) {
		c := conns[server]
		w := c.desired()
		st := BindingState{Server: server, Desired: w.identity, EntryState: "failed"}
		if w.keyErr != nil {
			st.Desired = legacyIdentity(w.spec, "")
		}
		if c.err != nil {
			st.Error = c.err.Error()
		}
		c.mu.Lock()
		if c.cs != nil {
			st.Identity, st.EntryID, st.EntryState = c.identity, server, "ready"
		} else if c.closed {
			st.EntryState = "closed"
		}
		if c.lost != nil && st.Error == "" {
			st.Error = c.lost.Error()
		}
		if c.pending != nil && c.cs != nil {
			st.Desired, st.SwitchError = c.pending.identity, c.switchErr.Error()
		}
		c.mu.Unlock()
		if c.view != nil {
			describeView(&st, c.view)
		}
		ss.Servers = append(ss.Servers, st)
	}
	return State{Policy: policyName(p), Sessions: []SessionState{ss}}
}

// Close closes every connection (deleting the views' registrations) and
// makes later mutating calls fail with ErrClosed.
func (l *Legacy) Close(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	o := l.begin()
	servers := slices.Sorted(maps.Keys(l.conns))
	parallel(len(servers), func(i int) { l.replace(ctx, o, servers[i], l.conn(servers[i]), nil) })
	_, err := o.finish()
	return err
}

// legacyIdentity is the connected-config identity of a legacy connection.
func legacyIdentity(spec pool.Spec, key string) string {
	return spec.Fingerprint() + "#" + key
}

func (l *Legacy) conn(server string) *legacyConn {
	l.smu.RLock()
	defer l.smu.RUnlock()
	return l.conns[server]
}

func (l *Legacy) sessionName() string {
	l.smu.RLock()
	defer l.smu.RUnlock()
	return l.session
}

func (l *Legacy) setConn(server string, c *legacyConn) {
	l.smu.Lock()
	defer l.smu.Unlock()
	if c == nil {
		delete(l.conns, server)
	} else {
		l.conns[server] = c
	}
}

// begin starts an op over the session's registry and live connections.
// l.mu is held.
func (l *Legacy) begin() *op {
	state := func() (map[string]*trackedRegistry, map[any]struct{}) {
		held := make(map[any]struct{})
		l.smu.RLock()
		name := l.session
		for _, c := range l.conns {
			if c.live() {
				held[c] = struct{}{}
			}
		}
		l.smu.RUnlock()
		return map[string]*trackedRegistry{name: l.reg}, held
	}
	regs, held := state()
	return newOp(l.counters, l.counters, regs, held, state)
}

// replace closes cur (if any) and, when w is non-nil, connects server
// afresh for w.
func (l *Legacy) replace(ctx context.Context, o *op, server string, cur *legacyConn, w *legacyWant) {
	if cur != nil {
		if cur.close(ctx) {
			o.count(&o.sum.Released)
		}
		if w == nil {
			l.setConn(server, nil)
			return
		}
	}
	if w == nil {
		return
	}
	if w.keyErr != nil {
		l.setConn(server, &legacyConn{l: l, server: server, want: w, err: w.keyErr, closed: true})
		o.fail(l.sessionName(), server, w.keyErr)
		return
	}
	c, err := l.connect(ctx, server, w, nil)
	if err != nil {
		l.setConn(server, &legacyConn{l: l, server: server, want: w, err: err, closed: true})
		o.fail(l.sessionName(), server, err)
		l.log.Warn("legacy connect failed", "server", server, "err", err)
		return
	}
	o.count(&o.sum.Acquired)
	l.setConn(server, c)
	if err := c.view.Err(); err != nil {
		o.fail(l.sessionName(), server, err)
	}
}

// connect dials server, discovers its lists and projects them into a new
// view, or into from's view when from is not nil: the view is handed over
// once the lists are discovered (see switchOver), and from's attachment is
// inert from then on.
func (l *Legacy) connect(ctx context.Context, server string, w *legacyWant, from *legacyConn) (*legacyConn, error) {
	cctx, cancel := context.WithTimeout(ctx, l.requestTimeout(w))
	defer cancel()
	c := &legacyConn{l: l, server: server, want: w, identity: w.identity}
	t, err := l.dial(cctx, w.spec.Clone())
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", w.spec, err)
	}
	// An HTTP upstream's event stream is watched as the pool watches it
	// (pool.WatchStreams): opening it is bounded by the timeout; a stream
	// opened again has the lists discovered again; a subscriptions/listen
	// stream that ends, which the go-sdk does not reopen, ends the
	// connection, which the supervisor then reconnects.
	var conn *pool.Closer
	dialed := t
	t = pool.WatchStreams(t, l.requestTimeout(w), context.WithoutCancel(ctx), c.listChanged, func() { go conn.CloseConnection() })
	conn = &pool.Closer{Transport: t}
	client := pool.NewClient(l.client, mcp.ClientOptions{
		Logger:                      l.log,
		ToolListChangedHandler:      func(context.Context, *mcp.ToolListChangedRequest) { c.listChanged() },
		PromptListChangedHandler:    func(context.Context, *mcp.PromptListChangedRequest) { c.listChanged() },
		ResourceListChangedHandler:  func(context.Context, *mcp.ResourceListChangedRequest) { c.listChanged() },
		ProgressNotificationHandler: l.progress,
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			c.resourceUpdated(req.Params)
		},
	})
	cs, err := client.Connect(cctx, conn, w.spec.SessionOptions())
	if err != nil {
		return nil, pool.ConnectFailure(cctx, dialed, l.requestTimeout(w), fmt.Errorf("connect %s: %w", w.spec, err))
	}
	l.counters.Connects.Add(1)
	l.counters.Discoveries.Add(1)
	snap, err := pool.DiscoverWithin(cctx, cs, w.spec.ListingCap())
	if err != nil {
		l.closeSession(cs)
		return nil, pool.ConnectFailure(cctx, dialed, l.requestTimeout(w), fmt.Errorf("discover %s: %w", w.spec, err))
	}
	if from != nil {
		c.view, c.att = from.view, from.att.Handover(nil)
		if c.att == nil {
			l.closeSession(cs)
			return nil, fmt.Errorf("server %s: the running connection's view is detached", server)
		}
	} else {
		c.view = view.New(view.Config{
			Session:  l.sessionName(),
			Server:   server,
			Registry: l.reg,
			Counters: l.counters,
			Policy:   l.Policy(),
			Settings: w.settings,
			Logger:   l.log,
		})
		c.att, err = c.view.Attach(nil)
		if err != nil {
			l.closeSession(cs)
			return nil, err
		}
	}
	c.mu.Lock()
	c.cs = cs
	c.conn = conn
	c.version = 1
	snap.Version = 1
	c.wg.Add(1)
	go c.watch(cs)
	c.mu.Unlock()
	// A policy failure leaves the view failed closed; replace reports it.
	_ = c.att.Apply(cctx, snap)
	c.mu.Lock()
	c.startRefreshLocked()
	c.mu.Unlock()
	return c, nil
}

// closeSession closes cs and counts the disconnect.
func (l *Legacy) closeSession(cs *mcp.ClientSession) {
	l.counters.Disconnects.Add(1)
	if err := cs.Close(); err != nil {
		l.log.Debug("closing upstream session", "err", err)
	}
}

// live reports whether c holds an open connection.
func (c *legacyConn) live() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cs != nil && !c.closed
}

// desired returns what the last Apply wanted of c's server.
func (c *legacyConn) desired() *legacyWant {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.want
}

func (c *legacyConn) currentIdentity() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.identity
}

// close detaches the view, closes the connection and waits for c's
// goroutines (within ctx). It reports whether a connection was open.
func (c *legacyConn) close(ctx context.Context) bool { return c.closeWith(ctx, false) }

// closeGracefully is close for a connection whose view was handed over
// (switchOver): the calls under way on it get the server's timeout to be
// answered before the connection is closed beneath them.
func (c *legacyConn) closeGracefully(ctx context.Context) bool { return c.closeWith(ctx, true) }

func (c *legacyConn) closeWith(ctx context.Context, graceful bool) bool {
	timeout := c.timeout()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	c.closed = true
	cs, conn := c.cs, c.conn
	c.cs = nil
	c.mu.Unlock()
	if c.att != nil {
		c.att.Detach()
	}
	if cs != nil {
		// cs.Close alone would wait for the requests under way on it (calls
		// forwarded for the session, a rediscovery) to be answered, however
		// long the upstream takes, or for ever: closing the connection
		// beneath it first ends them (they fail, the connection closed).
		if graceful {
			t := time.AfterFunc(timeout, conn.CloseConnection)
			c.l.closeSession(cs)
			t.Stop()
		} else {
			conn.CloseConnection()
			c.l.closeSession(cs)
		}
	}
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return cs != nil
}

// watch withdraws the view when session cs ends without c closing it.
func (c *legacyConn) watch(cs *mcp.ClientSession) {
	defer c.wg.Done()
	err := cs.Wait()
	c.mu.Lock()
	if c.closed || c.cs != cs {
		c.mu.Unlock()
		return
	}
	c.cs = nil
	c.lost = fmt.Errorf("server %s: %w", c.server, ErrDisconnected)
	if err != nil {
		c.lost = fmt.Errorf("server %s: %w: %w", c.server, ErrDisconnected, err)
	}
	lost := c.lost
	c.mu.Unlock()
	c.l.log.Warn("legacy upstream went away", "server", c.server, "err", err)
	c.att.Withdraw(lost)
	c.l.closeSession(cs)
}

// listChanged records an upstream list change and makes sure a refresh
// runs.
func (c *legacyConn) listChanged() {
	c.l.counters.Notifications.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dirty = true
	c.startRefreshLocked()
}

// startRefreshLocked starts the refresh loop when something is dirty, the
// connection is up and no loop runs. c.mu is held.
func (c *legacyConn) startRefreshLocked() {
	if !c.dirty || c.refreshing || c.closed || c.cs == nil {
		return
	}
	c.refreshing = true
	c.wg.Add(1)
	go c.refreshLoop()
}

// refreshLoop rediscovers every list and applies it until nothing is
// dirty; notifications arriving meanwhile coalesce into one more round.
func (c *legacyConn) refreshLoop() {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		if !c.dirty || c.closed || c.cs == nil {
			c.refreshing = false
			c.mu.Unlock()
			return
		}
		c.dirty = false
		cs := c.cs
		timeout, limit := c.want.spec.Timeout, c.want.spec.ListingCap()
		c.mu.Unlock()

		if timeout <= 0 {
			timeout = c.l.timeout
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		c.l.counters.Discoveries.Add(1)
		snap, err := pool.DiscoverWithin(ctx, cs, limit)
		if err != nil {
			cancel()
			c.l.log.Warn("legacy snapshot refresh failed", "server", c.server, "err", err)
			continue
		}
		c.mu.Lock()
		c.version++
		snap.Version = c.version
		c.mu.Unlock()
		if err := c.att.Apply(ctx, snap); err != nil {
			c.l.log.Warn("legacy view failed closed on snapshot", "server", c.server, "err", err)
		}
		cancel()
	}
}
