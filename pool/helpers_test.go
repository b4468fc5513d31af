package pool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/churn"
	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

var quiet = slog.New(slog.DiscardHandler)

// An upstream is a real go-sdk MCP server reached over in-memory
// transports, one server session per dial.
type upstream struct {
	name   string
	server *mcp.Server
	// listDelay slows tools/list down (to keep a refresh in flight).
	listDelay atomic.Int64

	mu       sync.Mutex
	tools    map[string]bool
	sessions []net.Conn // the server ends of the connections
	dials    int
}

func newUpstream(t *testing.T, name string, tools ...string) *upstream {
	t.Helper()
	u := &upstream{name: name, tools: make(map[string]bool)}
	u.server = mcp.NewServer(&mcp.Implementation{Name: "up-" + name, Version: "1"}, &mcp.ServerOptions{Logger: quiet, PageSize: 2})
	u.server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if d := u.listDelay.Load(); d > 0 && method == "tools/list" {
				time.Sleep(time.Duration(d))
			}
			return next(ctx, method, req)
		}
	})
	for _, tool := range tools {
		u.addTool(tool)
	}
	u.server.AddPrompt(&mcp.Prompt{Name: "greet", Description: "say hello"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{}, nil
	})
	u.server.AddResource(&mcp.Resource{URI: "file:///readme", Name: "readme"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{}, nil
	})
	return u
}

func (u *upstream) addTool(name string) {
	u.mu.Lock()
	u.tools[name] = true
	u.mu.Unlock()
	u.server.AddTool(&mcp.Tool{
		Name:        name,
		Description: "the " + name + " tool of " + u.name,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: u.name + "/" + name + " says hi"}}}, nil
	})
}

func (u *upstream) removeTool(name string) {
	u.mu.Lock()
	delete(u.tools, name)
	u.mu.Unlock()
	u.server.RemoveTools(name)
}

func (u *upstream) toolNames() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Sorted(maps.Keys(u.tools))
}

func (u *upstream) dialCount() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.dials
}

// kill closes the newest server session, as if the upstream crashed.
func (u *upstream) kill() {
	u.mu.Lock()
	if len(u.sessions) == 0 {
		u.mu.Unlock()
		return
	}
	ss := u.sessions[len(u.sessions)-1]
	u.mu.Unlock()
	_ = ss.Close()
}

// transport connects a new server session; kill breaks its pipe.
func (u *upstream) transport(ctx context.Context) (mcp.Transport, error) {
	ct, sc, err := mcptest.Connect(ctx, u.server)
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	u.sessions = append(u.sessions, sc)
	u.dials++
	u.mu.Unlock()
	return ct, nil
}

// A transporter is an upstream a test dials in memory.
type transporter interface {
	transport(context.Context) (mcp.Transport, error)
}

// An env is a pool over in-memory upstreams, with hooks on dialing.
type env struct {
	t         *testing.T
	counters  *churn.Counters
	pool      *pool.Pool
	upstreams map[string]*upstream
	// others are upstreams of other kinds (hostile ones), by name.
	others map[string]transporter
	// beforeDial, when set, runs before each dial with the dial's context
	// (it may block or fail).
	beforeDial atomic.Pointer[func(context.Context, pool.Spec) error]
}

func newEnv(t *testing.T, opts pool.Options, ups ...*upstream) *env {
	t.Helper()
	e := &env{t: t, counters: &churn.Counters{}, upstreams: make(map[string]*upstream), others: make(map[string]transporter)}
	for _, u := range ups {
		e.upstreams[u.name] = u
	}
	opts.Counters = e.counters
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	opts.Dialer = func(ctx context.Context, spec pool.Spec) (mcp.Transport, error) {
		if f := e.beforeDial.Load(); f != nil {
			if err := (*f)(ctx, spec); err != nil {
				return nil, err
			}
		}
		if u := e.upstreams[spec.Name]; u != nil {
			return u.transport(ctx)
		}
		if o := e.others[spec.Name]; o != nil {
			return o.transport(ctx)
		}
		return nil, fmt.Errorf("no upstream %q", spec.Name)
	}
	e.pool = pool.New(opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.pool.Close(ctx)
	})
	return e
}

func (e *env) delta(before churn.Values) churn.Values { return e.counters.Snapshot().Sub(before) }

func (e *env) newView(session, server, settings string, reg *viewtest.Registry, p abi.Policy) *view.View {
	if p == nil {
		p = metakey.Reference{}
	}
	return view.New(view.Config{
		Session: session, Server: server, Registry: reg, Counters: e.counters,
		Policy: p, Settings: json.RawMessage(settings), Logger: quiet,
	})
}

// acquire makes a view for session with settings and acquires spec for it.
func (e *env) acquire(spec pool.Spec, session, settings string, reg *viewtest.Registry) *pool.Handle {
	e.t.Helper()
	h, err := e.pool.Acquire(context.Background(), spec, e.newView(session, spec.Name, settings, reg, nil))
	require.NoError(e.t, err)
	return h
}

func (e *env) entry(id string) pool.EntryInfo {
	e.t.Helper()
	for _, info := range e.pool.Entries() {
		if info.ID == id {
			return info
		}
	}
	e.t.Fatalf("no entry %q in %v", id, e.pool.Entries())
	return pool.EntryInfo{}
}

func stdioSpec(name string) pool.Spec {
	return pool.Spec{
		Name:    name,
		Command: "/usr/bin/" + name + "-server",
		Args:    []string{"--root", "/srv"},
		Env:     map[string]string{"TOKEN": "t1", "MODE": "ro"},
		Pooled:  true,
	}
}

// requireProjection checks that reg holds, for server, exactly the
// projection of snap under settings computed independently with the
// reference policy.
func requireProjection(t *testing.T, reg *viewtest.Registry, server, settings string, snap *pool.Snapshot) {
	t.Helper()
	want, err := view.Project(context.Background(), metakey.Reference{}, json.RawMessage(settings), snap)
	require.NoError(t, err)
	if diff := cmp.Diff(viewtest.StateOf(want), reg.State(server)); diff != "" {
		t.Fatalf("registry of %s (-want +got):\n%s", server, diff)
	}
}

func snapshotToolNames(s *pool.Snapshot) []string {
	var out []string
	for _, t := range s.Tools {
		out = append(out, t.Name)
	}
	slices.Sort(out)
	return out
}

// flagsOf returns the two session flags of a registered tool.
func flagsOf(t *testing.T, tool *mcp.Tool) [2]bool {
	t.Helper()
	require.NotNil(t, tool)
	trust, ok1 := tool.Meta[view.MetaTrust].(bool)
	always, ok2 := tool.Meta[view.MetaAlwaysLoad].(bool)
	require.True(t, ok1 && ok2, "tool %q meta %v", tool.Name, tool.Meta)
	return [2]bool{trust, always}
}

func settle(t *testing.T, h *pool.Handle) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, h.Entry().Settle(ctx))
}

func TestMain(m *testing.M) {
	demoserver.RunIfChild() // kill_test.go starts this binary as a real stdio upstream
	goleak.VerifyTestMain(m)
}
