package session_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/session"
	"github.com/wasmhost/wasmhost/view"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestListShowsProjectionWithFlags(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	alice := f.connect("alice", `{"trust":true,"alwaysLoadTools":true,"includeTools":["echo","add","pid"]}`)
	bob := f.connect("bob", `{"excludeTools":["write_note","add_tool","block","progress","meta","fail"]}`)

	assert.Equal(t, []string{"demo__add", "demo__echo", "demo__pid"}, alice.toolNames(t))
	assert.Equal(t, []string{"demo__add", "demo__echo", "demo__pid", "demo__read_note"}, bob.toolNames(t))

	res, err := alice.cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	for _, tool := range res.Tools {
		assert.Equal(t, true, tool.Meta[view.MetaTrust], tool.Name)
		assert.Equal(t, true, tool.Meta[view.MetaAlwaysLoad], tool.Name)
	}
	res, err = bob.cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	for _, tool := range res.Tools {
		assert.Equal(t, false, tool.Meta[view.MetaTrust], tool.Name)
		assert.Equal(t, false, tool.Meta[view.MetaAlwaysLoad], tool.Name)
	}
	assert.Equal(t, []string{"demo__add", "demo__echo", "demo__pid"}, alice.ep.Tools())
	assert.Empty(t, alice.ep.Prompts(), "includeTools filters prompts too")
	assert.Equal(t, []string{"demo__greet", "demo__summarize"}, bob.ep.Prompts())
	assert.Equal(t, []string{"demo://about", "demo://notes/welcome"}, alice.ep.Resources())
	assert.Equal(t, 1, alice.ep.Clients())
}

func TestCallForwardsArgumentsAndResults(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.connect("alice", `{}`)

	res, err := c.call(t, "demo__echo", map[string]any{"text": "hello"})
	require.NoError(t, err)
	assert.False(t, res.IsError)
	assert.Equal(t, "hello", text(res))

	res, err = c.call(t, "demo__add", map[string]any{"a": 2, "b": 40})
	require.NoError(t, err)
	assert.Equal(t, "42", text(res))

	// Structured content comes back as the upstream produced it.
	res, err = c.call(t, "demo__read_note", map[string]any{"name": "welcome"})
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"name": "welcome", "text": "Hello from the wasmhost demo server."}, res.StructuredContent)

	// A tool error (isError) is relayed as a tool error.
	res, err = c.call(t, "demo__fail", nil)
	require.NoError(t, err)
	assert.True(t, res.IsError)
	assert.Equal(t, "it failed upstream", text(res))
	res, err = c.call(t, "demo__read_note", map[string]any{"name": "nope"})
	require.NoError(t, err)
	assert.True(t, res.IsError)
	assert.Contains(t, text(res), `no note named "nope"`)
}

func TestMetaRelayedWithoutReservedKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.connect("alice", `{}`)
	params := &mcp.CallToolParams{
		Name:      "demo__meta",
		Arguments: map[string]any{"text": "x"},
		Meta: mcp.Meta{
			"example.com/trace":                       "abc",
			"io.modelcontextprotocol/protocolVersion": "1999-01-01",
		},
	}
	res, err := c.cs.CallTool(t.Context(), params)
	require.NoError(t, err)
	assert.Equal(t, "got x", text(res))
	// The result's own _meta comes back; the upstream hop's reserved keys
	// (its server info) do not.
	if diff := cmp.Diff(mcp.Meta{"example.com/answer": 42.0}, res.Meta); diff != "" {
		t.Errorf("result _meta (-want +got):\n%s", diff)
	}
	got := f.up.LastMeta()
	assert.Equal(t, "abc", got["example.com/trace"])
	assert.NotEqual(t, "1999-01-01", got["io.modelcontextprotocol/protocolVersion"], "the client's reserved keys must not reach the upstream")
	_, hasTok := got["progressToken"]
	assert.False(t, hasTok, "no progress token was asked for")
}

func TestProgressRelayedWithClientToken(t *testing.T) {
	t.Parallel()
	for name, fixture := range transportFixtures {
		t.Run(name, func(t *testing.T) { testProgressRelayed(t, fixture(t)) })
	}
}

