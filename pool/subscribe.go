package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ErrNoSubscriptions is returned by Handle.Subscribe when the upstream does
// not announce resource subscriptions (capabilities.resources.subscribe).
var ErrNoSubscriptions = errors.New("upstream offers no resource subscriptions")

// ErrNotReady is returned by Handle.Subscribe while the entry has no
// connection: connecting, restarting, or terminal.
var ErrNotReady = errors.New("upstream not ready")

// A Subscriber holds one session's resource subscriptions to a server on
// an upstream connection; a *Handle is one.
type Subscriber interface {
	// Subscribe asks for the upstream's updates of uri, passed to fn until
	// Unsubscribe. It returns an error wrapping ErrNoSubscriptions when the
	// upstream offers none, and one wrapping ErrNotReady when there is no
	// connection.
	Subscribe(ctx context.Context, uri string, fn UpdateFunc) error
	// Unsubscribe ends the subscription to uri.
	Unsubscribe(ctx context.Context, uri string) error
}

var _ Subscriber = (*Handle)(nil)

// An UpdateFunc receives an upstream's notifications/resources/updated for
// a URI its handle subscribed to. It runs on the go-sdk's notification
// goroutine and must not block; the params are shared by every receiver
// and must not be modified.
type UpdateFunc func(*mcp.ResourceUpdatedNotificationParams)

// Subscribe asks for the upstream's notifications/resources/updated about
// uri, which fn then receives until Unsubscribe or Release. The entry
// holds one upstream subscription per URI for all its handles: the first
// handle's Subscribe subscribes upstream (resources/subscribe, or from
// protocol 2026-07-28 on a subscriptions/listen request), later ones only
// join, and the last Unsubscribe lets it go (from protocol 2026-07-28 on,
// only when the connection closes: see keepListening). After a restart the
// entry subscribes its URIs again on the new connection (trying again
// while that fails); a handle may join a URI the entry holds while it
// restarts. Subscribing again replaces fn. Each upstream request is
// bounded by the entry's timeout. It returns ErrReleased on a released
// handle, ErrNotReady when the entry has no connection,
// ErrNoSubscriptions when the upstream does not offer subscriptions, or
// the upstream's error.
func (h *Handle) Subscribe(ctx context.Context, uri string, fn UpdateFunc) error {
	e := h.entry
	e.subMu.Lock()
	defer e.subMu.Unlock()
	if h.released.Load() {
		return fmt.Errorf("subscribe %s for session %q: %w", e.label(), h.follower.Session(), ErrReleased)
	}
	e.mu.Lock()
	cs, gen, held := e.upstream, e.conn, len(e.subs[uri]) > 0
	e.mu.Unlock()
	switch {
	case held:
		// Joins: the entry holds uri on this connection, or has it
		// subscribed by the restart under way or the resubscription
		// trying again.
	case cs == nil:
		return fmt.Errorf("server %s: subscribe %q: %w", e.spec.Name, uri, ErrNotReady)
	case !offersSubscriptions(cs):
		return fmt.Errorf("server %s: subscribe %q: %w", e.spec.Name, uri, ErrNoSubscriptions)
	default:
		if err := e.subscribeOn(ctx, gen, cs, uri); err != nil {
			return fmt.Errorf("server %s: subscribe %q: %w", e.spec.Name, uri, err)
		}
	}
	e.mu.Lock()
	if e.subs[uri] == nil {
		e.subs[uri] = make(map[*Handle]UpdateFunc)
	}
	e.subs[uri][h] = fn
	// A restart that published its connection while this one subscribed
	// on the old one did not see uri among the subscriptions to make again.
	if e.conn != gen && e.upstream != nil && e.subOn[uri] != e.conn {
		e.startResubscribe(e.conn, e.upstream, []string{uri})
	}
	e.mu.Unlock()
	return nil
}

