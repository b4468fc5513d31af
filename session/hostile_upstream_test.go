package session_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/session"
	"github.com/wasmhost/wasmhost/view"
)

// A liar is a go-sdk MCP server whose tools/list answer is whatever the
// test sets, duplicates and odd names included (a go-sdk server cannot
// hold those itself), and whose tools/call answers "<server>:<name>" for
// any name. bump makes the go-sdk server send a real tools/list_changed.
type liar struct {
	name  string
	srv   *mcp.Server
	tools atomic.Pointer[[]*mcp.Tool]
	lists atomic.Int64
	bumps atomic.Int64
}

func newLiar(name string, tools []*mcp.Tool) *liar {
	l := &liar{name: name}
	l.tools.Store(&tools)
	l.srv = mcp.NewServer(&mcp.Implementation{Name: "liar-" + name, Version: "1"}, &mcp.ServerOptions{
		Logger:       quiet,
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	l.srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "tools/list":
				l.lists.Add(1)
				return &mcp.ListToolsResult{Tools: *l.tools.Load()}, nil
			case "tools/call":
				name := req.GetParams().(*mcp.CallToolParamsRaw).Name
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: l.name + ":" + name}}}, nil
			}
			return next(ctx, method, req)
		}
	})
	return l
}

// bump makes the upstream announce a tools/list_changed (its list answer
// is l.tools whatever the go-sdk server holds).
func (l *liar) bump() {
	n := l.bumps.Add(1)
	l.srv.AddTool(&mcp.Tool{Name: fmt.Sprintf("bump%d", n), InputSchema: map[string]any{"type": "object"}}, nil)
}

// A hostileSession is one session's endpoint over a pool of liars, with a
// connected client.
type hostileSession struct {
	ep      *session.Endpoint
	cs      *mcp.ClientSession
	handles map[string]*pool.Handle
}

type hostileRig struct {
	t        *testing.T
	pool     *pool.Pool
	counters *opcount.Counters
	logs     *mcptest.LogBuffer
	liars    map[string]*liar
}

func newHostileRig(t *testing.T, liars ...*liar) *hostileRig {
	t.Helper()
	r := &hostileRig{t: t, counters: &opcount.Counters{}, logs: &mcptest.LogBuffer{}, liars: map[string]*liar{}}
	var mu sync.Mutex
	var pipes []interface{ Close() error }
	for _, l := range liars {
		r.liars[l.name] = l
	}
	r.pool = pool.New(pool.Options{
		Counters: r.counters,
		Logger:   r.logger(),
		Dialer: func(ctx context.Context, spec pool.Spec) (mcp.Transport, error) {
			l := r.liars[spec.Name]
			if l == nil {
				return nil, fmt.Errorf("no upstream %q", spec.Name)
			}
			ct, sc, err := mcptest.Connect(ctx, l.srv)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			pipes = append(pipes, sc)
			mu.Unlock()
			return ct, nil
		},
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.pool.Close(ctx)
		mu.Lock()
		defer mu.Unlock()
		for _, p := range pipes {
			_ = p.Close()
		}
	})
	return r
}

func (r *hostileRig) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// connect makes session name with every liar as one of its servers.
func (r *hostileRig) connect(name string) *hostileSession {
	t := r.t
	t.Helper()
	s := &hostileSession{handles: map[string]*pool.Handle{}}
	var mu sync.Mutex
	s.ep = session.New(session.Options{
		Name:   name,
		Logger: r.logger(),
		Upstream: func(server string) session.Target {
			mu.Lock()
			h := s.handles[server]
			mu.Unlock()
			if h == nil {
				return session.Target{}
			}
			return session.Target{Conn: h.Conn(), Timeout: 5 * time.Second, Subscriptions: h}
		},
	})
	for srv := range r.liars {
		v := view.New(view.Config{Session: name, Server: srv, Registry: s.ep, Counters: r.counters, Policy: metakey.Reference{}, Settings: json.RawMessage(`{}`), Logger: r.logger()})
		h, err := r.pool.Acquire(t.Context(), pool.Spec{Name: srv, Command: "in-memory", Pooled: true}, v)
		require.NoError(t, err)
		mu.Lock()
		s.handles[srv] = h
		mu.Unlock()
	}
	s.cs = connectServer(t, s.ep.Server())
	return s
}

func (r *hostileRig) settle(s *hostileSession) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, h := range s.handles {
		require.NoError(r.t, h.Entry().Settle(ctx))
	}
}

func obj() map[string]any { return map[string]any{"type": "object"} }

// exposedTools lists the tools a session's client sees, by name.
func exposedTools(t *testing.T, cs *mcp.ClientSession) map[string]*mcp.Tool {
	t.Helper()
	out := map[string]*mcp.Tool{}
	for tool, err := range cs.Tools(t.Context(), nil) {
		require.NoError(t, err)
		out[tool.Name] = tool
	}
	return out
}

