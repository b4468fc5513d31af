package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
)

// A subscription is the endpoint's hold on one resource URI for the
// clients subscribed to it.
type subscription struct {
	clients map[*mcp.ServerSession]struct{}
	server  string          // the server the URI routed to when up subscribed
	up      pool.Subscriber // what holds it upstream; nil while nothing does
}

// maxSubscriptions bounds the resource URIs one session's clients hold
// subscribed at once. Each is held upstream, on a connection other
// sessions may share: from protocol 2026-07-28 on as a request left open
// (over HTTP, a connection of its own), and a resource template matches
// as many URIs as a client cares to name.
const maxSubscriptions = 1024

// syncTimeout bounds each upstream request a background sync makes.
const syncTimeout = 10 * time.Second

// subscribe serves resources/subscribe: a URI the session sees (a resource,
// or one a resource template matches) is subscribed to upstream through its
// server's Subscriber, once for all the endpoint's clients.
func (e *Endpoint) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	e.subMu.Lock()
	defer e.subMu.Unlock()
	s := e.subs[uri]
	server, ok := e.resolve(uri)
	if !ok {
		return mcp.ResourceNotFoundError(uri)
	}
	if s == nil && len(e.subs) >= maxSubscriptions {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf(
			"session %q: its clients hold %d resource subscriptions, the most it takes; unsubscribe from one first", e.name, len(e.subs))}
	}
	if s == nil || s.up == nil || s.server != server {
		if s != nil {
			e.release(ctx, uri, s) // routed elsewhere since: the sync on its way would move it
		}
		up, err := e.hold(ctx, server, uri)
		if err != nil {
			return err
		}
		if s == nil {
			s = &subscription{clients: make(map[*mcp.ServerSession]struct{})}
			e.subs[uri] = s
			e.subscribed.Add(1)
		}
		s.server, s.up = server, up
	}
	s.clients[req.Session] = struct{}{}
	e.watch(req.Session)
	return nil
}

// watch has the subscriptions synced when ss, a subscribed client, leaves:
// the go-sdk forgets a departed client's subscriptions without calling
// unsubscribe, and the URIs it alone held would otherwise stay subscribed
// upstream until the next update or registry change. One goroutine per
// subscribed client waits for it. e.subMu is held.
func (e *Endpoint) watch(ss *mcp.ServerSession) {
	if ss == nil {
		return
	}
	if _, ok := e.watched[ss]; ok {
		return
	}
	if e.watched == nil {
		e.watched = make(map[*mcp.ServerSession]struct{})
	}
	e.watched[ss] = struct{}{}
	go func() {
		_ = ss.Wait() // returns once the server has forgotten ss
		e.subMu.Lock()
		delete(e.watched, ss)
		e.subMu.Unlock()
		e.resync()
	}()
}

// unsubscribe serves resources/unsubscribe; the endpoint's last client of
// a URI lets its upstream subscription go.
func (e *Endpoint) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	// From protocol 2026-07-28 on, the go-sdk calls this when the client
	// cancels its subscriptions/listen request, under that request's
	// context, already cancelled.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), syncTimeout)
	defer cancel()
	uri := req.Params.URI
	e.subMu.Lock()
	defer e.subMu.Unlock()
	if s := e.subs[uri]; s != nil {
		delete(s.clients, req.Session)
		if len(s.clients) == 0 {
			e.drop(ctx, uri, s)
		}
	}
	return nil
}

// drop forgets the subscription to uri and lets its upstream one go.
// e.subMu is held.
func (e *Endpoint) drop(ctx context.Context, uri string, s *subscription) {
	delete(e.subs, uri)
	e.subscribed.Add(-1)
	e.release(ctx, uri, s)
}

// release lets the upstream subscription of s go. e.subMu is held.
func (e *Endpoint) release(ctx context.Context, uri string, s *subscription) {
	if s.up == nil {
		return
	}
	if err := s.up.Unsubscribe(ctx, uri); err != nil {
		e.log.Debug("unsubscribing upstream", "server", s.server, "uri", uri, "err", err)
	}
	s.up = nil
}

