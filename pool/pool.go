// Package pool keeps one healthy MCP connection per upstream transport and
// shares it between the sessions that use it, each through a [Follower].
//
// A [Spec] holds transport fields only; its [Spec.Fingerprint] is the
// transport identity, deep-copied into the [Entry] made for it. Pooled
// specs share one entry per fingerprint; an unpooled spec gets one per
// [Pool.Acquire]. An entry moves through typed states ([State]: connecting,
// ready, restarting, failed, closed), holds the upstream's listings as an
// immutable [Snapshot] rediscovered on list_changed, and fans each
// snapshot out to its attached views in order. A [Handle] is one session's
// reference: [Handle.RefreshMetadata] applies new settings without
// reconnecting, [Handle.Subscribe] joins the entry's one upstream
// subscription per URI, [Handle.Release] drops it. [Pool.Standby] makes a
// new connection beside a running one; a [Bridge] passes on what an
// upstream sends on its own.
//
// It dials upstreams and drives views; it touches no session endpoint and
// no HTTP server. Lock order: Handle.mu, Pool.mu, Entry.fanMu, Entry.mu;
// Entry.subMu is taken with Handle.mu or nothing held, and takes only
// Entry.mu; a view's lock is never taken with Pool.mu or Entry.mu held.
package pool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/internal/inflight"
	"github.com/wasmhost/wasmhost/internal/opcount"
)

// Errors returned by the pool. They are wrapped with the server, session or
// entry they concern; test them with errors.Is.
var (
	// ErrReleased is returned by Handle methods called after Release.
	ErrReleased = errors.New("handle released")
	// ErrTerminal is returned when an entry is failed or closed: refreshing
	// its handles or restarting it changes nothing. It also wraps the cause
	// recorded in views withdrawn from a failed entry.
	ErrTerminal = errors.New("pool entry is failed or closed")
	// ErrClosed is returned by Acquire after Close.
	ErrClosed = errors.New("pool closed")
	// ErrInvalidSpec is returned by Acquire (and Spec.Validate) for a spec
	// without a name or without exactly one transport.
	ErrInvalidSpec = errors.New("invalid transport spec")
	// ErrDisconnected is the cause recorded when an upstream connection ends
	// without the pool closing it and no automatic restart is allowed.
	ErrDisconnected = errors.New("upstream disconnected")
)

// DefaultTimeout bounds connect plus discovery when neither the spec nor
// Options sets a timeout.
const DefaultTimeout = 30 * time.Second

// Options configure a pool. The zero value works: default dialer, fresh
// counters, slog.Default.
type Options struct {
	// Dialer makes transports; nil means DefaultDialer.
	Dialer Dialer
	// Counters counts the pool's and its views' work; nil means a fresh
	// set (see Pool.Counters). Pass the same Counters to the views.
	Counters *opcount.Counters
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Client is the implementation the pool announces upstream; nil means
	// {Name: "wasmhost", Version: "dev"}.
	Client *mcp.Implementation
	// Timeout is used for specs whose Timeout is 0; 0 means DefaultTimeout.
	Timeout time.Duration
	// CrashRestarts is how many times in a row an entry restarts by itself
	// after its upstream went away (a connection that stayed up for a
	// minute resets the count). 0 means never: the entry fails and the
	// caller reacquires.
	CrashRestarts int
	// OnProgress, when set, receives every notifications/progress an
	// upstream sends, from any transport kind (the daemon routes them back
	// to the calls that asked for progress).
	OnProgress func(context.Context, *mcp.ProgressNotificationClientRequest)
	// Bridge, when set, passes the requests and log messages an upstream
	// sends on its own to the client whose call caused them (see Bridge);
	// nil refuses them, announcing no such capability upstream, and logs
	// the log messages for the operator.
	Bridge Bridge
}

// A Pool shares upstream MCP connections between session views. It is safe
// for concurrent use.
type Pool struct {
	dial     Dialer
	counters *opcount.Counters
	log      *slog.Logger
	client   *mcp.Implementation
	timeout  time.Duration
	crashes  int
	progress func(context.Context, *mcp.ProgressNotificationClientRequest)
	bridge   Bridge

	mu       sync.Mutex
	closed   bool
	pooled   map[string]*Entry   // live pooled entries by fingerprint
	all      map[*Entry]struct{} // entries not yet closed
	unpooled map[string]int      // last unpooled sequence number per name

	// work counts what Close must see finished (see track): connection
	// attempts (first connects and restarts) and upstream connections being
	// closed, possibly in the background after their caller's context
	// ended (startClose). It is never closed: a close may start while Close
	// waits. Its lock is a leaf: taken with p.mu or an entry's mu held or
	// not.
	work inflight.Gate

	// closers holds the closer beneath each upstream connection not yet
	// closed (*mcp.ClientSession to *closer), for a restart to close it
	// at once (Entry.closeConnNow).
	closers sync.Map
}