func testProgressRelayed(t *testing.T, f *fixture) {
	a := f.connect("alice", `{}`)
	b := f.connect("bob", `{}`)

	// Both clients use the same token on the same upstream connection.
	var wg sync.WaitGroup
	for _, c := range []*client{a, b} {
		wg.Go(func() {
			params := &mcp.CallToolParams{Name: "demo__progress", Arguments: map[string]any{}}
			params.SetProgressToken("tok-1")
			res, err := c.cs.CallTool(t.Context(), params)
			assert.NoError(t, err)
			assert.Equal(t, "done", text(res))
		})
	}
	wg.Wait()
	for _, c := range []*client{a, b} {
		require.Eventually(t, func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return len(c.prog) == 3
		}, mcptest.EventWithin, 10*time.Millisecond)
		c.mu.Lock()
		var got []string
		for _, p := range c.prog {
			assert.Equal(t, "tok-1", p.ProgressToken)
			got = append(got, p.Message)
		}
		c.mu.Unlock()
		assert.Equal(t, []string{"step 1", "step 2", "step 3"}, got)
	}
	assert.Equal(t, 0, f.relay.Pending())

	// The upstream saw a relay token, not the client's.
	params := &mcp.CallToolParams{Name: "demo__meta", Arguments: map[string]any{"text": "y"}}
	params.SetProgressToken(7)
	_, err := a.cs.CallTool(t.Context(), params)
	require.NoError(t, err)
	tok, _ := f.up.LastMeta()["progressToken"].(string)
	assert.True(t, strings.HasPrefix(tok, "wasmhost-progress-"), "upstream token %q", tok)
}

func TestHiddenNamesAreRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.connect("alice", `{"includeTools":["echo"]}`)
	other := f.connect("bob", `{}`)
	require.Equal(t, []string{"demo__echo"}, c.toolNames(t))
	require.Contains(t, other.toolNames(t), "demo__write_note")

	// The upstream has write_note and the other session sees it; a guess
	// is refused like an unknown tool, under either spelling.
	for _, name := range []string{"demo__write_note", "write_note", "demo__add"} {
		_, err := c.call(t, name, map[string]any{"name": "x", "text": "y"})
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "unknown tool", name)
	}
	res, err := other.call(t, "demo__read_note", map[string]any{"name": "x"})
	require.NoError(t, err)
	assert.True(t, res.IsError, "no refused call reached the upstream")

	// Prompts and resources are enforced the same way.
	hidden := f.connect("carol", `{"includeTools":[]}`)
	_, err = hidden.cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "demo__nope"})
	require.Error(t, err)
	_, err = hidden.cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "demo://secret"})
	require.Error(t, err)
}

func TestPromptsAndResourcesForwarded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.connect("alice", `{}`)
	pr, err := c.cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "demo__summarize", Arguments: map[string]string{"name": "welcome"}})
	require.NoError(t, err)
	require.Len(t, pr.Messages, 1)
	assert.Equal(t, "Summarize: Hello from the wasmhost demo server.", pr.Messages[0].Content.(*mcp.TextContent).Text)

	// An upstream error is relayed.
	_, err = c.cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "demo__summarize", Arguments: map[string]string{"name": "nope"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `no note named "nope"`)

	rr, err := c.cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "demo://about"})
	require.NoError(t, err)
	require.Len(t, rr.Contents, 1)
	assert.Equal(t, "wasmhost demo server 1.0.0", rr.Contents[0].Text)
}

func TestSettingsChangeNotifiesOnlyWhenListChanges(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := f.connect("alice", `{"includeTools":["echo","add"]}`)
	b := f.connect("bob", `{"includeTools":["echo"]}`)
	a.drainChanged()
	b.drainChanged()

	changed, err := a.handle.RefreshMetadata(t.Context(), json.RawMessage(`{"includeTools":["echo"]}`))
	require.NoError(t, err)
	require.True(t, changed)
	a.waitChanged(t)
	assert.Equal(t, []string{"demo__echo"}, a.toolNames(t))
	_, err = a.call(t, "demo__add", map[string]any{"a": 1, "b": 1})
	require.Error(t, err, "a tool hidden by a settings change is refused at once")

	// An equivalent spelling has the same key: nothing is sent.
	changed, err = a.handle.RefreshMetadata(t.Context(), json.RawMessage(`{"includeTools":["echo","echo"],"trust":null}`))
	require.NoError(t, err)
	assert.False(t, changed)
	assert.Equal(t, 0, a.drainChanged())
	assert.Equal(t, 0, b.drainChanged(), "the other session saw nothing change")
}

