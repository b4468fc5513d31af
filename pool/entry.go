package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/wasmhost/wasmhost/internal/telemetry"
)

// An Entry is one upstream connection and the snapshot discovered on it,
// shared by the handles attached to it. See the package documentation.
type Entry struct {
	pool     *Pool
	id       string
	identity string
	spec     Spec // deep copy captured at creation
	log      *slog.Logger
	timeout  time.Duration
	// stop ends when the entry closes (closeLocked calls halt). Every
	// connection attempt runs under it, so closing the entry, or the pool,
	// abandons a dial or handshake in progress.
	stop context.Context
	halt context.CancelFunc

	// fanMu serialises what reaches views in order: fan-outs, first applies
	// of new views, the hold at a restart's start, the withdrawal at failure.
	fanMu sync.Mutex
	// subMu serialises changes to the upstream subscriptions (subscribe.go),
	// which it holds across their upstream requests.
	subMu sync.Mutex
	// dupsWarned is the duplicated names last warned about.
	dupsWarned atomic.Pointer[string]
	// shared is what the entry's followers share (Shared), made once.
	sharedOnce sync.Once
	shared     any

	mu          sync.Mutex
	state       State
	changed     chan struct{} // closed and replaced on every state change
	refs        int
	handles     map[*Handle]struct{}
	upstream    *mcp.ClientSession // the upstream connection; nil while none is ready
	conn        uint64             // connection generation; bumped when a connection is superseded
	snap        *Snapshot
	version     uint64
	err         error
	dirty       kinds         // lists changed upstream, not yet refreshed
	refreshing  bool          // a refresh loop runs
	idle        chan struct{} // closed when the refresh loop stops
	restart     *call         // restart in flight
	crashes     int
	connectedAt time.Time
	// subs are the handles subscribed to each resource URI, with what they
	// receive its updates with (subscribe.go).
	subs map[string]map[*Handle]UpdateFunc
	// subOn is the connection generation each URI of subs is subscribed
	// on upstream, so that no connection is asked twice.
	subOn map[string]uint64
	// kept holds the URIs whose subscriptions/listen request the entry
	// left open on connection keptOn when their last handle left (see
	// keepListening).
	kept   map[string]struct{}
	keptOn uint64

	// restarts counts the restarts begun (crash and explicit), lastErr is
	// the latest reason the connection went away or failed (kept once
	// the entry is ready again; see EntryInfo). Guarded by mu.
	restarts int
	lastErr  error
}

// A call is an operation others can wait for.
type call struct {
	done chan struct{}
	err  error
}

func (p *Pool) newEntry(id string, spec Spec, identity string) *Entry {
	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = p.timeout
	}
	stop, halt := context.WithCancel(context.Background())
	return &Entry{
		pool:     p,
		id:       id,
		identity: identity,
		spec:     spec,
		log:      entryLogger(p.log, spec, id),
		timeout:  timeout,
		stop:     stop,
		halt:     halt,
		state:    StateConnecting,
		changed:  make(chan struct{}),
		handles:  make(map[*Handle]struct{}),
		subs:     make(map[string]map[*Handle]UpdateFunc),
		subOn:    make(map[string]uint64),
	}
}

// entryLogger is the logger of the entry id for spec: its lines name the
// server, and an unpooled entry's short id ("NAME::unpooled-N"); a pooled
// entry's id, its 64-hex fingerprint, would only repeat on every line what
// the server's name says, so it is logged once, at debug, when the entry
// is made.
func entryLogger(log *slog.Logger, spec Spec, id string) *slog.Logger {
	if spec.Pooled {
		log = log.With("server", spec.Name)
		log.Debug("pool entry created", "entry", id)
		return log
	}
	return log.With("server", spec.Name, "entry", id)
}

// label names the entry in errors: the server, and an unpooled entry's
// id.
func (e *Entry) label() string {
	if e.spec.Pooled {
		return fmt.Sprintf("server %q", e.spec.Name)
	}
	return fmt.Sprintf("server %q (%s)", e.spec.Name, e.id)
}

// ID returns the entry's lifecycle id.
func (e *Entry) ID() string { return e.id }