// New returns an empty pool.
func New(opts Options) *Pool {
	p := &Pool{
		dial:     opts.Dialer,
		counters: opts.Counters,
		log:      opts.Logger,
		client:   opts.Client,
		timeout:  opts.Timeout,
		crashes:  opts.CrashRestarts,
		progress: opts.OnProgress,
		bridge:   opts.Bridge,
		pooled:   make(map[string]*Entry),
		all:      make(map[*Entry]struct{}),
		unpooled: make(map[string]int),
	}
	if p.dial == nil {
		p.dial = DefaultDialer
	}
	if p.counters == nil {
		p.counters = &opcount.Counters{}
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.client == nil {
		p.client = &mcp.Implementation{Name: "wasmhost", Version: "dev"}
	}
	if p.timeout <= 0 {
		p.timeout = DefaultTimeout
	}
	return p
}

// Counters returns the pool's operation counters.
func (p *Pool) Counters() *opcount.Counters { return p.counters }

// Acquire attaches v to a connection for spec and returns the handle that
// holds it. A pooled spec joins the live entry with the same fingerprint or
// starts one; an unpooled spec always starts its own. Acquire waits (within
// ctx) for the entry to be ready, then applies the entry's snapshot to v.
// Connecting does not depend on ctx: a caller that gives up does not fail
// the connection for other callers waiting on it.
//
// A policy failure while applying the snapshot does not fail Acquire: the
// view fails closed and reports it through its Err, and the handle is live.
// Acquire fails if the pool is closed, the spec is invalid, v is attached
// elsewhere ([Follower.AttachTo] fails: view.ErrAttached), or the
// connection cannot be made.
func (p *Pool) Acquire(ctx context.Context, spec Spec, v Follower) (*Handle, error) {
	if v == nil {
		return nil, errors.New("pool: acquire: nil view")
	}
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("pool: acquire for session %q: %w", v.Session(), err)
	}
	spec = spec.Clone()
	identity := spec.Fingerprint()

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, fmt.Errorf("pool: acquire %s for session %q: %w", spec.Name, v.Session(), ErrClosed)
	}
	e := p.refEntry(spec, identity)
	p.mu.Unlock()

	att, err := v.AttachTo(e)
	if err != nil {
		p.unref(ctx, e)
		return nil, fmt.Errorf("pool: acquire %s: %w", e.label(), err)
	}
	if err := e.waitReady(ctx); err != nil {
		att.Detach()
		p.unref(ctx, e)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("pool: acquire %s for session %q: %w", e.label(), v.Session(), err)
		}
		return nil, fmt.Errorf("pool: session %q: %w", v.Session(), err) // err names the entry
	}
	// waitReady returned with fanMu and mu held and the entry ready.
	h := &Handle{pool: p, entry: e, follower: v, att: att}
	e.handles[h] = struct{}{}
	snap := e.snap
	e.mu.Unlock()
	if err := att.Apply(ctx, snap); err != nil {
		e.log.Warn("view failed closed on attach", "session", v.Session(), "err", err)
	}
	e.fanMu.Unlock()
	p.counters.Acquires.Add(1)
	return h, nil
}

// entryFor returns the entry a new handle for spec joins, creating it when
// needed. p.mu is held.
func (p *Pool) entryFor(spec Spec, identity string) (e *Entry, created bool) {
	if spec.Pooled {
		if e := p.pooled[identity]; e != nil && !e.State().Terminal() {
			return e, false
		}
		e = p.newEntry(identity, spec, identity)
		p.pooled[identity] = e
	} else {
		p.unpooled[spec.Name]++
		e = p.newEntry(fmt.Sprintf("%s::unpooled-%d", spec.Name, p.unpooled[spec.Name]), spec, identity)
	}
	p.all[e] = struct{}{}
	return e, true
}

// forget removes a terminal entry from the fingerprint map so the next
// Acquire starts afresh.
func (p *Pool) forget(e *Entry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pooled[e.identity] == e {
		delete(p.pooled, e.identity)
	}
}