// subscribeOn subscribes cs, the connection of generation gen, to uri
// within the entry's timeout, and records it. A connection a restart or
// close swapped out meanwhile gives ErrNotReady.
func (e *Entry) subscribeOn(ctx context.Context, gen uint64, cs *mcp.ClientSession, uri string) error {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	// From protocol 2026-07-28 on, the go-sdk's Subscribe opens a
	// subscriptions/listen request and returns at once: an upstream's
	// refusal then ends that request, and nobody hears of it.
	if err := subscribeWhile(ctx, cs, uri, func() bool { return e.current(cs) }); err != nil {
		if !e.current(cs) {
			return fmt.Errorf("%w (%v)", ErrNotReady, err)
		}
		return err
	}
	e.mu.Lock()
	if e.conn == gen {
		e.subOn[uri] = gen
	}
	e.mu.Unlock()
	return nil
}

// Unsubscribe ends the handle's subscription to uri; the entry's last one
// for uri unsubscribes upstream. Unsubscribing a URI the handle did not
// subscribe to does nothing. The error is the upstream's; none when a
// restart or close ended the connection meanwhile, since the subscription
// ended with it.
func (h *Handle) Unsubscribe(ctx context.Context, uri string) error {
	e := h.entry
	e.subMu.Lock()
	defer e.subMu.Unlock()
	return e.leave(ctx, h, uri)
}

// releaseUnsubscribeGrace bounds the upstream unsubscribes of a Release.
// (A subscribe under way on the entry, bounded by the entry's timeout,
// may hold a Release up longer.)
const releaseUnsubscribeGrace = 2 * time.Second

// unsubscribeAll ends every subscription of h (at Release).
func (h *Handle) unsubscribeAll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, releaseUnsubscribeGrace)
	defer cancel()
	e := h.entry
	e.subMu.Lock()
	defer e.subMu.Unlock()
	e.mu.Lock()
	var uris []string
	for uri, hs := range e.subs {
		if hs[h] != nil {
			uris = append(uris, uri)
		}
	}
	e.mu.Unlock()
	for _, uri := range uris {
		if err := e.leave(ctx, h, uri); err != nil {
			e.log.Debug("unsubscribing upstream", "uri", uri, "err", err)
		}
	}
}

// leave removes h from uri's subscribers and unsubscribes upstream when it
// was the last. e.subMu is held.
func (e *Entry) leave(ctx context.Context, h *Handle, uri string) error {
	e.mu.Lock()
	hs := e.subs[uri]
	if hs[h] == nil {
		e.mu.Unlock()
		return nil
	}
	delete(hs, h)
	last := len(hs) == 0
	if last {
		delete(e.subs, uri)
		delete(e.subOn, uri)
	}
	cs, gen := e.upstream, e.conn
	keep := last && cs != nil && e.keepListening(gen, cs, uri)
	e.mu.Unlock()
	if !last || keep || cs == nil || !offersSubscriptions(cs) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil && e.current(cs) {
		// (A connection a restart or close swapped out meanwhile took
		// the subscription with it, and no later one makes it again.)
		return fmt.Errorf("server %s: unsubscribe %q: %w", e.spec.Name, uri, err)
	}
	return nil
}

// maxKeptListens bounds the subscriptions/listen requests an entry keeps
// open on one connection after their last handle left (keepListening).
const maxKeptListens = 256

// keepListening reports whether the entry should leave the upstream
// subscription to uri on cs, connection generation gen, open although its
// last handle left, and records it if so. e.mu is held.
//
// From protocol 2026-07-28 on, a subscription is a subscriptions/listen
// request, and ending it (the go-sdk's Unsubscribe cancels it) makes a
// go-sdk v1.8.0 server forget the connection's list-change subscriptions
// too, whichever request asked for them (Server.subscriptionsListen
// deletes the session's entries when any listen request ends): the pool
// would hear no more tools, prompts or resources list_changed from that
// upstream, for any session. So the request is left open until the
// connection closes; a later Subscribe to uri is answered by the go-sdk
// client from the request it holds, and updates about uri meanwhile reach
// no handle. At most maxKeptListens URIs per connection are kept; beyond
// that the subscription is ended, as with any other server.
func (e *Entry) keepListening(gen uint64, cs *mcp.ClientSession, uri string) bool {
	r := cs.InitializeResult()
	if r == nil || r.ProtocolVersion < listenProtocol {
		return false
	}
	if e.kept == nil || e.keptOn != gen {
		e.kept, e.keptOn = make(map[string]struct{}), gen
	}
	if _, ok := e.kept[uri]; !ok && len(e.kept) >= maxKeptListens {
		return false
	}
	e.kept[uri] = struct{}{}
	return true
}

