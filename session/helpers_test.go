package session_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/session"
	"github.com/wasmhost/wasmhost/view"
)

var quiet = slog.New(slog.DiscardHandler)

// newUpstream returns the demo server built from this repo plus mcptest's
// test tools ("progress", "meta", "block", "fail"), as an mcptest.Upstream,
// and the demo server itself (whose subscriptions tests count).
func newUpstream() (*mcptest.Upstream, *demoserver.Server) {
	demo := demoserver.New()
	return mcptest.NewUpstream(mcptest.UpstreamConfig{Name: "demo", Server: demo.MCP(), TestTools: true}), demo
}

// dialer connects a fresh server session of u for each dial; u.KillAll
// breaks their pipes.
func dialer(u *mcptest.Upstream) pool.Dialer {
	return func(ctx context.Context, _ pool.Spec) (mcp.Transport, error) { return u.Transport(ctx) }
}

// A fixture is a pool on one upstream ("demo") and sessions served by
// endpoints, each with a connected client.
type fixture struct {
	t        *testing.T
	up       *mcptest.Upstream
	demo     *demoserver.Server // up's server
	pool     *pool.Pool
	relay    *session.ProgressRelay
	counters *opcount.Counters
	// keepAlive is the endpoints' Options.KeepAlive (0: the default).
	keepAlive time.Duration
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	up, demo := newUpstream()
	relay := session.NewProgressRelay()
	f := newFixtureWith(t, up, relay, relay.Dialer(dialer(up)))
	f.demo = demo
	return f
}

// newHTTPFixture is newFixture with the upstream served over streamable
// HTTP on loopback instead of in-memory transports.
func newHTTPFixture(t *testing.T) *fixture {
	t.Helper()
	return newServedFixture(t, func(srv *mcp.Server) http.Handler {
		return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	}, func(url string) (mcp.Transport, error) {
		return &mcp.StreamableClientTransport{Endpoint: url}, nil
	})
}

// newURLFixture is newHTTPFixture reached the way pool.DefaultDialer
// reaches a "url" server.
func newURLFixture(t *testing.T) *fixture {
	t.Helper()
	return newServedFixture(t, func(srv *mcp.Server) http.Handler {
		return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	}, dialURL)
}

// newSSEFixture is newURLFixture with the upstream served over the HTTP+SSE
// transport of protocol 2024-11-05, which a "url" server falls back to.
func newSSEFixture(t *testing.T) *fixture {
	t.Helper()
	return newServedFixture(t, func(srv *mcp.Server) http.Handler {
		return mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	}, dialURL)
}

func dialURL(url string) (mcp.Transport, error) {
	return pool.DefaultDialer(context.Background(), pool.Spec{Name: "demo", URL: url})
}

// newServedFixture serves the upstream over HTTP on loopback with handler
// and dials it with dial, wrapped by the fixture's relay (twice, which must
// tap once) and with no progress handler, so that the relay's tap alone
// brings progress back.
func newServedFixture(t *testing.T, handler func(*mcp.Server) http.Handler, dial func(url string) (mcp.Transport, error)) *fixture {
	t.Helper()
	up, demo := newUpstream()
	srv := httptest.NewServer(handler(up.Server))
	t.Cleanup(srv.Close)
	relay := session.NewProgressRelay()
	f := newFixtureProgress(t, up, relay, relay.Dialer(func(context.Context, pool.Spec) (mcp.Transport, error) {
		tr, err := dial(srv.URL)
		if err != nil {
			return nil, err
		}
		return relay.WrapTransport(tr), nil // twice: still one tap
	}), nil) // no handler: progress comes through the tap alone
	f.demo = demo
	return f
}

// transportFixtures makes a fixture for each kind of upstream transport.
var transportFixtures = map[string]func(*testing.T) *fixture{
	"in-memory":       newFixture,
	"streamable-http": newHTTPFixture,
	"url":             newURLFixture,
	"http+sse":        newSSEFixture,
}

func newFixtureWith(t *testing.T, up *mcptest.Upstream, relay *session.ProgressRelay, dial pool.Dialer) *fixture {
	t.Helper()
	return newFixtureProgress(t, up, relay, dial, relay.Handle)
}

// newFixtureProgress is newFixtureWith with the pool's progress handler
// (nil: none, so that only what the relay's wrappers and taps read off the
// connections is relayed).
func newFixtureProgress(t *testing.T, up *mcptest.Upstream, relay *session.ProgressRelay, dial pool.Dialer, onProgress func(context.Context, *mcp.ProgressNotificationClientRequest)) *fixture {
	t.Helper()
	f := &fixture{t: t, up: up, relay: relay, counters: &opcount.Counters{}}
	f.pool = pool.New(pool.Options{Dialer: dial, OnProgress: onProgress, Counters: f.counters, Logger: quiet})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = f.pool.Close(ctx)
	})
	return f
}