// Identity returns the fingerprint captured when the entry was created.
func (e *Entry) Identity() string { return e.identity }

// Spec returns a copy of the spec captured when the entry was created.
func (e *Entry) Spec() Spec { return e.spec.Clone() }

// State returns the entry's current state.
func (e *Entry) State() State {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.state
}

// Snapshot returns the current snapshot (nil before the first discovery).
// It is shared and must not be modified.
func (e *Entry) Snapshot() *Snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.snap
}

// Info describes the entry.
func (e *Entry) Info() EntryInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	info := EntryInfo{
		ID:       e.id,
		Identity: e.identity,
		Server:   e.spec.Name,
		Pooled:   e.spec.Pooled,
		State:    e.state,
		Refs:     e.refs,
		Views:    len(e.handles),
		Version:  e.version,
		Err:      e.err,
		Restarts: e.restarts,
		LastErr:  e.lastErr,
	}
	if e.state == StateReady {
		info.Subscriptions = e.subscriptionsLocked()
	}
	return info
}

// setState moves to s and wakes waiters. e.mu is held.
func (e *Entry) setState(s State) {
	if s.Terminal() && !e.state.Terminal() {
		e.pool.counters.Failures.Add(1)
	}
	e.state = s
	close(e.changed)
	e.changed = make(chan struct{})
}

func (e *Entry) handleList() []*Handle {
	out := make([]*Handle, 0, len(e.handles))
	for h := range e.handles {
		out = append(out, h)
	}
	return out
}