func TestCallRacingWithHideIsRefusedOrCompleted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := f.connect("alice", `{}`)
	b := f.connect("bob", `{"excludeTools":["echo"]}`)

	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			settings := `{}`
			if i%2 == 0 {
				settings = `{"excludeTools":["echo"]}`
			}
			_, err := a.handle.RefreshMetadata(context.Background(), json.RawMessage(settings))
			assert.NoError(t, err)
		}
	})
	var ok, refused int
	for range 200 {
		res, err := a.call(t, "demo__echo", map[string]any{"text": "hi"})
		if err != nil {
			assert.Contains(t, err.Error(), "unknown tool")
			refused++
			continue
		}
		assert.Equal(t, "hi", text(res))
		ok++
		// bob never sees echo, whatever alice's view does.
		_, err = b.call(t, "demo__echo", map[string]any{"text": "hi"})
		require.Error(t, err)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d completed, %d refused", ok, refused)
}

func TestUpstreamGoneGivesCleanError(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.connect("alice", `{}`)

	done := c.callBlocked(t, f)
	f.up.KillAll() // the upstream crashes during the call
	var res *mcp.CallToolResult
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("in-flight call did not end")
	}
	require.NotNil(t, res)
	assert.True(t, res.IsError)
	assert.Contains(t, text(res), session.ErrUnavailable.Error())
	assert.Contains(t, text(res), `server "demo"`)

	// The failed entry withdrew the view: the tools are gone.
	require.Eventually(t, func() bool { return len(c.ep.Tools()) == 0 }, mcptest.EventWithin, 10*time.Millisecond)
	_, err := c.call(t, "demo__echo", map[string]any{"text": "x"})
	require.Error(t, err)
}

func TestUnavailableTarget(t *testing.T) {
	t.Parallel()
	ep := session.New(session.Options{Name: "s", Logger: quiet, Upstream: func(string) session.Target { return session.Target{} }})
	ep.PutTools("up", []*mcp.Tool{{Name: "t", InputSchema: map[string]any{"type": "object"}}})
	cs := connectClient(t, ep)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__t"})
	require.NoError(t, err)
	assert.True(t, res.IsError)
	assert.Contains(t, text(res), `session "s", server "up": upstream unavailable`)
}

func connectClient(t *testing.T, ep *session.Endpoint) *mcp.ClientSession {
	t.Helper()
	return connectServer(t, ep.Server())
}

// connectServer connects a go-sdk client to srv over in-memory transports,
// with opts (nil: the go-sdk's newest protocol).
func connectServer(t *testing.T, srv *mcp.Server, opts ...*mcp.ClientSessionOptions) *mcp.ClientSession {
	t.Helper()
	var o *mcp.ClientSessionOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	return connectServerWith(t, srv, &mcp.ClientOptions{Logger: quiet}, o)
}

// connectServerWith is connectServer with the client's options.
func connectServerWith(t *testing.T, srv *mcp.Server, copts *mcp.ClientOptions, sopts *mcp.ClientSessionOptions) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(t.Context(), st, nil)
	require.NoError(t, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, copts).Connect(t.Context(), ct, sopts)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	return cs
}

func TestNamesAndCollisions(t *testing.T) {
	t.Parallel()
	ep := session.New(session.Options{Name: "s", Logger: quiet, Upstream: func(string) session.Target { return session.Target{} }})
	schema := map[string]any{"type": "object"}
	ep.PutTools("a", []*mcp.Tool{{Name: "b__c", InputSchema: schema}, {Name: "x", InputSchema: schema}})
	ep.PutTools("a__b", []*mcp.Tool{{Name: "c", InputSchema: schema}, {Name: "y", InputSchema: schema}})
	assert.Equal(t, []string{"a__b__y", "a__x"}, ep.Tools(), "a__b__c is ambiguous: both are left out")

	// Once one is gone, the other has the name.
	ep.DeleteTools("a__b", []string{"c", "y"})
	assert.Equal(t, []string{"a__b__c", "a__x"}, ep.Tools())

	// Resources keep their URIs; the first server keeps a shared URI.
	ep.PutResources("a", []*mcp.Resource{{URI: "file:///same", Name: "same"}})
	ep.PutResources("a__b", []*mcp.Resource{{URI: "file:///same", Name: "same"}, {URI: "file:///other", Name: "other"}})
	assert.Equal(t, []string{"file:///other", "file:///same"}, ep.Resources())
	ep.DeleteResources("a__b", []string{"file:///same", "file:///other"})
	assert.Equal(t, []string{"file:///same"}, ep.Resources())

	ep.PutPrompts("p", []*mcp.Prompt{{Name: "hello"}})
	assert.Equal(t, []string{"p__hello"}, ep.Prompts())
	ep.DeletePrompts("p", []string{"hello", "never-there"})
	assert.Empty(t, ep.Prompts())
}

