package session_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/session"
)

// legacy has a client speak protocol 2025-11-25, where a subscription is a
// request answered before it returns.
var legacy = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}

// waitUpdated waits for a notifications/resources/updated and returns its
// URI.
func (c *client) waitUpdated(t *testing.T) string {
	t.Helper()
	select {
	case uri := <-c.updated:
		return uri
	case <-time.After(mcptest.EventWithin):
		t.Fatal("no notifications/resources/updated")
		return ""
	}
}

func (c *client) subscribe(t *testing.T, uri string) {
	t.Helper()
	require.NoError(t, c.cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: uri}))
}

// upstreamSubscribed waits until the upstream counts n subscriptions to uri.
func (f *fixture) upstreamSubscribed(t *testing.T, uri string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return f.demo.Subscribed()[uri] == n }, mcptest.EventWithin, 5*time.Millisecond,
		"upstream subscriptions to %s: want %d, have %v", uri, n, f.demo.Subscribed())
}

func TestSubscriptionsShareOneUpstream(t *testing.T) {
	t.Parallel()
	for name, newF := range transportFixtures {
		t.Run(name, func(t *testing.T) {
			// Clients of protocol 2025-11-25, whose subscribe and unsubscribe
			// are answered once done (TestSubscriptionSurvivesRestart has a
			// client of the newest protocol).
			f := newF(t)
			alice := f.connectWith("alice", `{}`, legacy)
			bob := f.connectWith("bob", `{}`, legacy)
			require.True(t, alice.cs.InitializeResult().Capabilities.Resources.Subscribe, "subscriptions announced")

			const welcome, weather = "demo://notes/welcome", "demo://notes/weather"
			alice.subscribe(t, welcome)
			bob.subscribe(t, welcome)
			alice.subscribe(t, weather) // no such resource: the note template matches it
			f.upstreamSubscribed(t, welcome, 1)
			f.upstreamSubscribed(t, weather, 1)

			// One upstream notification reaches every session subscribed.
			_, err := bob.call(t, "demo__write_note", map[string]any{"name": "welcome", "text": "hi"})
			require.NoError(t, err)
			assert.Equal(t, welcome, alice.waitUpdated(t))
			assert.Equal(t, welcome, bob.waitUpdated(t))

			// The upstream subscription lasts while a session holds it.
			require.NoError(t, alice.cs.Unsubscribe(t.Context(), &mcp.UnsubscribeParams{URI: welcome}))
			_, err = bob.call(t, "demo__write_note", map[string]any{"name": "welcome", "text": "again"})
			require.NoError(t, err)
			assert.Equal(t, welcome, bob.waitUpdated(t))
			f.upstreamSubscribed(t, welcome, 1)
			require.NoError(t, bob.cs.Unsubscribe(t.Context(), &mcp.UnsubscribeParams{URI: welcome}))
			// The pool lets the upstream subscription go, but from protocol
			// 2026-07-28 on keeps its listen request open until the
			// connection closes (pool.Entry.keepListening).
			kept := 0
			if alice.handle.Conn().InitializeResult().ProtocolVersion >= "2026-07-28" {
				kept = 1
			}
			f.upstreamSubscribed(t, welcome, kept)
			if kept == 1 { // kept, not merely not yet ended
				require.Never(t, func() bool { return f.demo.Subscribed()[welcome] != 1 }, 200*time.Millisecond, 5*time.Millisecond,
					"the listen request was ended: %v", f.demo.Subscribed())
			}

			// Nobody hears of welcome any more; both hear of weather, and
			// notifications keep the upstream's order, so a welcome sent by
			// mistake would come first.
			bob.subscribe(t, weather)
			_, err = bob.call(t, "demo__write_note", map[string]any{"name": "welcome", "text": "unheard"})
			require.NoError(t, err)
			_, err = bob.call(t, "demo__write_note", map[string]any{"name": "weather", "text": "rain"})
			require.NoError(t, err)
			assert.Equal(t, weather, alice.waitUpdated(t))
			assert.Equal(t, weather, bob.waitUpdated(t))
		})
	}
}

