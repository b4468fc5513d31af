package session_test

// Isolation probes: a session's client reaches only what its own
// projection exposes, through its own views, and nothing of another
// session's. Probes that other tests already make are not repeated here:
// TestRefusedNamesNeverReachUpstream (names refused by the endpoint with
// registrations made by hand), TestCallUnderWayWhenHidden (a call under
// way when a reload hides its tool completes, one after is refused),
// TestHammerSharedUpstream (clients of many sessions using the same
// progress tokens at once on one upstream), TestProgressTokensCannotBeGuessed
// and TestProgressStaysWithItsCall (upstream-made tokens), and
// TestSubscriptionsShareOneUpstream (an update reaches only the sessions
// subscribed).

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/session"
	"github.com/wasmhost/wasmhost/view"
)

// countMethods counts, per method, the requests that reach srv.
func countMethods(srv *mcp.Server) func(method string) int64 {
	var counts sync.Map
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			v, _ := counts.LoadOrStore(method, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
			return next(ctx, method, req)
		}
	})
	return func(method string) int64 {
		if v, ok := counts.Load(method); ok {
			return v.(*atomic.Int64).Load()
		}
		return 0
	}
}

// requireUnknown checks that err is the refusal of an unknown name: the
// JSON-RPC error the go-sdk gives a name it never had, invalid params with
// "unknown <what> %q", so that a guess learns nothing.
func requireUnknown(t *testing.T, err error, what, name string) {
	t.Helper()
	var werr *jsonrpc.Error
	require.ErrorAs(t, err, &werr, "%s %q", what, name)
	assert.Equal(t, jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown %s %q", what, name)}, *werr, "%s %q", what, name)
}

// requireResourceNotFound checks that err is the go-sdk's "resource not
// found" for uri.
func requireResourceNotFound(t *testing.T, err error, uri string) {
	t.Helper()
	var werr *jsonrpc.Error
	require.ErrorAs(t, err, &werr, uri)
	assert.Equal(t, int64(jsonrpc.CodeInvalidParams), werr.Code, uri) // SEP-2164
	assert.Equal(t, "Resource not found", werr.Message, uri)
	assert.JSONEq(t, fmt.Sprintf(`{"uri":%q}`, uri), string(werr.Data), uri)
}

// TestIsolationHiddenToolNames: tools the session's policy hides (excluded,
// or not included), another session's tools, and tools of a server the
// session does not use are refused as unknown under every spelling tried,
// and no refused call reaches the shared upstream.
func TestIsolationHiddenToolNames(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	count := countMethods(f.up.Server)
	alice := f.connect("alice", `{"includeTools":["echo","add"],"excludeTools":["add"]}`)
	bob := f.connect("bob", `{}`)
	carol := f.connectAs("carol", "other", `{}`, legacy, nil) // the same upstream, as server "other"
	require.Equal(t, []string{"demo__echo"}, alice.toolNames(t))
	require.Contains(t, bob.toolNames(t), "demo__write_note")
	require.Contains(t, carol.toolNames(t), "other__write_note")

	names := []string{
		"demo__add",        // included and excluded: exclude wins
		"demo__write_note", // not included; bob sees it
		"demo__read_note", "demo__add_tool", "demo__pid",
		"echo", "add", "write_note", // upstream names
		"DEMO__echo", "Demo__echo", "demo__ECHO", "demo__Echo", "demo__write_NOTE",
		" demo__echo", "demo__echo ", "demo__echo\n", "demo__echo\t", "demo__echo\x00", "demo\u200b__echo",
		"demo__\u0435cho", "\uff44emo__echo", // Cyrillic e, fullwidth d
		"demo___echo", "demo_echo", "demo__demo__echo", "mcp__demo__echo", "demo/echo", "demo.echo",
		"demo__echo(x)", "demo__add(x)", "demo__write_note()", "demo__", "__echo", "__", "",
		"other__echo", "other__write_note", // a server alice does not use; carol's names
		"demo__*", "demo__.*", "demo__%",
	}
	before := count("tools/call")
	for _, name := range names {
		_, err := alice.call(t, name, map[string]any{"name": "probe", "text": "x", "a": 1, "b": 2})
		requireUnknown(t, err, "tool", name)
	}
	// carol (server "other") cannot reach "demo", though it is the same
	// upstream process.
	for _, name := range []string{"demo__echo", "demo__write_note", "echo"} {
		_, err := carol.call(t, name, map[string]any{"text": "x"})
		requireUnknown(t, err, "tool", name)
	}
	assert.Equal(t, before, count("tools/call"), "a refused call reached the upstream")

	// The refused write_note really did nothing: bob cannot read the note.
	res, err := bob.call(t, "demo__read_note", map[string]any{"name": "probe"})
	require.NoError(t, err)
	assert.True(t, res.IsError, text(res))
	// And what alice sees works.
	res, err = alice.call(t, "demo__echo", map[string]any{"text": "mine"})
	require.NoError(t, err)
	assert.Equal(t, "mine", text(res))
}

// TestIsolationHiddenPromptsResourcesCompletions: a prompt the policy hides
// (prompts follow includeTools and excludeTools by name) is refused by
// prompts/get and by completion/complete; resources, templates and
// subscriptions of a server the session does not use are refused as not
// found; none of it reaches the upstream.
func TestIsolationHiddenPromptsResourcesCompletions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	count := countMethods(f.up.Server)
	alice := f.connect("alice", `{"includeTools":["echo","greet"]}`)
	bob := f.connect("bob", `{}`)
	require.Equal(t, []string{"demo__greet"}, alice.ep.Prompts())
	require.Contains(t, bob.ep.Prompts(), "demo__summarize")
	// A session whose one server is not "demo" sees no demo resource.
	dave := session.New(session.Options{Name: "dave", Logger: quiet, Upstream: func(string) session.Target {
		return session.Target{Conn: alice.handle.Conn(), Subscriptions: alice.handle} // would reach the upstream if asked
	}})
	dave.PutTools("other", []*mcp.Tool{{Name: "x", InputSchema: map[string]any{"type": "object"}}})
	daveCS := connectServer(t, dave.Server(), legacy)

	methods := []string{"prompts/get", "completion/complete", "resources/read", "resources/subscribe"}
	before := map[string]int64{}
	for _, m := range methods {
		before[m] = count(m)
	}
	ctx := t.Context()
	for _, name := range []string{"demo__summarize", "summarize", "DEMO__greet", "demo__greet ", "other__greet", "demo__"} {
		_, err := alice.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name, Arguments: map[string]string{"name": "welcome"}})
		requireUnknown(t, err, "prompt", name)
		_, err = alice.cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: name}, Argument: mcp.CompleteParamsArgument{Name: "name", Value: "w"}})
		requireUnknown(t, err, "prompt", name)
	}
	for _, name := range []string{"demo__greet", "demo__summarize"} {
		_, err := daveCS.GetPrompt(ctx, &mcp.GetPromptParams{Name: name})
		requireUnknown(t, err, "prompt", name)
	}
	for _, uri := range []string{"demo://about", "demo://notes/welcome", "demo://notes/anything"} {
		_, err := daveCS.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		requireResourceNotFound(t, err, uri)
		err = daveCS.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
		requireResourceNotFound(t, err, uri)
	}
	for _, uri := range []string{"demo://notes/{name}", "demo://about"} {
		_, err := daveCS.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: uri}, Argument: mcp.CompleteParamsArgument{Name: "name", Value: "w"}})
		requireUnknown(t, err, "resource", uri)
	}
	for _, m := range methods {
		assert.Equal(t, before[m], count(m), "%s reached the upstream", m)
	}
	// What alice sees works.
	_, err := alice.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "demo__greet"})
	require.NoError(t, err)
}

