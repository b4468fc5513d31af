package pool_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

// A subscriptionCount is an upstream's count of subscriptions.
type subscriptionCount struct {
	demoserver.Subscriptions
	server *mcp.Server
}

// get counts the subscriptions of the sessions still connected, per URI.
func (c *subscriptionCount) get() map[string]int { return c.Count(c.server) }

// newSubscribableUpstream is an upstream offering resource subscriptions.
func newSubscribableUpstream(name string, count *subscriptionCount) *mcptest.Upstream {
	srv := mcp.NewServer(&mcp.Implementation{Name: "up-" + name, Version: "1"}, &mcp.ServerOptions{
		Logger:             quiet,
		SubscribeHandler:   count.Subscribe,
		UnsubscribeHandler: count.Unsubscribe,
	})
	srv.AddResource(&mcp.Resource{URI: "file:///readme", Name: "readme"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{}, nil
	})
	count.server = srv
	return mcptest.NewUpstream(mcptest.UpstreamConfig{Name: name, Server: srv})
}

// upstreamVersions are the protocol versions the pool's subscription tests
// run their upstream link at: the go-sdk's newest (subscriptions/listen,
// whose Subscribe the go-sdk itself does not repeat for a URI) and
// 2025-11-25 (resources/subscribe and unsubscribe requests).
var upstreamVersions = []string{"", "2025-11-25"}

func TestSubscriptionsSharedPerEntry(t *testing.T) {
	for _, version := range upstreamVersions {
		t.Run("version="+version, func(t *testing.T) { testSubscriptionsSharedPerEntry(t, version) })
	}
}

func testSubscriptionsSharedPerEntry(t *testing.T, version string) {
	count := &subscriptionCount{}
	e := newEnv(t, pool.Options{}, newSubscribableUpstream("docs", count), newUpstream(t, "plain", "read"))
	spec := pool.Spec{Name: "docs", Command: "docs", Pooled: true, ProtocolVersion: version}
	const uri = "file:///readme"
	upstreamHas := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool { return count.get()[uri] == n }, 5*time.Second, 5*time.Millisecond, "want %d, have %v", n, count.get())
	}
	got1, got2 := make(chan string, 4), make(chan string, 4)
	h1 := e.acquire(spec, "s1", `{}`, viewtest.NewRegistry())
	h2 := e.acquire(spec, "s2", `{}`, viewtest.NewRegistry())
	require.Same(t, h1.Entry(), h2.Entry())
	require.NoError(t, h1.Subscribe(t.Context(), uri, func(p *mcp.ResourceUpdatedNotificationParams) { got1 <- p.URI }))
	require.NoError(t, h2.Subscribe(t.Context(), uri, func(p *mcp.ResourceUpdatedNotificationParams) { got2 <- p.URI }))
	upstreamHas(1)
	assert.Equal(t, []string{uri}, h1.Entry().Subscriptions())

	require.NoError(t, e.upstreams["docs"].Server.ResourceUpdated(t.Context(), &mcp.ResourceUpdatedNotificationParams{URI: uri}))
	assert.Equal(t, uri, <-got1)
	assert.Equal(t, uri, <-got2)

	// The entry's subscription lasts while a handle holds it: a release
	// lets the handle's go, the last one lets the upstream's go, except
	// that from protocol 2026-07-28 on the connection keeps its listen
	// request open (TestListChangesHeardAfterUnsubscribe).
	left := 0
	if version == "" {
		left = 1
	}
	require.NoError(t, h1.Release(t.Context()))
	upstreamHas(1)
	require.NoError(t, h2.Unsubscribe(t.Context(), uri))
	upstreamHas(left)
	if left == 1 {
		// Kept, not merely not yet ended: it was there before.
		require.Never(t, func() bool { return count.get()[uri] != 1 }, 200*time.Millisecond, 5*time.Millisecond,
			"the listen request was ended: %v", count.get())
	}
	assert.Empty(t, h2.Entry().Subscriptions())
	require.NoError(t, h2.Unsubscribe(t.Context(), uri), "unsubscribing again does nothing")
	require.NoError(t, h2.Subscribe(t.Context(), uri, func(*mcp.ResourceUpdatedNotificationParams) {}))
	upstreamHas(1)
	require.NoError(t, h2.Release(t.Context()))
	upstreamHas(0) // the last handle gone, the connection closes

	require.ErrorIs(t, h1.Subscribe(t.Context(), uri, func(*mcp.ResourceUpdatedNotificationParams) {}), pool.ErrReleased)
	h3 := e.acquire(spec, "s3", `{}`, viewtest.NewRegistry())
	e.upstreams["docs"].Kill() // no crash restarts configured: the entry fails
	require.Eventually(t, func() bool { return h3.Conn() == nil }, 5*time.Second, 5*time.Millisecond)
	require.ErrorIs(t, h3.Subscribe(t.Context(), uri, func(*mcp.ResourceUpdatedNotificationParams) {}), pool.ErrNotReady)
	hp := e.acquire(pool.Spec{Name: "plain", Command: "plain", Pooled: true}, "s1", `{}`, viewtest.NewRegistry())
	err := hp.Subscribe(t.Context(), "file:///readme", func(*mcp.ResourceUpdatedNotificationParams) {})
	require.ErrorIs(t, err, pool.ErrNoSubscriptions)
	assert.Contains(t, err.Error(), `server plain: subscribe "file:///readme"`)
}