func TestSubscriptionRefusals(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.connect("alice", `{}`)
	err := connectServer(t, c.ep.Server(), legacy).Subscribe(t.Context(), &mcp.SubscribeParams{URI: "other://nothing"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not found")

	// A server reached without subscriptions (Target.Subscriptions nil).
	// (A client of protocol 2026-07-28 on subscribes with a request the
	// go-sdk does not wait for, so it hears of no refusal.)
	ep := session.New(session.Options{Name: "s", Logger: quiet, Upstream: func(string) session.Target {
		return session.Target{Conn: c.handle.Conn()}
	}})
	ep.PutResources("up", []*mcp.Resource{{URI: "x://a", Name: "a"}})
	err = connectServer(t, ep.Server(), legacy).Subscribe(t.Context(), &mcp.SubscribeParams{URI: "x://a"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `session "s", server "up": the server offers no resource subscriptions`)
}

// A subscription made while its server's connection restarts is refused
// as a call would be then: once, without the pool's own wording.
func TestSubscriptionWhileRestarting(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	upCS := f.connect("x", `{}`).handle.Conn()
	ep := session.New(session.Options{Name: "s", Logger: quiet, Upstream: func(string) session.Target {
		return session.Target{Conn: upCS, Subscriptions: notReadySubscriber{}}
	}})
	ep.PutResources("up", []*mcp.Resource{{URI: "x://a", Name: "a"}})
	err := connectServer(t, ep.Server(), legacy).Subscribe(t.Context(), &mcp.SubscribeParams{URI: "x://a"})
	require.Error(t, err)
	assert.ErrorContains(t, err, `session "s", server "up": upstream unavailable (connecting or restarting; try again)`)
	assert.NotContains(t, err.Error(), "not ready")
	assert.Equal(t, 1, strings.Count(err.Error(), `"up"`), err.Error())
}

// A notReadySubscriber answers as a pool entry without a connection does.
type notReadySubscriber struct{}

func (notReadySubscriber) Subscribe(_ context.Context, uri string, _ pool.UpdateFunc) error {
	return fmt.Errorf("server up: subscribe %q: %w", uri, pool.ErrNotReady)
}

func (notReadySubscriber) Unsubscribe(context.Context, string) error { return nil }

func TestSubscriptionSurvivesRestart(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.connect("alice", `{}`)
	c.subscribe(t, "demo://notes/welcome")
	f.upstreamSubscribed(t, "demo://notes/welcome", 1)
	before := c.handle.Conn()
	require.NoError(t, c.handle.Entry().Restart(t.Context()))
	require.NotSame(t, before, c.handle.Conn())
	require.Eventually(t, func() bool {
		if _, err := c.call(t, "demo__write_note", map[string]any{"name": "welcome", "text": "after"}); err != nil {
			return false
		}
		select {
		case uri := <-c.updated:
			return uri == "demo://notes/welcome"
		case <-time.After(50 * time.Millisecond):
			return false
		}
	}, mcptest.EventWithin, time.Millisecond, "the entry subscribes again on its new connection")
	assert.Equal(t, []string{"demo://notes/welcome"}, c.handle.Entry().Subscriptions())
}

// A fakeSubscriber records what an endpoint asks of it.
type fakeSubscriber struct {
	mu    sync.Mutex
	calls []string
	fns   map[string]pool.UpdateFunc
}

// Subscribe records a subscription it did not hold, as a connection
// would subscribe upstream only then.
func (s *fakeSubscriber) Subscribe(_ context.Context, uri string, fn pool.UpdateFunc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fns[uri] == nil {
		s.calls = append(s.calls, "+"+uri)
	}
	if s.fns == nil {
		s.fns = make(map[string]pool.UpdateFunc)
	}
	s.fns[uri] = fn
	return nil
}

func (s *fakeSubscriber) Unsubscribe(_ context.Context, uri string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "-"+uri)
	delete(s.fns, uri)
	return nil
}

func (s *fakeSubscriber) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func (s *fakeSubscriber) updateMeta(uri string, meta mcp.Meta) {
	s.mu.Lock()
	fn := s.fns[uri]
	s.mu.Unlock()
	fn(&mcp.ResourceUpdatedNotificationParams{URI: uri, Meta: meta})
}

// TestSubscriptionsFollowRoutesAndClients drives one endpoint's
// subscriptions through its registry and its clients: what the upstream
// holds follows what the session sees, where it routes, and who is still
// there.
func TestSubscriptionsFollowRoutesAndClients(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	upCS := f.connect("x", `{}`).handle.Conn() // any live upstream session
	first, second := &fakeSubscriber{}, &fakeSubscriber{}
	var mu sync.Mutex
	current := first
	ep := session.New(session.Options{Name: "s", Logger: quiet, Upstream: func(string) session.Target {
		mu.Lock()
		defer mu.Unlock()
		if current == nil {
			return session.Target{Conn: upCS}
		}
		return session.Target{Conn: upCS, Subscriptions: current}
	}})
	ep.PutResources("up", []*mcp.Resource{{URI: "x://a", Name: "a"}})
	ep.PutResourceTemplates("up", []*mcp.ResourceTemplate{{URITemplate: "x://t/{id}", Name: "t"}})

	updates := make(chan *mcp.ResourceUpdatedNotificationParams, 10)
	connect := func(version string) (*mcp.ClientSession, *mcp.ServerSession) {
		ct, st := mcp.NewInMemoryTransports()
		ss, err := ep.Server().Connect(t.Context(), st, nil)
		require.NoError(t, err)
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, &mcp.ClientOptions{
			Logger:                 quiet,
			ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { updates <- r.Params },
		}).Connect(t.Context(), ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
		require.NoError(t, err)
		t.Cleanup(func() { _ = cs.Close(); _ = ss.Wait() })
		return cs, ss
	}
	calls := func(want ...string) {
		t.Helper()
		require.Eventually(t, func() bool { return slices.Equal(first.seen(), want) }, mcptest.EventWithin, 5*time.Millisecond)
	}

	cs, ss := connect("2025-11-25")
	require.NoError(t, cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: "x://a"}))
	require.NoError(t, cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: "x://t/7"}))
	calls("+x://a", "+x://t/7")
	// The upstream hop's reserved _meta keys stay behind (the params are
	// shared with every other session the update goes to).
	first.updateMeta("x://a", mcp.Meta{"io.modelcontextprotocol/subscriptionId": 3.0, "example.com/k": "v"})
	got := <-updates
	assert.Equal(t, "x://a", got.URI)
	assert.Equal(t, mcp.Meta{"example.com/k": "v"}, got.Meta)

	// Hidden: let go upstream. Seen again: subscribed again, for the client
	// that never unsubscribed.
	ep.DeleteResources("up", []string{"x://a"})
	calls("+x://a", "+x://t/7", "-x://a")
	ep.PutResources("up", []*mcp.Resource{{URI: "x://a", Name: "a"}})
	calls("+x://a", "+x://t/7", "-x://a", "+x://a")

	// The server now reached through another connection. (The sync that
	// subscribed x://a again may still be going through x://t/7 and move it
	// itself: the order of the two moves is not fixed.)
	mu.Lock()
	current = second
	mu.Unlock()
	ep.DeleteResourceTemplates("up", []string{"x://nothing/{id}"}) // any registry call has the routes looked at
	require.Eventually(t, func() bool { return len(first.seen()) == 6 && len(second.seen()) == 2 }, mcptest.EventWithin, 5*time.Millisecond)
	assert.ElementsMatch(t, []string{"-x://a", "-x://t/7"}, first.seen()[4:])
	assert.ElementsMatch(t, []string{"+x://a", "+x://t/7"}, second.seen())

	// The server bound to no connection for a while (a reload between
	// releasing one handle and publishing the next): the subscriptions are
	// let go and, with no registry change to say so, held again on the
	// next connection by a later try.
	third := &fakeSubscriber{}
	mu.Lock()
	current = nil
	mu.Unlock()
	ep.DeleteResourceTemplates("up", []string{"x://nothing/{id}"})
	require.Eventually(t, func() bool { return len(second.seen()) == 4 }, mcptest.EventWithin, 5*time.Millisecond)
	assert.ElementsMatch(t, []string{"-x://a", "-x://t/7"}, second.seen()[2:])
	mu.Lock()
	current = third
	mu.Unlock()
	require.Eventually(t, func() bool { return len(third.seen()) == 2 }, mcptest.EventWithin, 5*time.Millisecond)
	second = third

	// Clients that leave without unsubscribing: their subscriptions go as
	// soon as the server has seen them go, with no update or registry
	// change to have them looked for.
	other, otherSS := connect("2025-11-25")
	require.NoError(t, other.Subscribe(t.Context(), &mcp.SubscribeParams{URI: "x://t/8"}))
	require.Eventually(t, func() bool { return len(second.seen()) == 3 }, mcptest.EventWithin, 5*time.Millisecond)
	require.NoError(t, other.Close())
	require.NoError(t, cs.Close())
	_, _ = otherSS.Wait(), ss.Wait()
	require.Eventually(t, func() bool { return len(second.seen()) == 6 }, mcptest.EventWithin, 5*time.Millisecond, "%v", second.seen())
	assert.ElementsMatch(t, []string{"+x://a", "+x://t/7", "+x://t/8", "-x://a", "-x://t/7", "-x://t/8"}, second.seen())
}