// Before the fix, an upstream that lists two tools under one name
// ("dup" described "first", then "dup" described "second") has no
// warning logged; the session serves the second, and after the next
// rediscovery, with the listing unchanged, it serves the first, and
// from then on every rediscovery re-registers it, so each one sends the
// clients a tools/list_changed although nothing changed. Duplicates
// should be reported (naming the server and the tool) and resolved the
// same way every time, so that an unchanged listing changes nothing.
func TestHostileDuplicateToolNamesStayPut(t *testing.T) {
	t.Parallel()
	evil := newLiar("evil", []*mcp.Tool{
		{Name: "dup", Description: "first", InputSchema: obj()},
		{Name: "dup", Description: "second", InputSchema: obj()},
		{Name: "plain", InputSchema: obj()},
	})
	r := newHostileRig(t, evil)
	s := r.connect("s1")
	r.settle(s)
	tools := exposedTools(t, s.cs)
	require.Len(t, tools, 2)
	require.Contains(t, tools, "evil__dup")
	served := tools["evil__dup"].Description
	changes := s.ep.Changes()

	for i := range 3 {
		lists := evil.lists.Load()
		evil.bump() // the listing itself stays the same
		require.Eventually(t, func() bool { return evil.lists.Load() > lists }, mcptest.EventWithin, 5*time.Millisecond)
		r.settle(s)
		assert.Equal(t, served, exposedTools(t, s.cs)["evil__dup"].Description, "rediscovery %d changed which duplicate is served", i+1)
		assert.Equal(t, changes, s.ep.Changes(), "rediscovery %d of an unchanged listing notified the clients", i+1)
	}
	assert.True(t, r.logs.HasLine("server=evil", "duplicates=", `tool \"dup\"`), "no warning names the server and the duplicated tool:\n%s", r.logs.String())
}

// validToolName is the MCP naming rule for tools (1 to 128 characters,
// ASCII letters, digits, "_", "-" and "."), the one the go-sdk checks.
var validToolName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// Before the fix, an upstream whose tool names break the MCP naming
// rule (a name of 5000 characters, one with a newline, one with spaces
// and accents) has them served to the session's clients under those
// names; the go-sdk only logs an error. Strict clients (and model APIs,
// which allow even fewer characters) refuse the whole tool list, so one
// server's names cost the session every other server's tools too. Such
// tools should be left out (or renamed), with a warning naming the
// server, as tools whose schema cannot be served already are.
func TestHostileInvalidToolNamesAreNotServed(t *testing.T) {
	t.Parallel()
	evil := newLiar("evil", []*mcp.Tool{
		{Name: strings.Repeat("x", 5000), InputSchema: obj()},
		{Name: "line\nbreak", InputSchema: obj()},
		{Name: "héllo wörld", InputSchema: obj()},
		{Name: "fine", InputSchema: obj()},
	})
	good := newLiar("good", []*mcp.Tool{{Name: "x", InputSchema: obj()}})
	r := newHostileRig(t, evil, good)
	s := r.connect("s1")
	r.settle(s)
	tools := exposedTools(t, s.cs)
	require.Contains(t, tools, "good__x")
	require.Contains(t, tools, "evil__fine")
	for name := range tools {
		assert.Regexp(t, validToolName, name, "a tool name clients may refuse is served")
	}
	assert.True(t, r.logs.HasLine("WARN", "server=evil"), "no warning names the server:\n%.2000s", r.logs.String())
}

// An upstream with odd tools (an empty name, a name holding the
// separator, input schemas that are a string, a boolean, an array, a
// number, or an object whose type is not "object") costs only those
// tools: the empty name is not exposed, "a__b" is served as
// "evil__a__b" and routed to it, the others are left out with a warning
// naming the server and the tool, and the other server's tool is served.
func TestHostileOddToolsAreContained(t *testing.T) {
	t.Parallel()
	evil := newLiar("evil", []*mcp.Tool{
		{Name: "", InputSchema: obj()},
		{Name: "a__b", InputSchema: obj()},
		{Name: "str", InputSchema: "string"},
		{Name: "boolean", InputSchema: true},
		{Name: "array", InputSchema: []any{1, 2}},
		{Name: "number", InputSchema: 3},
		{Name: "typelist", InputSchema: map[string]any{"type": []any{"object", "null"}}},
		{Name: "fine", InputSchema: obj()},
	})
	good := newLiar("good", []*mcp.Tool{{Name: "x", InputSchema: obj()}})
	r := newHostileRig(t, evil, good)
	s := r.connect("s1")
	r.settle(s)
	require.Equal(t, []string{"evil__a__b", "evil__fine", "good__x"}, s.ep.Tools())
	for _, name := range []string{"evil__a__b", "evil__fine", "good__x"} {
		res, err := s.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name})
		require.NoError(t, err)
		require.False(t, res.IsError)
		server, tool, _ := strings.Cut(name, session.Separator)
		require.Equal(t, server+":"+tool, text(res), "the call reached %s's %q", server, tool)
	}
	for _, tool := range []string{"str", "boolean", "array", "number", "typelist"} {
		assert.True(t, r.logs.HasLine("left out", "server=evil", "tool="+tool), "no warning for %s", tool)
	}
}