func TestToolSchemasTheServerRefusesAreFixedOrLeftOut(t *testing.T) {
	t.Parallel()
	ep := session.New(session.Options{Name: "s", Logger: quiet, Upstream: func(string) session.Target { return session.Target{} }})
	before := ep.Changes()
	orig := &mcp.Tool{Name: "untyped", InputSchema: map[string]any{"properties": map[string]any{}}}
	ep.PutTools("up", []*mcp.Tool{
		{Name: "none"},
		orig,
		{Name: "stringy", InputSchema: map[string]any{"type": "string"}},
	})
	assert.Equal(t, []string{"up__none", "up__untyped"}, ep.Tools())
	assert.Equal(t, uint64(2), ep.Changes()-before)
	if diff := cmp.Diff(map[string]any{"properties": map[string]any{}}, orig.InputSchema); diff != "" {
		t.Errorf("projection's tool was modified (-want +got):\n%s", diff)
	}
	cs := connectClient(t, ep)
	res, err := cs.ListTools(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, res.Tools, 2)
	for _, tool := range res.Tools {
		assert.Equal(t, "object", tool.InputSchema.(map[string]any)["type"])
	}
}

// TestDrainWaitsForCallsUnderWay: Drain refuses new calls (an isError
// result naming ErrDraining, or an error for prompts) and returns once the
// call under way has its answer.
func TestDrainWaitsForCallsUnderWay(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.connect("alice", `{}`)
	answered := c.callBlocked(t, f)

	drained := make(chan error, 1)
	go func() { drained <- c.ep.Drain(context.Background()) }()
	require.Eventually(t, func() bool {
		res, err := c.call(t, "demo__echo", map[string]any{"text": "late"})
		return err == nil && res.IsError && strings.Contains(text(res), session.ErrDraining.Error())
	}, mcptest.EventWithin, 5*time.Millisecond, "new calls are refused while draining")
	_, err := c.cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "demo__greet"})
	require.ErrorContains(t, err, session.ErrDraining.Error())
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v with a call under way", err)
	default:
	}

	close(f.up.Release)
	require.NoError(t, <-drained)
	assert.Equal(t, "released", text(<-answered))
}

// TestDrainCutsCallsShort: a call still under way when Drain's ctx ends is
// cut short: its upstream call is cancelled, its client gets an isError
// result naming ErrDraining, and Drain returns soon after, with an error.
func TestDrainCutsCallsShort(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.connect("alice", `{}`)
	answered := c.callBlocked(t, f)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.ep.Drain(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "cut short")
	select {
	case res := <-answered:
		assert.True(t, res.IsError)
		assert.Contains(t, text(res), session.ErrDraining.Error())
	case <-time.After(mcptest.EventWithin):
		t.Fatal("the call cut short got no answer")
	}
	select {
	case <-f.up.Cancelled:
	case <-time.After(mcptest.EventWithin):
		t.Fatal("the upstream call was not cancelled")
	}
	require.NoError(t, c.ep.Drain(t.Context()), "nothing left under way")
}

// TestResultsAreCachedPrivately: a session's lists and reads are its policy's
// doing, so no shared cache may serve them to another session.
func TestResultsAreCachedPrivately(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.connect("alice", `{}`)
	ctx := t.Context()
	tools, err := c.cs.ListTools(ctx, nil)
	require.NoError(t, err)
	prompts, err := c.cs.ListPrompts(ctx, nil)
	require.NoError(t, err)
	resources, err := c.cs.ListResources(ctx, nil)
	require.NoError(t, err)
	templates, err := c.cs.ListResourceTemplates(ctx, nil)
	require.NoError(t, err)
	require.NotEmpty(t, resources.Resources)
	read, err := c.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: resources.Resources[0].URI})
	require.NoError(t, err)
	for name, scope := range map[string]string{
		"tools/list":               tools.CacheScope,
		"prompts/list":             prompts.CacheScope,
		"resources/list":           resources.CacheScope,
		"resources/templates/list": templates.CacheScope,
		"resources/read":           read.CacheScope,
	} {
		assert.Equal(t, "private", scope, name)
	}
}

// TestCancellationReachesUpstream: a client cancelling its call cancels
// the upstream's call too (the go-sdk sends notifications/cancelled on
// both legs), over every kind of upstream transport.
func TestCancellationReachesUpstream(t *testing.T) {
	t.Parallel()
	for name, fixture := range transportFixtures {
		t.Run(name, func(t *testing.T) {
			f := fixture(t)
			c := f.connect("alice", `{}`)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				_, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "demo__block", Arguments: map[string]any{}})
				done <- err
			}()
			select {
			case <-f.up.Started:
			case <-time.After(10 * time.Second):
				t.Fatal("the call did not reach the upstream")
			}
			cancel()
			require.Error(t, <-done)
			select {
			case <-f.up.Cancelled:
			case <-time.After(10 * time.Second):
				t.Fatal("the upstream's call was not cancelled")
			}
		})
	}
}