// A client is one session's endpoint, view and handle, and a go-sdk client
// connected to the endpoint.
type client struct {
	ep      *session.Endpoint
	view    *view.View
	handle  *pool.Handle
	cs      *mcp.ClientSession
	changed chan struct{} // one value per tools/list_changed
	updated chan string   // the URI of each notifications/resources/updated
	mu      sync.Mutex
	prog    []*mcp.ProgressNotificationParams
}

// connect makes session name with the given settings for "demo".
func (f *fixture) connect(name, settings string) *client {
	f.t.Helper()
	return f.connectWith(name, settings, nil)
}

// connectWith is connect with the client's session options (nil: the
// go-sdk's newest protocol).
func (f *fixture) connectWith(name, settings string, opts *mcp.ClientSessionOptions) *client {
	f.t.Helper()
	return f.connectAs(name, "demo", settings, opts, nil)
}

// connectAs is connectWith for a session whose one server is named server
// (reached through the fixture's shared upstream whatever its name), with
// the view's registry wrapped by wrap (nil: the endpoint itself).
func (f *fixture) connectAs(name, server, settings string, opts *mcp.ClientSessionOptions, wrap func(*session.Endpoint) view.Registry) *client {
	t := f.t
	t.Helper()
	c := &client{changed: make(chan struct{}, 100), updated: make(chan string, 100)}
	c.ep = session.New(session.Options{
		Name:      name,
		Progress:  f.relay,
		Logger:    quiet,
		KeepAlive: f.keepAlive,
		Upstream: func(s string) session.Target {
			if s != server || c.handle == nil {
				return session.Target{}
			}
			return session.Target{Conn: c.handle.Conn(), Timeout: 10 * time.Second, Subscriptions: c.handle}
		},
	})
	var reg view.Registry = c.ep
	if wrap != nil {
		reg = wrap(c.ep)
	}
	c.view = view.New(view.Config{Session: name, Server: server, Registry: reg, Counters: f.counters, Policy: metakey.Reference{}, Settings: json.RawMessage(settings), Logger: quiet})
	h, err := f.pool.Acquire(t.Context(), pool.Spec{Name: server, Command: "in-memory", Pooled: true}, c.view)
	require.NoError(t, err)
	c.handle = h

	ct, st := mcp.NewInMemoryTransports()
	ss, err := c.ep.Server().Connect(t.Context(), st, nil)
	require.NoError(t, err)
	cl := mcp.NewClient(&mcp.Implementation{Name: "test-" + name, Version: "1"}, &mcp.ClientOptions{
		Logger: quiet,
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			// Past 100 unread (a test toggling a view in a loop on a
			// loaded machine), more would block the client's Close.
			select {
			case c.changed <- struct{}{}:
			default:
			}
		},
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { c.updated <- req.Params.URI },
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			c.mu.Lock()
			c.prog = append(c.prog, req.Params)
			c.mu.Unlock()
		},
	})
	cs, err := cl.Connect(t.Context(), ct, opts)
	require.NoError(t, err)
	c.cs = cs
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	return c
}

// callBlocked calls the upstream's "block" tool and returns once the call
// is under way upstream; its result arrives on the channel.
func (c *client) callBlocked(t *testing.T, f *fixture) <-chan *mcp.CallToolResult {
	t.Helper()
	answered := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := c.call(t, "demo__block", nil)
		assert.NoError(t, err)
		answered <- res
	}()
	<-f.up.Started
	return answered
}

// toolNames lists what the client sees.
func (c *client) toolNames(t *testing.T) []string {
	t.Helper()
	names, err := mcptest.ToolNames(t.Context(), c.cs)
	require.NoError(t, err)
	return names
}

func (c *client) call(t *testing.T, name string, args any) (*mcp.CallToolResult, error) {
	t.Helper()
	return c.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
}

func text(res *mcp.CallToolResult) string { return mcptest.Text(res) }

// waitChanged waits for one tools/list_changed.
func (c *client) waitChanged(t *testing.T) {
	t.Helper()
	select {
	case <-c.changed:
	case <-time.After(mcptest.EventWithin):
		t.Fatal("no tools/list_changed")
	}
}

// drainChanged discards pending list_changed notifications after the
// go-sdk's debounce has passed.
func (c *client) drainChanged() int {
	// Nothing to wait for: what is counted is what came within the
	// go-sdk's 10 ms debounce and a margin.
	time.Sleep(100 * time.Millisecond)
	n := 0
	for {
		select {
		case <-c.changed:
			n++
		default:
			return n
		}
	}
}