// TestSubscriptionHammer has many handles subscribe and unsubscribe while
// the upstream sends updates and the entry restarts; once every handle has
// let go, neither the entry nor the upstream holds a subscription.
func TestSubscriptionHammer(t *testing.T) {
	for _, version := range upstreamVersions {
		t.Run("version="+version, func(t *testing.T) { testSubscriptionHammer(t, version) })
	}
}

func testSubscriptionHammer(t *testing.T, version string) {
	count := &subscriptionCount{}
	e := newEnv(t, pool.Options{}, newSubscribableUpstream("docs", count))
	spec := pool.Spec{Name: "docs", Command: "docs", Pooled: true, ProtocolVersion: version}
	uris := []string{"file:///a", "file:///b", "file:///c"}
	var handles []*pool.Handle
	for i := range 8 {
		handles = append(handles, e.acquire(spec, fmt.Sprintf("s%d", i), `{}`, viewtest.NewRegistry()))
	}
	entry := handles[0].Entry()
	var wg sync.WaitGroup
	for i, h := range handles {
		wg.Go(func() {
			for j := range 40 {
				uri := uris[(i+j)%len(uris)]
				err := h.Subscribe(t.Context(), uri, func(*mcp.ResourceUpdatedNotificationParams) {})
				if err != nil && !errors.Is(err, pool.ErrNotReady) { // a restart under way
					t.Errorf("subscribe: %v", err)
				}
				if j%3 == 0 {
					assert.NoError(t, h.Unsubscribe(t.Context(), uri))
				}
			}
		})
	}
	wg.Go(func() {
		for range 3 {
			assert.NoError(t, entry.Restart(t.Context()))
		}
	})
	wg.Go(func() {
		for range 50 {
			for _, uri := range uris {
				_ = e.upstreams["docs"].Server.ResourceUpdated(t.Context(), &mcp.ResourceUpdatedNotificationParams{URI: uri})
			}
		}
	})
	wg.Wait()
	// Every URI a handle still holds is subscribed on the connection a
	// restart made, once.
	require.NoError(t, handles[0].Subscribe(t.Context(), uris[0], func(*mcp.ResourceUpdatedNotificationParams) {}))
	require.NoError(t, entry.Restart(t.Context()))
	held := entry.Subscriptions()
	want := make(map[string]int)
	for _, uri := range held {
		want[uri] = 1
	}
	require.Eventually(t, func() bool { return maps.Equal(count.get(), want) }, 5*time.Second, 5*time.Millisecond,
		"want %v", want)
	for i, h := range handles {
		if i%2 == 0 {
			for _, uri := range uris {
				require.NoError(t, h.Unsubscribe(t.Context(), uri))
			}
		} else {
			require.NoError(t, h.Release(t.Context()))
		}
	}
	assert.Empty(t, entry.Subscriptions())
	if version == "" {
		// The connection keeps its listen requests (keepListening) until
		// it closes: a restart ends them.
		// (They held before the handles left: a wait for them to hold
		// would pass at once whatever the entry did.)
		require.Never(t, func() bool { return !maps.Equal(count.get(), want) }, 200*time.Millisecond, 5*time.Millisecond,
			"want %v", want)
		require.NoError(t, entry.Restart(t.Context()))
	}
	require.Eventually(t, func() bool {
		for _, n := range count.get() {
			if n != 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, 5*time.Millisecond, "upstream still counts %v", count.get())
}

// TestResubscribeTriesAgain: a connection a restart made that refuses to
// subscribe is asked again until it does.
func TestResubscribeTriesAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out resubscribe retries; run without -short")
	}
	count := &subscriptionCount{}
	e := newEnv(t, pool.Options{}, newSubscribableUpstream("docs", count))
	h := e.acquire(pool.Spec{Name: "docs", Command: "docs", Pooled: true, ProtocolVersion: "2025-11-25"}, "s1", `{}`, viewtest.NewRegistry())
	require.NoError(t, h.Subscribe(t.Context(), "file:///readme", func(*mcp.ResourceUpdatedNotificationParams) {}))
	count.Refuse(2)
	require.NoError(t, h.Entry().Restart(t.Context()))
	// Another handle joins at once, whatever the upstream says meanwhile.
	h2 := e.acquire(pool.Spec{Name: "docs", Command: "docs", Pooled: true, ProtocolVersion: "2025-11-25"}, "s2", `{}`, viewtest.NewRegistry())
	require.NoError(t, h2.Subscribe(t.Context(), "file:///readme", func(*mcp.ResourceUpdatedNotificationParams) {}))
	require.Eventually(t, func() bool { return count.get()["file:///readme"] == 1 }, 10*time.Second, 10*time.Millisecond,
		"the new connection is subscribed after two refusals")
	require.NoError(t, h.Unsubscribe(t.Context(), "file:///readme"))
	require.NoError(t, h2.Release(t.Context()))
	assert.Empty(t, h.Entry().Subscriptions())
	require.Eventually(t, func() bool { return count.get()["file:///readme"] == 0 }, 5*time.Second, 10*time.Millisecond)
}