// hold subscribes to uri through server's Subscriber.
func (e *Endpoint) hold(ctx context.Context, server, uri string) (pool.Subscriber, error) {
	t := e.upstream(server)
	if t.Subscriptions == nil {
		if t.Conn == nil {
			return nil, e.notReady(server)
		}
		return nil, notOffered(e.name, server)
	}
	err := t.Subscriptions.Subscribe(ctx, uri, e.updated)
	switch {
	case err == nil:
		return t.Subscriptions, nil
	case errors.Is(err, pool.ErrNoSubscriptions):
		return nil, notOffered(e.name, server)
	case errors.Is(err, pool.ErrNotReady):
		// The pool's error names the server and URI again: say what a
		// call says while its server restarts.
		return nil, e.notReady(server)
	}
	if werr := upstreamError(err); werr != nil {
		return nil, werr
	}
	return nil, fmt.Errorf("session %q, server %q: subscribe %q: %w: %v", e.name, server, uri, ErrUnavailable, e.redact(err))
}

// notOffered is the error of a subscription to a server that offers none.
func notOffered(session, server string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("session %q, server %q: the server offers no resource subscriptions", session, server)}
}

// resolve returns the server a resource URI routes to in this session: the
// server of the resource with that URI, or of a resource template that
// matches it.
func (e *Endpoint) resolve(uri string) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r, ok := e.resources.routes[uri]; ok {
		return r.server, true
	}
	// In the order the go-sdk's server tries templates for a read, so that
	// a URI two servers' templates match is subscribed where it is read.
	for _, tmpl := range e.templateOrder() {
		if matches := e.matcher(tmpl); matches != nil && matches(uri) {
			return e.templates.routes[tmpl].server, true
		}
	}
	return "", false
}

// templateOrder returns the session's resource templates in the order the
// go-sdk's server tries them for a read, sorted again only when the
// registrations changed (e.changes), not at each look. e.mu is held.
func (e *Endpoint) templateOrder() []string {
	if e.templateOrderAt != e.changes || e.templatesInOrder == nil {
		e.templatesInOrder = slices.Sorted(maps.Keys(e.templates.routes))
		e.templateOrderAt = e.changes
		e.templateSorts++
	}
	return e.templatesInOrder
}

// matcher returns the matcher of resource template tmpl (nil when it does
// not parse), parsed once: resolve looks at every template of the session
// for each subscription, sync and update, and an upstream may list 50,000.
// e.mu is held.
func (e *Endpoint) matcher(tmpl string) func(string) bool {
	if m, ok := e.matchers[tmpl]; ok {
		return m
	}
	if e.matchers == nil || len(e.matchers) >= 2*len(e.templates.routes)+64 {
		e.matchers = make(map[string]func(string) bool) // most are of templates gone since
	}
	m, ok := view.TemplateMatcher(tmpl)
	if !ok {
		m = nil
	}
	e.matchers[tmpl] = m
	e.templatesParsed++
	return m
}

// maxQueuedUpdates bounds the updates of distinct URIs waiting to be sent;
// more are dropped (a client that hears of a change reads the resource
// again, so an update is a hint, as progress is).
const maxQueuedUpdates = 256

// updated queues an upstream's notifications/resources/updated for the
// endpoint's clients subscribed to its URI. It runs on the upstream
// connection's notification goroutine, so it only queues: deliver
// sends, on a goroutine of its own while there is something to send. An
// update of a URI already queued replaces it. p is shared with the other
// sessions: the endpoint sends its own copy, without the reserved _meta
// keys of the upstream's hop.
func (e *Endpoint) updated(p *mcp.ResourceUpdatedNotificationParams) {
	q := &mcp.ResourceUpdatedNotificationParams{URI: p.URI, Meta: dropReserved(maps.Clone(p.Meta))}
	e.updMu.Lock()
	if i := slices.IndexFunc(e.updates, func(u *mcp.ResourceUpdatedNotificationParams) bool { return u.URI == q.URI }); i >= 0 {
		e.updates[i] = q
	} else if len(e.updates) < maxQueuedUpdates {
		e.updates = append(e.updates, q)
	}
	start := !e.delivering
	e.delivering = true
	e.updMu.Unlock()
	if start {
		go e.deliver()
	}
}