// gatedRegistry is an endpoint whose DeleteTools, once armed, waits for
// release: a view's replay is caught half way, after its upstream
// connection is back and before its registrations follow its settings.
type gatedRegistry struct {
	*session.Endpoint
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *gatedRegistry) DeleteTools(server string, names []string) {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	g.Endpoint.DeleteTools(server, names)
}

// TestIsolationReloadDuringRestart: a reload that hides a tool while the
// upstream restarts is answered at once (the view takes the settings and
// the restart's fan-out applies them, pool.Handle.RefreshMetadata); from
// then on no call of that tool may reach the upstream: it is refused as
// unavailable while the restart runs and until the fan-out has reached the
// session's registrations, and as unknown after.
func TestIsolationReloadDuringRestart(t *testing.T) {
	t.Parallel()
	up, _ := newUpstream()
	relay := session.NewProgressRelay()
	var gateDial atomic.Bool
	dialed, redial := make(chan struct{}, 1), make(chan struct{})
	dial := func(ctx context.Context, spec pool.Spec) (mcp.Transport, error) {
		if gateDial.Load() {
			dialed <- struct{}{}
			<-redial
		}
		return dialer(up)(ctx, spec)
	}
	f := newFixtureWith(t, up, relay, relay.Dialer(dial))
	count := countMethods(up.Server)
	var gate *gatedRegistry
	alice := f.connectAs("alice", "demo", `{}`, legacy, func(ep *session.Endpoint) view.Registry {
		gate = &gatedRegistry{Endpoint: ep, entered: make(chan struct{}), release: make(chan struct{})}
		return gate
	})
	require.Contains(t, alice.toolNames(t), "demo__echo")

	gateDial.Store(true)
	restarted := make(chan error, 1)
	go func() { restarted <- alice.handle.Entry().Restart(context.Background()) }()
	<-dialed // the views are held, the old connection gone

	changed, err := alice.handle.RefreshMetadata(t.Context(), json.RawMessage(`{"excludeTools":["echo"]}`))
	require.NoError(t, err)
	require.True(t, changed, "the reload is answered: the view took the settings")
	before := count("tools/call")
	res, err := alice.call(t, "demo__echo", map[string]any{"text": "during restart"})
	require.NoError(t, err)
	assert.True(t, res.IsError, text(res))
	assert.Contains(t, text(res), session.ErrUnavailable.Error())

	// The connection is back; the fan-out has not reached alice's
	// registrations yet.
	gate.armed.Store(true)
	gateDial.Store(false)
	close(redial)
	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the restart's fan-out did not replay alice's view")
	}
	require.NotNil(t, alice.handle.Entry().Snapshot())
	require.Contains(t, alice.ep.Tools(), "demo__echo", "caught before the registrations follow")
	res, err = alice.call(t, "demo__echo", map[string]any{"text": "leaked"})
	require.NoError(t, err)
	assert.True(t, res.IsError, "a tool hidden by a reload answered before reached the upstream: %s", text(res))
	assert.Contains(t, text(res), session.ErrUnavailable.Error())
	assert.Equal(t, before, count("tools/call"), "a hidden tool's call reached the upstream")

	close(gate.release)
	select {
	case err := <-restarted:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the restart did not end")
	}
	_, err = alice.call(t, "demo__echo", map[string]any{"text": "after"})
	requireUnknown(t, err, "tool", "demo__echo")
	assert.Equal(t, before, count("tools/call"))
	res, err = alice.call(t, "demo__add", map[string]any{"a": 1, "b": 2})
	require.NoError(t, err)
	assert.False(t, res.IsError, text(res))
}