// waitReady waits until the entry is ready and returns with e.fanMu and
// e.mu held, or returns an error (holding nothing) if the entry turned
// terminal or ctx ended.
func (e *Entry) waitReady(ctx context.Context) error {
	for {
		e.fanMu.Lock()
		e.mu.Lock()
		switch e.state {
		case StateReady:
			return nil
		case StateFailed, StateClosed:
			err := e.terminalErr()
			e.mu.Unlock()
			e.fanMu.Unlock()
			return err
		case StateConnecting, StateRestarting:
			// wait for the next change
		default:
			panic(unknownState(e.state))
		}
		ch := e.changed
		e.mu.Unlock()
		e.fanMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// terminalErr is the error for operations on a terminal entry. e.mu is
// held.
func (e *Entry) terminalErr() error {
	if e.err != nil && !errors.Is(e.err, ErrTerminal) {
		return fmt.Errorf("%s is %s: %w: %w", e.label(), e.state, ErrTerminal, e.err)
	}
	if e.err != nil {
		return fmt.Errorf("%s is %s: %w", e.label(), e.state, e.err)
	}
	return fmt.Errorf("%s is %s: %w", e.label(), e.state, ErrTerminal)
}

// closeLocked moves the entry to closed and returns the connection to close
// outside the lock. e.mu is held.
func (e *Entry) closeLocked(cause error) *mcp.ClientSession {
	if e.state == StateClosed {
		return nil
	}
	cs := e.upstream
	e.upstream = nil
	e.conn++
	if cause != nil && e.err == nil {
		e.err = cause
	}
	e.setState(StateClosed)
	e.halt()
	return cs
}

// closeConn closes cs, waiting within ctx (the close goes on in the
// background if ctx ends first).
func (e *Entry) closeConn(ctx context.Context, cs *mcp.ClientSession) {
	if cs == nil {
		return
	}
	e.pool.counters.Disconnects.Add(1)
	done := e.pool.startClose(cs)
	// mcp.ClientSession.Close waits for every request under way, the
	// upstream's own included, whose answers an upstream that reads
	// nothing never lets out: after the server's timeout the connection is
	// closed beneath them (see closer), which ends them.
	force := time.AfterFunc(e.timeout, func() {
		if c, ok := e.pool.closers.Load(cs); ok {
			e.log.Warn("upstream connection still closing after the server's timeout: closed beneath the requests under way", "timeout", e.timeout)
			c.(*closer).CloseConnection()
		}
	})
	select {
	case err := <-done:
		force.Stop()
		if err != nil {
			e.log.Debug("closing upstream connection", "err", err)
		}
	case <-ctx.Done(): // force still ends the close, which Pool.Close waits for
	}
}

// closeConnNow closes cs without waiting for the requests under way on
// it, which fail: a restart replaces a connection that may be hung, and
// mcp.ClientSession.Close alone would wait for their answers (see closer).
func (e *Entry) closeConnNow(cs *mcp.ClientSession) {
	if cs == nil {
		return
	}
	if c, ok := e.pool.closers.Load(cs); ok {
		c.(*closer).CloseConnection()
	}
	e.closeConn(context.Background(), cs)
}

// establish dials, connects and discovers a full snapshot. The new connection
// belongs to connection generation gen, which its notification handlers
// report back.
func (e *Entry) establish(gen uint64) (*mcp.ClientSession, *Snapshot, error) {
	ctx, cancel := context.WithTimeout(e.stop, e.timeout)
	defer cancel()
	t, err := e.pool.dial(ctx, e.spec.Clone())
	if err != nil {
		return nil, nil, fmt.Errorf("dial: %w", err)
	}
	t = watchStreams(t, e.timeout, e.stop,
		func() { e.markDirty(gen, kindAll) },
		func() { go e.streamLost(gen) })
	opts := mcp.ClientOptions{
		Logger:                      e.log,
		ToolListChangedHandler:      func(context.Context, *mcp.ToolListChangedRequest) { e.listChanged(gen, kindTools) },
		PromptListChangedHandler:    func(context.Context, *mcp.PromptListChangedRequest) { e.listChanged(gen, kindPrompts) },
		ResourceListChangedHandler:  func(context.Context, *mcp.ResourceListChangedRequest) { e.listChanged(gen, kindResources) },
		ProgressNotificationHandler: e.pool.progress,
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			e.resourceUpdated(gen, req.Params)
		},
	}
	bridge := e.bridgeClient(&opts)
	client := NewClient(e.pool.client, opts)
	if bridge != nil {
		client.AddReceivingMiddleware(bridge)
	}
	client.AddSendingMiddleware(telemetry.Client(e.spec.Name, e.spec.Transport())) // spans, when traced
	closer := &closer{Transport: watchWrites(t, writeBound(e.spec))}
	cs, err := client.Connect(context.WithValue(ctx, bridgingKey{}, e.spec.bridging()), closer, e.spec.SessionOptions())
	if err != nil {
		return nil, nil, connectFailure(ctx, t, e.timeout, fmt.Errorf("connect: %w", cutError(err)))
	}
	e.setUpstreamLevel(ctx, cs)
	e.pool.closers.Store(cs, closer)
	e.pool.counters.Connects.Add(1)
	snap, err := e.discover(ctx, cs, kindAll, nil)
	if err != nil {
		e.closeConn(ctx, cs)
		return nil, nil, connectFailure(ctx, t, e.timeout, err)
	}
	return cs, snap, nil
}

// connect makes the entry's first connection.
func (e *Entry) connect() {
	e.mu.Lock()
	gen := e.conn
	e.mu.Unlock()
	cs, snap, err := e.establish(gen)
	e.finishConnect(gen, cs, snap, err)
}

// finishConnect publishes the outcome of a connect or restart attempt made
// for connection generation gen.
func (e *Entry) finishConnect(gen uint64, cs *mcp.ClientSession, snap *Snapshot, err error) error {
	e.fanMu.Lock()
	e.mu.Lock()
	if e.state == StateClosed || e.conn != gen {
		// Released or pool closed while connecting.
		e.mu.Unlock()
		e.fanMu.Unlock()
		e.closeConn(context.Background(), cs)
		return fmt.Errorf("%s closed while connecting: %w", e.label(), ErrTerminal)
	}
	handles := e.handleList()
	if err != nil {
		e.err = err
		e.lastErr = err
		e.upstream = nil
		e.conn++
		e.setState(StateFailed)
		e.mu.Unlock()
		e.log.Warn("upstream connection failed", "spec", e.spec, "err", err)
		cause := fmt.Errorf("server %s: %w: %w", e.spec.Name, ErrTerminal, err)
		for _, h := range handles {
			h.att.Withdraw(cause)
		}
		e.fanMu.Unlock()
		e.pool.forget(e)
		return fmt.Errorf("%s is failed: %w: %w", e.label(), ErrTerminal, err)
	}
	e.upstream = cs
	e.connectedAt = time.Now()
	e.version++
	snap.Version = e.version
	e.snap = snap
	e.err = nil
	e.setState(StateReady)
	// A list that changed while we were discovering is looked at again (the
	// loop waits for this fan-out to finish).
	e.startRefreshLocked()
	if uris := e.subscriptionsLocked(); uris != nil {
		e.startResubscribe(gen, cs, uris)
	}
	e.mu.Unlock()
	go e.watch(gen, cs)
	e.fanOut(handles, snap)
	e.fanMu.Unlock()
	return nil
}

// fanOut applies snap to the views of handles. e.fanMu is held.
func (e *Entry) fanOut(handles []*Handle, snap *Snapshot) {
	for _, h := range handles {
		ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
		err := h.att.Apply(ctx, snap)
		cancel()
		if err != nil {
			e.log.Warn("view failed closed on snapshot", "session", h.follower.Session(), "version", snap.Version, "err", err)
		}
	}
}

// watch notices the end of connection cs of generation gen. An end the pool
// did not cause restarts the entry (within Options.CrashRestarts) or fails
// it. Either way cs is closed once more to release its resources, and that
// close is the one Disconnects counts.
func (e *Entry) watch(gen uint64, cs *mcp.ClientSession) {
	e.wentAway(gen, cs, cs.Wait())
}

// errStreamLost is the cause recorded when the event stream of an HTTP
// upstream ends and cannot be opened again (see streamWatch).
var errStreamLost = errors.New("the upstream's event stream ended")

// streamLost handles the end of the event stream of connection generation
// gen as the end of the connection: it cannot hear of changes any more.
// The attempt that made the connection may still be publishing it.
func (e *Entry) streamLost(gen uint64) {
	for {
		e.mu.Lock()
		if e.conn != gen || e.state.Terminal() {
			e.mu.Unlock()
			return
		}
		if e.state == StateReady {
			cs := e.upstream
			e.mu.Unlock()
			e.wentAway(gen, cs, errStreamLost)
			return
		}
		ch := e.changed
		e.mu.Unlock()
		<-ch
	}
}

// errWentAway is the last error recorded when a connection ends by
// itself without a cause (see EntryInfo.LastErr).
var errWentAway = errors.New("the upstream ended the connection")

// wentAway handles the end, which the pool did not cause, of connection cs of
// generation gen (see watch).
func (e *Entry) wentAway(gen uint64, cs *mcp.ClientSession, err error) {
	e.mu.Lock()
	if e.conn != gen || e.state != StateReady {
		e.mu.Unlock()
		return // the pool closed or replaced it
	}
	if time.Since(e.connectedAt) > time.Minute {
		e.crashes = 0
	}
	e.lastErr = err
	if err == nil {
		e.lastErr = errWentAway
	}
	if e.crashes < e.pool.crashes {
		e.crashes++
		e.mu.Unlock()
		e.log.Warn("upstream went away, restarting", "err", err)
		if rerr := e.doRestart(context.Background(), false, gen); rerr != nil {
			e.log.Warn("restart after disconnect failed", "err", rerr)
		} else {
			e.log.Info("upstream restarted")
		}
		return
	}
	e.mu.Unlock()
	cause := fmt.Errorf("%w: %s", ErrDisconnected, e.label())
	if err != nil {
		cause = fmt.Errorf("%w: %s: %w", ErrDisconnected, e.label(), err)
	}
	if e.fail(gen, cause) {
		e.closeConn(context.Background(), cs)
	}
}

// fail moves a ready entry of connection generation gen to failed and
// withdraws its views. It reports whether it did (false when something else
// superseded that connection first).
func (e *Entry) fail(gen uint64, cause error) bool {
	e.fanMu.Lock()
	e.mu.Lock()
	if e.conn != gen || e.state.Terminal() {
		e.mu.Unlock()
		e.fanMu.Unlock()
		return false
	}
	e.err = cause
	e.upstream = nil
	e.conn++
	e.setState(StateFailed)
	handles := e.handleList()
	e.mu.Unlock()
	e.log.Warn("upstream connection failed", "err", cause)
	withdrawn := fmt.Errorf("server %s: %w: %w", e.spec.Name, ErrTerminal, cause)
	for _, h := range handles {
		h.att.Withdraw(withdrawn)
	}
	e.fanMu.Unlock()
	e.pool.forget(e)
	return true
}

// Restart closes the entry's connection, connects again, rediscovers and
// fans the new snapshot out to every attached view with that view's current
// settings. Views keep their registrations during the restart and accept
// settings changes, which the fan-out applies. Restart calls made while a
// restart has not yet reconnected join it (one made once it has, while it
// still fans out, restarts again). The restart itself does not depend on
// ctx (a caller giving up does not fail the entry for the others); ctx
// bounds the wait.
// Restart returns an error wrapping ErrTerminal for a failed or closed
// entry, and for a failed reconnect (which leaves the entry failed, its
// views withdrawn; the error wraps the connect error too).
func (e *Entry) Restart(ctx context.Context) error {
	return e.doRestart(ctx, true, 0)
}

// doRestart restarts the entry; one that is not explicit restarts
// connection generation gen only, not one that replaced it since.
func (e *Entry) doRestart(ctx context.Context, explicit bool, gen uint64) error {
	for {
		e.mu.Lock()
		if e.state.Terminal() {
			err := e.terminalErr()
			e.mu.Unlock()
			return err
		}
		if c := e.restart; c != nil && e.state == StateRestarting {
			// Joined while it has not published its connection. One that
			// has (it is still fanning out) made the connection that a
			// crash restart is now for, or the one an explicit restart
			// asks to replace: that takes a restart of its own.
			e.mu.Unlock()
			return wait(ctx, c)
		}
		if !explicit && e.conn != gen {
			e.mu.Unlock()
			return nil // replaced already
		}
		if e.state == StateReady {
			break
		}
		ch := e.changed // connecting: restart once it settles
		e.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c := &call{done: make(chan struct{})}
	e.restart = c
	if explicit {
		e.crashes = 0
	}
	old := e.upstream
	e.upstream = nil
	e.conn++
	gen = e.conn
	e.dirty = 0 // the restart rediscovers everything
	e.restarts++
	e.setState(StateRestarting)
	// Counted while e.mu is held: a pool Close either saw this entry
	// terminal above or waits for the attempt.
	done := e.pool.track()
	e.mu.Unlock()

	go func() {
		defer done()
		e.fanMu.Lock()
		e.mu.Lock()
		handles := e.handleList()
		e.mu.Unlock()
		for _, h := range handles {
			h.att.Hold()
		}
		e.fanMu.Unlock()
		e.closeConnNow(old)

		cs, snap, err := e.establish(gen)
		c.err = e.finishConnect(gen, cs, snap, err)
		e.mu.Lock()
		if e.restart == c {
			e.restart = nil
		}
		e.mu.Unlock()
		close(c.done)
	}()
	return wait(ctx, c)
}

func wait(ctx context.Context, c *call) error {
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// steady reports whether nothing is connecting, restarting or refreshing.
func (e *Entry) steady() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.state != StateConnecting && e.state != StateRestarting && !e.refreshing
}

// Settle waits until the entry is steady: not connecting or restarting, no
// snapshot refresh running or pending, and no fan-out or withdrawal still
// reaching views. Every list_changed received before Settle was called has
// then been discovered and fanned out. It returns ctx's error if ctx ends
// first.
func (e *Entry) Settle(ctx context.Context) error {
	for {
		e.mu.Lock()
		var ch chan struct{}
		switch e.state {
		case StateConnecting, StateRestarting:
			ch = e.changed
		case StateReady, StateFailed, StateClosed:
			if e.refreshing {
				ch = e.idle
			}
		default:
			panic(unknownState(e.state))
		}
		e.mu.Unlock()
		if ch == nil {
			// Wait out a fan-out or withdrawal in progress.
			e.fanMu.Lock()
			steady := e.steady()
			e.fanMu.Unlock()
			if steady {
				return nil
			}
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