// routesChanged has the subscriptions synced after a registry change, from
// the shortest retry delay: a change is what a subscription left unheld
// waits for.
func (e *Endpoint) routesChanged() {
	e.retryReset.Store(true)
	e.resync()
}

// deliver sends the queued updates of URIs the session still sees, then
// returns.
func (e *Endpoint) deliver() {
	for {
		e.updMu.Lock()
		if len(e.updates) == 0 {
			e.delivering = false
			e.updMu.Unlock()
			return
		}
		p := e.updates[0]
		e.updates = e.updates[1:]
		e.updMu.Unlock()
		if _, ok := e.resolve(p.URI); !ok {
			continue // hidden by a reload since: the sync lets its subscription go
		}
		if err := e.srv.ResourceUpdated(context.Background(), p); err != nil {
			e.log.Debug("relaying resource update", "uri", p.URI, "err", err)
		}
	}
}

// resync has syncSubscriptions run soon, on a goroutine of its own, when the
// endpoint holds any subscription; calls made while one is pending share it.
func (e *Endpoint) resync() {
	if e.subscribed.Load() == 0 || !e.syncPending.CompareAndSwap(false, true) {
		return
	}
	go e.syncSubscriptions()
}

// The bounds of the delay before a sync that left a subscription without
// an upstream hold (its server's connection not ready or not yet bound)
// tries again; it doubles at each failed try.
const (
	minSyncRetry = 100 * time.Millisecond
	maxSyncRetry = 30 * time.Second
)

// syncSubscriptions brings the endpoint's upstream subscriptions in line
// with its clients and its routes: a URI whose clients have all gone (the
// go-sdk drops a client's subscriptions, without a call, when it leaves)
// is let go; one that no longer routes where its upstream subscription is
// held (hidden by a reload, or its server now reached through another
// connection) is let go there; and one the session sees is held where it
// routes now, which also notices a hold lost with a released handle or a
// closed connection. A URI the session sees but could not be held is tried
// again later, with a growing delay.
func (e *Endpoint) syncSubscriptions() {
	e.subMu.Lock()
	defer e.subMu.Unlock()
	e.syncPending.Store(false)
	if e.retryReset.Swap(false) {
		e.retryDelay = 0
	}
	live := make(map[*mcp.ServerSession]bool)
	for ss := range e.srv.Sessions() {
		live[ss] = true
	}
	retry := false
	for uri, s := range e.subs {
		for ss := range s.clients {
			if !live[ss] {
				delete(s.clients, ss)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), syncTimeout)
		if len(s.clients) == 0 {
			e.drop(ctx, uri, s)
			cancel()
			continue
		}
		server, ok := e.resolve(uri)
		var want pool.Subscriber
		if ok {
			want = e.upstream(server).Subscriptions
		}
		if s.up != nil && (s.up != want || s.server != server) {
			e.release(ctx, uri, s)
		}
		final := false // a server that offers no subscriptions: nothing to try again
		if want != nil {
			// Held already, this asks nothing of the upstream.
			if err := want.Subscribe(ctx, uri, e.updated); err == nil {
				s.server, s.up = server, want
			} else {
				s.up = nil
				final = errors.Is(err, pool.ErrNoSubscriptions)
				e.log.Debug("subscribing again", "server", server, "uri", uri, "err", err)
			}
		}
		retry = retry || ok && s.up == nil && !final
		cancel()
	}
	if !retry {
		e.retryDelay = 0
		if e.retryTimer != nil {
			e.retryTimer.Stop()
		}
		return
	}
	e.retryDelay = min(max(2*e.retryDelay, minSyncRetry), maxSyncRetry)
	if e.retryTimer == nil {
		e.retryTimer = time.AfterFunc(e.retryDelay, e.resync)
	} else {
		e.retryTimer.Reset(e.retryDelay) // runs resync again even once it has run
	}
}