// unref drops one reference to e; the last one closes it.
func (p *Pool) unref(ctx context.Context, e *Entry) {
	p.mu.Lock()
	e.mu.Lock()
	e.refs--
	if e.refs > 0 {
		e.mu.Unlock()
		p.mu.Unlock()
		return
	}
	if p.pooled[e.identity] == e {
		delete(p.pooled, e.identity)
	}
	delete(p.all, e)
	cs := e.closeLocked(nil)
	e.mu.Unlock()
	p.mu.Unlock()
	e.closeConn(ctx, cs)
}

// EntryInfo describes an entry at one instant.
type EntryInfo struct {
	// ID is the lifecycle id: the fingerprint for a pooled entry,
	// "NAME::unpooled-N" for an unpooled one.
	ID string
	// Identity is the fingerprint captured when the entry was created.
	Identity string
	Server   string
	Pooled   bool
	State    State
	// Refs counts handles plus acquirers still waiting for the entry.
	Refs int
	// Views counts attached handles.
	Views int
	// Version is the current snapshot's version (0 before the first).
	Version uint64
	// Err is why the entry failed, if it did.
	Err error
	// Restarts counts the restarts the entry has begun: after its upstream
	// went away (Options.CrashRestarts) and explicit ones (Entry.Restart).
	Restarts int
	// LastErr is the latest reason the entry's connection went away or
	// could not be made, kept after a restart succeeds; nil if none.
	LastErr error
	// Subscriptions are the resource URIs the entry's handles hold, sorted,
	// while the entry is ready (see Entry.Subscriptions).
	Subscriptions []string
}

// Entries describes every entry not yet closed, sorted by ID.
func (p *Pool) Entries() []EntryInfo {
	p.mu.Lock()
	entries := make([]*Entry, 0, len(p.all))
	for e := range p.all {
		entries = append(entries, e)
	}
	p.mu.Unlock()
	out := make([]EntryInfo, len(entries))
	for i, e := range entries {
		out[i] = e.Info()
	}
	slices.SortFunc(out, func(a, b EntryInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Close closes every entry: views still attached are withdrawn (their
// registrations deleted, ErrClosed recorded), connections are closed, and
// later Acquires fail with ErrClosed. Handles stay valid to Release. Close
// cuts short the connection attempts under way (first connects and
// restarts) and waits, within ctx, for them to end and for connections to
// close.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	entries := make([]*Entry, 0, len(p.all))
	for e := range p.all {
		entries = append(entries, e)
	}
	clear(p.all)
	clear(p.pooled)
	p.mu.Unlock()

	cause := fmt.Errorf("%w: %w", ErrTerminal, ErrClosed)
	for _, e := range entries {
		e.fanMu.Lock()
		e.mu.Lock()
		handles := e.handleList()
		cs := e.closeLocked(cause)
		e.mu.Unlock()
		for _, h := range handles {
			h.att.Withdraw(fmt.Errorf("server %s: %w", e.spec.Name, cause))
		}
		e.fanMu.Unlock()
		e.closeConn(ctx, cs)
	}
	// Wait, within ctx, for every connection attempt and every close still
	// going on, including those a release or restart left to finish in the
	// background: after Close returns nil no upstream connection or process is
	// left behind. Closing the entries cut their attempts short.
	_ = p.work.Wait(ctx) // its error is ctx's
	return ctx.Err()
}

// track counts one piece of work Close must wait for and returns the
// function that ends it; call it exactly once.
func (p *Pool) track() (done func()) {
	p.work.Enter() // never closed: always admits
	return p.work.Leave
}

// startClose closes cs in the background, tracked for Close, and returns
// the channel of its result.
func (p *Pool) startClose(cs *mcp.ClientSession) <-chan error {
	end := p.track()
	done := make(chan error, 1)
	go func() {
		err := cs.Close()
		p.closers.Delete(cs)
		end()
		done <- err
	}()
	return done
}

// refEntry returns the entry of spec's identity with one more reference,
// making it, and starting its connection, if there was none. p.mu is held.
func (p *Pool) refEntry(spec Spec, identity string) *Entry {
	e, created := p.entryFor(spec, identity)
	e.mu.Lock()
	e.refs++
	e.mu.Unlock()
	if created {
		// Counted before p.mu is let go, so a Close that follows waits
		// for the attempt (which the entry's close cuts short).
		done := p.track()
		go func() {
			defer done()
			e.connect()
		}()
	}
	return e
}