// TestGoneHTTPUpstreamNamesTheServer: a call to an HTTP upstream that is
// gone gets the message naming the session and server (ErrUnavailable), not
// the go-sdk's bare "rejected by transport", which it reports as a
// JSON-RPC error of its own making.
func TestGoneHTTPUpstreamNamesTheServer(t *testing.T) {
	t.Parallel()
	up, _ := newUpstream()
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up.Server }, nil))
	t.Cleanup(func() {
		for ss := range up.Server.Sessions() { // the client could not end it
			_ = ss.Close()
		}
		srv.Close()
	})
	relay := session.NewProgressRelay()
	f := newFixtureWith(t, up, relay, relay.Dialer(func(context.Context, pool.Spec) (mcp.Transport, error) {
		return &mcp.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: 100}, nil // the pool notices late
	}))
	c := f.connect("alice", `{}`)
	res, err := c.call(t, "demo__echo", map[string]any{"text": "hi"})
	require.NoError(t, err)
	require.Equal(t, "hi", text(res))

	srv.Listener.Close()
	srv.CloseClientConnections()
	res, err = c.call(t, "demo__echo", map[string]any{"text": "hi"})
	require.NoError(t, err, "a tool result, not a JSON-RPC error")
	assert.True(t, res.IsError)
	assert.Contains(t, text(res), `session "alice", server "demo": tool "demo__echo"`, "the forwarded call's failure, not a missing connection")
	assert.Contains(t, text(res), session.ErrUnavailable.Error())
}

// TestCallAfterCutShortNeverReachesUpstream: a call admitted before Drain
// that only looks its upstream up after Drain cut calls short is refused
// there, and never sent upstream.
func TestCallAfterCutShortNeverReachesUpstream(t *testing.T) {
	// The call stays stuck until Drain has returned: its grace is waited
	// out whole, so a short one keeps the test quick.
	session.SetCutShortGrace(t, 50*time.Millisecond)
	up, _ := newUpstream()
	ct, _, err := mcptest.Connect(t.Context(), up.Server)
	require.NoError(t, err)
	upCS, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	require.NoError(t, err)
	defer upCS.Close()

	looking := make(chan struct{})
	release := make(chan struct{})
	ep := session.New(session.Options{Name: "s", Logger: quiet, Upstream: func(string) session.Target {
		close(looking)
		<-release // the lookup is slow, past the drain's grace
		return session.Target{Conn: upCS}
	}})
	ep.PutTools("up", []*mcp.Tool{{Name: "meta", InputSchema: map[string]any{"type": "object"}}})
	cs := connectClient(t, ep)
	answered := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__meta", Arguments: map[string]any{"text": "x"}})
		assert.NoError(t, err)
		answered <- res
	}()
	<-looking
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- ep.Drain(ctx) }()
	// Drain returns once it has cut calls short and waited its moment for
	// them; the call is still in its lookup.
	require.Error(t, <-drained)
	close(release)
	res := <-answered
	assert.True(t, res.IsError)
	assert.Contains(t, text(res), session.ErrDraining.Error())
	assert.Nil(t, up.LastMeta(), "the call reached the upstream")
}

// TestClientsCountsInitializedSessions: a connection that has not
// initialized (go-sdk's answer to a client's server/discover probe opens
// one) is not a client. Counted, it made the daemon refuse the same
// client's initialize under --max-clients once one place was left.
func TestClientsCountsInitializedSessions(t *testing.T) {
	t.Parallel()
	ep := session.New(session.Options{Name: "s", Logger: quiet, Upstream: func(string) session.Target { return session.Target{} }})
	probe, _ := mcp.NewInMemoryTransports()
	ss, err := ep.Server().Connect(t.Context(), probe, nil)
	require.NoError(t, err)
	defer ss.Close()
	assert.Equal(t, 0, ep.Clients(), "a connection that has not initialized")

	st, ct := mcp.NewInMemoryTransports()
	ss2, err := ep.Server().Connect(t.Context(), st, nil)
	require.NoError(t, err)
	defer ss2.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	require.NoError(t, err)
	defer cs.Close()
	assert.Equal(t, 1, ep.Clients(), "an initialized client")
}