// TestListChangesHeardAfterUnsubscribe: a go-sdk v1.8.0 upstream forgets a
// connection's list-change subscriptions when any of its
// subscriptions/listen requests ends (protocol 2026-07-28), so the entry
// keeps a resource's listen request open after its last handle leaves:
// the upstream's later tools/list_changed still reaches the views. At
// 2025-11-25 the unsubscribe is a request of its own and is sent.
func TestListChangesHeardAfterUnsubscribe(t *testing.T) {
	for _, version := range upstreamVersions {
		t.Run("version="+version, func(t *testing.T) {
			count := &subscriptionCount{}
			up := newSubscribableUpstream("docs", count)
			up.AddTool("read")
			e := newEnv(t, pool.Options{}, up)
			reg := viewtest.NewRegistry()
			h := e.acquire(pool.Spec{Name: "docs", Command: "docs", Pooled: true, ProtocolVersion: version}, "s1", `{}`, reg)
			const uri = "file:///readme"
			require.NoError(t, h.Subscribe(t.Context(), uri, func(*mcp.ResourceUpdatedNotificationParams) {}))
			require.Eventually(t, func() bool { return count.get()[uri] == 1 }, 5*time.Second, 5*time.Millisecond)
			require.NoError(t, h.Unsubscribe(t.Context(), uri))
			if version != "" {
				require.Eventually(t, func() bool { return count.get()[uri] == 0 }, 5*time.Second, 5*time.Millisecond)
			}

			up.AddTool("write")
			require.Eventually(t, func() bool { return slices.Equal(reg.ToolNames("docs"), []string{"read", "write"}) },
				5*time.Second, 5*time.Millisecond, "the upstream's list change is heard; tools %v", reg.ToolNames("docs"))
		})
	}
}

// TestUnsubscribeDuringRestart: an unsubscribe whose upstream request is
// under way when a restart closes its connection succeeds. The
// subscription went with that connection, and the restart does not make
// it again on the new one; the old connection's end (EOF, or "connection
// closed") is no failure of the unsubscribe's.
func TestUnsubscribeDuringRestart(t *testing.T) {
	count := &subscriptionCount{}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	srv := mcp.NewServer(&mcp.Implementation{Name: "up-docs", Version: "1"}, &mcp.ServerOptions{
		Logger:           quiet,
		SubscribeHandler: count.Subscribe,
		UnsubscribeHandler: func(ctx context.Context, req *mcp.UnsubscribeRequest) error {
			once.Do(func() { close(entered) })
			select { // held until the restart has closed the connection
			case <-release:
			case <-ctx.Done():
			}
			return count.Unsubscribe(ctx, req)
		},
	})
	srv.AddResource(&mcp.Resource{URI: "file:///readme", Name: "readme"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{}, nil
	})
	count.server = srv
	e := newEnv(t, pool.Options{}, mcptest.NewUpstream(mcptest.UpstreamConfig{Name: "docs", Server: srv}))
	spec := pool.Spec{Name: "docs", Command: "docs", Pooled: true, ProtocolVersion: "2025-11-25"}
	const uri = "file:///readme"
	h := e.acquire(spec, "s1", `{}`, viewtest.NewRegistry())
	require.NoError(t, h.Subscribe(t.Context(), uri, func(*mcp.ResourceUpdatedNotificationParams) {}))

	unsubscribed := make(chan error, 1)
	go func() { unsubscribed <- h.Unsubscribe(t.Context(), uri) }()
	select {
	case <-entered:
	case <-time.After(mcptest.EventWithin):
		t.Fatal("the upstream got no unsubscribe")
	}
	require.NoError(t, h.Entry().Restart(t.Context()))
	close(release)
	select {
	case err := <-unsubscribed:
		require.NoError(t, err, "an unsubscribe whose connection a restart closed")
	case <-time.After(mcptest.EventWithin):
		t.Fatalf("the unsubscribe did not return\n%s", mcptest.Stacks())
	}
	assert.Empty(t, h.Entry().Subscriptions())
}