// An upstream with a tool whose input schema is huge (5000 properties,
// about 250 kB) and one nested 300 levels deep is served to every session,
// like any other tool, next to the other server's.
func TestHostileGiantSchemaIsServed(t *testing.T) {
	t.Parallel()
	props := map[string]any{}
	for i := range 5000 {
		props[fmt.Sprintf("p%05d", i)] = map[string]any{"type": "string", "description": "one of many"}
	}
	deep := obj()
	for cur, i := deep, 0; i < 300; i++ {
		next := obj()
		cur["properties"] = map[string]any{"x": next}
		cur = next
	}
	evil := newLiar("evil", []*mcp.Tool{
		{Name: "giant", InputSchema: map[string]any{"type": "object", "properties": props}},
		{Name: "deep", InputSchema: deep},
	})
	good := newLiar("good", []*mcp.Tool{{Name: "x", InputSchema: obj()}})
	r := newHostileRig(t, evil, good)
	for _, name := range []string{"s1", "s2"} {
		s := r.connect(name)
		r.settle(s)
		tools := exposedTools(t, s.cs)
		require.Len(t, tools, 3)
		require.Len(t, tools["evil__giant"].InputSchema.(map[string]any)["properties"], 5000)
		res, err := s.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "good__x"})
		require.NoError(t, err)
		require.Equal(t, "good:x", text(res))
	}
}

// An upstream with a tool whose input schema nests deeper than the
// go-sdk's JSON decoder allows makes its whole tools/list undecodable:
// Acquire of that server fails, naming it and the listing; another
// server of the session is unaffected.
func TestHostileTooDeepSchemaFailsOnlyItsServer(t *testing.T) {
	t.Parallel()
	deep := obj()
	for cur, i := deep, 0; i < 3000; i++ {
		next := obj()
		cur["properties"] = map[string]any{"x": next}
		cur = next
	}
	evil := newLiar("evil", []*mcp.Tool{{Name: "deep", InputSchema: deep}, {Name: "fine", InputSchema: obj()}})
	good := newLiar("good", []*mcp.Tool{{Name: "x", InputSchema: obj()}})
	r := newHostileRig(t, evil, good)
	ep := session.New(session.Options{Name: "s1", Logger: quiet, Upstream: func(string) session.Target { return session.Target{} }})
	v := view.New(view.Config{Session: "s1", Server: "evil", Registry: ep, Counters: r.counters, Policy: metakey.Reference{}, Logger: quiet})
	_, err := r.pool.Acquire(t.Context(), pool.Spec{Name: "evil", Command: "in-memory", Pooled: true}, v)
	require.ErrorIs(t, err, pool.ErrTerminal)
	require.Contains(t, err.Error(), `server "evil"`)
	require.Contains(t, err.Error(), "list tools")
	gv := view.New(view.Config{Session: "s1", Server: "good", Registry: ep, Counters: r.counters, Policy: metakey.Reference{}, Logger: quiet})
	h, err := r.pool.Acquire(t.Context(), pool.Spec{Name: "good", Command: "in-memory", Pooled: true}, gv)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Release(context.Background()) })
	require.Equal(t, []string{"good__x"}, ep.Tools())
}

// An upstream listing 500 tools whose names break the naming rule, each 4
// KiB long, and 500 whose schemas cannot be served, gets a burst of
// warnings into the operator's log, each naming the server with the
// tool's name cut to a few hundred bytes, then one a second saying how
// many were not logged: its other tools are served. Before, each session
// logged a line per tool, with the name whole, at every change of the
// listing (as often as every 100 ms): up to the listing's 32 MiB per
// session each time.
func TestHostileLeftOutWarningsAreBounded(t *testing.T) {
	t.Parallel()
	var tools []*mcp.Tool
	long := strings.Repeat("n", 4<<10)
	for i := range 500 {
		tools = append(tools,
			&mcp.Tool{Name: fmt.Sprintf("bad name %d %s", i, long), InputSchema: obj()},
			&mcp.Tool{Name: fmt.Sprintf("schema%d", i), InputSchema: "string"})
	}
	tools = append(tools, &mcp.Tool{Name: "fine", InputSchema: obj()})
	evil := newLiar("evil", tools)
	good := newLiar("good", []*mcp.Tool{{Name: "x", InputSchema: obj()}})
	r := newHostileRig(t, evil, good)
	s := r.connect("s1")
	r.settle(s)
	require.Equal(t, []string{"evil__fine", "good__x"}, s.ep.Tools())
	var warned int
	for l := range strings.Lines(r.logs.String()) {
		if !strings.Contains(l, "left out") {
			continue
		}
		warned++
		assert.Less(t, len(l), 2<<10, "a warning of %d bytes: %.300s…", len(l), l)
		assert.Contains(t, l, "server=evil")
	}
	assert.Positive(t, warned)
	assert.Less(t, warned, 100, "warnings logged for 1,000 tools left out")
}