// TestSubscriptionRoutesLikeReads: a URI the templates of two servers
// match is subscribed where the go-sdk sends its reads (the first template
// in sorted order), and stays there however often the routes are looked
// at.
func TestSubscriptionRoutesLikeReads(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	upCS := f.connect("x", `{}`).handle.Conn()
	subs := map[string]*fakeSubscriber{"near": {}, "far": {}}
	ep := session.New(session.Options{Name: "s", Logger: quiet, Upstream: func(server string) session.Target {
		return session.Target{Conn: upCS, Subscriptions: subs[server]}
	}})
	ep.PutResourceTemplates("far", []*mcp.ResourceTemplate{{URITemplate: "x://{+rest}", Name: "any"}})
	ep.PutResourceTemplates("near", []*mcp.ResourceTemplate{{URITemplate: "x://t/{id}", Name: "t"}})
	cs := connectServer(t, ep.Server(), legacy)
	require.NoError(t, cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: "x://t/9"}))
	for range 20 {
		ep.SyncSubscriptions()
	}
	assert.Equal(t, []string{"+x://t/9"}, subs["near"].seen())
	assert.Empty(t, subs["far"].seen())
}

// subscribingEndpoint is session "s" whose one server reaches a live
// upstream and holds its subscriptions in sub.
func subscribingEndpoint(t *testing.T) (ep *session.Endpoint, sub *fakeSubscriber) {
	f := newFixture(t)
	upCS := f.connect("x", `{}`).handle.Conn()
	sub = &fakeSubscriber{}
	ep = session.New(session.Options{Name: "s", Logger: quiet, Upstream: func(string) session.Target {
		return session.Target{Conn: upCS, Subscriptions: sub}
	}})
	return ep, sub
}