// TestIsolationRouteCheckedAfterUpstream: the endpoint checks a call's name
// again once it has its upstream: a call that found its tool while the
// session's registrations lagged its settings (Options.Upstream then
// reports no upstream, as pool.Handle.Conn does) and got its upstream
// only after they caught up is refused, not forwarded under the old
// projection.
func TestIsolationRouteCheckedAfterUpstream(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	var lagging, gate atomic.Bool
	entered, release := make(chan struct{}, 4), make(chan struct{})
	var ep *session.Endpoint
	direct := r.direct
	ep = session.New(session.Options{Name: "s", Logger: quiet, Upstream: func(string) session.Target {
		if gate.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-release
		}
		if lagging.Load() {
			return session.Target{}
		}
		return session.Target{Conn: direct}
	}})
	registerAll(t, ep, "up", direct)
	cs := connectServer(t, ep.Server())
	before := r.up.count("tools/call")

	lagging.Store(true) // a reload hid "args"; the replay has not reached the endpoint
	gate.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "up__args", Arguments: map[string]any{}})
		done <- err
	}()
	<-entered                              // the call found up__args and asks for its upstream
	ep.DeleteTools("up", []string{"args"}) // the replay catches up
	lagging.Store(false)
	close(release)
	select {
	case err := <-done:
		requireUnknown(t, err, "tool", "up__args")
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
	assert.Equal(t, before, r.up.count("tools/call"), "the call reached the upstream under the old projection")
}