// listenProtocol is the first protocol version whose resource
// subscriptions are subscriptions/listen requests.
const listenProtocol = "2026-07-28"

// Subscriptions returns the URIs the entry's handles hold, sorted. Each is
// subscribed to upstream once per connection; after a restart, the new
// connection's subscriptions are made in the background.
func (e *Entry) Subscriptions() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.subscriptionsLocked()
}

// subscriptionsLocked is Subscriptions with e.mu held; nil when none.
func (e *Entry) subscriptionsLocked() []string {
	if len(e.subs) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(e.subs))
}

// offersSubscriptions reports whether the upstream of cs announces resource
// subscriptions.
func offersSubscriptions(cs *mcp.ClientSession) bool {
	r := cs.InitializeResult()
	return r != nil && r.Capabilities != nil && r.Capabilities.Resources != nil && r.Capabilities.Resources.Subscribe
}

// subscribeWhile subscribes cs to uri and, when current then reports that
// cs is no longer the connection in use (a restart or close replaced it
// meanwhile), unsubscribes again. go-sdk v1.8.0's Subscribe, from protocol
// 2026-07-28 on, leaves a goroutine waiting for an unsubscribe when it
// runs after the session's Close; closing code swaps the connection out
// before closing it, so a subscription made while current still holds is
// ended by that Close.
func subscribeWhile(ctx context.Context, cs *mcp.ClientSession, uri string, current func() bool) error {
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		return err
	}
	if !current() {
		_ = cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri})
	}
	return nil
}

// current reports whether cs is the entry's connection.
func (e *Entry) current(cs *mcp.ClientSession) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.upstream == cs
}

// The bounds of the delay before the entry tries again to subscribe a new
// connection to a URI it failed to; it doubles at each failed try.
const (
	minResubscribeRetry = time.Second
	maxResubscribeRetry = 30 * time.Second
)

// startResubscribe runs resubscribe on a goroutine the pool's Close waits
// for. e.mu is held, so that a Close either saw cs's generation replaced
// or waits for the goroutine.
func (e *Entry) startResubscribe(gen uint64, cs *mcp.ClientSession, uris []string) {
	done := e.pool.track()
	go func() {
		defer done()
		e.resubscribe(gen, cs, uris)
	}()
}

// resubscribe subscribes cs, the connection of generation gen, to uris
// that the entry's handles still hold and that are not subscribed on cs
// already (a handle may have let one go and subscribed again since). It
// tries the ones that fail again, with a growing delay, until cs is
// replaced or the entry closes. It takes e.subMu for one URI at a time, so
// that a Release or a Subscribe waits for one request at most.
func (e *Entry) resubscribe(gen uint64, cs *mcp.ClientSession, uris []string) {
	if !offersSubscriptions(cs) {
		e.log.Warn("upstream no longer offers resource subscriptions; its subscribers get no updates", "uris", uris)
		return
	}
	delay := minResubscribeRetry
	for {
		var failed []string
		for _, uri := range uris {
			e.subMu.Lock()
			e.mu.Lock()
			stale, skip := e.conn != gen, len(e.subs[uri]) == 0 || e.subOn[uri] == gen
			e.mu.Unlock()
			var err error
			if !stale && !skip {
				err = e.subscribeOn(e.stop, gen, cs, uri)
			}
			e.subMu.Unlock()
			if stale {
				return
			}
			if err != nil {
				e.log.Warn("subscribing the new connection", "uri", uri, "err", err, "retry", delay)
				failed = append(failed, uri)
			}
		}
		if len(failed) == 0 {
			return
		}
		select {
		case <-e.stop.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, maxResubscribeRetry)
		uris = failed
	}
}

// resourceUpdated passes an upstream's notifications/resources/updated, from
// connection generation gen, to the handles subscribed to its URI.
func (e *Entry) resourceUpdated(gen uint64, p *mcp.ResourceUpdatedNotificationParams) {
	if p == nil {
		return
	}
	e.mu.Lock()
	var fns []UpdateFunc
	if e.conn == gen {
		for _, fn := range e.subs[p.URI] {
			fns = append(fns, fn)
		}
	}
	e.mu.Unlock()
	for _, fn := range fns {
		fn(p)
	}
}