// TestSubscriptionsPerSessionAreBounded: the clients of one session hold
// at most session.MaxSubscriptions resource URIs at once; one more is
// refused, naming the session and the bound, and never reaches the
// upstream, while a URI already held can still be subscribed to by
// another client, and one let go makes room. Before, a client could
// subscribe to as many URIs as a resource template matches, each held
// upstream (from protocol 2026-07-28 on, a request left open: over HTTP a
// connection each), on a connection other sessions share.
func TestSubscriptionsPerSessionAreBounded(t *testing.T) {
	t.Parallel()
	ep, sub := subscribingEndpoint(t)
	ep.PutResourceTemplates("up", []*mcp.ResourceTemplate{{URITemplate: "x://t/{id}", Name: "t"}})
	connect := func() *mcp.ClientSession {
		// Of an older protocol: from 2026-07-28 on, a subscription's
		// refusal ends its listen request, and Subscribe does not wait.
		return connectServer(t, ep.Server(), &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	}
	a, b := connect(), connect()
	for i := range session.MaxSubscriptions {
		require.NoError(t, a.Subscribe(t.Context(), &mcp.SubscribeParams{URI: fmt.Sprintf("x://t/%d", i)}))
	}
	err := a.Subscribe(t.Context(), &mcp.SubscribeParams{URI: "x://t/one-more"})
	require.Error(t, err)
	assert.ErrorContains(t, err, `session "s"`)
	assert.ErrorContains(t, err, fmt.Sprint(session.MaxSubscriptions))
	assert.Len(t, sub.seen(), session.MaxSubscriptions, "the refused URI never reached the upstream")
	require.NoError(t, b.Subscribe(t.Context(), &mcp.SubscribeParams{URI: "x://t/0"}), "a URI already held")
	require.NoError(t, a.Unsubscribe(t.Context(), &mcp.UnsubscribeParams{URI: "x://t/1"}))
	require.NoError(t, b.Subscribe(t.Context(), &mcp.SubscribeParams{URI: "x://t/one-more"}), "room made")
}

// TestSubscriptionRoutingCompilesEachTemplateOnce: finding where a
// subscribed URI routes (at each subscribe, each sync and each update
// delivered) parses each of the session's resource templates once, and
// sorts them once while the registrations stay, not at every look. Before, each look parsed every template into a regular
// expression again: with the 50,000 templates an upstream may list, about
// 0.8 s of CPU under the endpoint's lock, for each update the upstream
// sends.
func TestSubscriptionRoutingCompilesEachTemplateOnce(t *testing.T) {
	t.Parallel()
	ep, sub := subscribingEndpoint(t)
	const n = 200
	var templates []*mcp.ResourceTemplate
	for i := range n {
		templates = append(templates, &mcp.ResourceTemplate{URITemplate: fmt.Sprintf("x%03d://t/{id}", i), Name: fmt.Sprint(i)})
	}
	ep.PutResourceTemplates("up", templates)
	updates := make(chan *mcp.ResourceUpdatedNotificationParams, 1)
	cs := connectServerWith(t, ep.Server(), &mcp.ClientOptions{Logger: quiet,
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { updates <- r.Params },
	}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	uri := fmt.Sprintf("x%03d://t/7", n-1) // matched by the last template looked at
	require.NoError(t, cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: uri}))
	for range 20 {
		sub.updateMeta(uri, nil)
		select {
		case got := <-updates:
			require.Equal(t, uri, got.URI)
		case <-time.After(mcptest.Within(t, mcptest.EventWithin)):
			t.Fatal("no update delivered")
		}
	}
	assert.LessOrEqual(t, ep.TemplatesParsed(), uint64(n), "templates parsed for 21 looks at %d templates", n)
	assert.LessOrEqual(t, ep.TemplateSorts(), uint64(1), "templates sorted for 21 looks with no registration between")
}