// TestIsolationClientCannotInjectProgress: a client cannot make progress
// notifications reach another session's call, not by sending
// notifications/progress itself (with the other client's token or the
// relay's token of the other call), nor by calling with the other call's
// relay token as its own progress token; the other call gets exactly the
// progress its upstream sent.
func TestIsolationClientCannotInjectProgress(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	entered, proceed := make(chan any, 1), make(chan struct{})
	mcp.AddTool(f.up.Server, &mcp.Tool{Name: "slow"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		tok := req.Params.GetProgressToken()
		if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Message: "upstream 1"}); err != nil {
			return nil, nil, err
		}
		entered <- tok
		<-proceed
		if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 2, Message: "upstream 2"}); err != nil {
			return nil, nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "slow done"}}}, nil, nil
	})
	alice := f.connect("alice", `{}`)
	bob := f.connect("bob", `{}`)

	done := make(chan error, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "demo__slow", Arguments: map[string]any{}}
		p.SetProgressToken("shared")
		_, err := bob.cs.CallTool(context.Background(), p)
		done <- err
	}()
	var bobRelayTok string
	select {
	case tok := <-entered:
		bobRelayTok, _ = tok.(string)
	case <-time.After(10 * time.Second):
		t.Fatal("bob's call did not reach the upstream")
	}
	require.True(t, strings.HasPrefix(bobRelayTok, "wasmhost-progress-"), bobRelayTok)

	// alice tries every token she could know or guess.
	for _, tok := range []any{"shared", bobRelayTok, 1} {
		require.NoError(t, alice.cs.NotifyProgress(t.Context(), &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 99, Message: "injected"}))
	}
	p := &mcp.CallToolParams{Name: "demo__progress", Arguments: map[string]any{}}
	p.SetProgressToken(bobRelayTok)
	res, err := alice.cs.CallTool(t.Context(), p)
	require.NoError(t, err)
	require.Equal(t, "done", text(res))

	close(proceed)
	require.NoError(t, <-done)
	want := []string{"shared:upstream 1", "shared:upstream 2"}
	got := func(c *client) []string {
		c.mu.Lock()
		defer c.mu.Unlock()
		var out []string
		for _, p := range c.prog {
			out = append(out, fmt.Sprintf("%v:%s", p.ProgressToken, p.Message))
		}
		return out
	}
	require.Eventually(t, func() bool { return len(got(bob)) >= len(want) }, mcptest.EventWithin, 5*time.Millisecond)
	require.Eventually(t, func() bool { return len(got(alice)) >= 3 }, mcptest.EventWithin, 5*time.Millisecond)
	assert.Equal(t, want, got(bob), "bob got only what his upstream call sent")
	assert.Equal(t, []string{bobRelayTok + ":step 1", bobRelayTok + ":step 2", bobRelayTok + ":step 3"}, got(alice), "alice got her own call's progress under her token")
	assert.Zero(t, f.relay.Pending())
}
