package pool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

var quiet = slog.New(slog.DiscardHandler)

// newUpstream returns the fake upstream the pool tests dial in memory:
// tools that take a "path" and answer "<name>/<tool> says hi", the prompt
// "greet", the resource file:///readme, lists paged two by two.
func newUpstream(t *testing.T, name string, tools ...string) *mcptest.Upstream {
	t.Helper()
	return mcptest.NewUpstream(mcptest.UpstreamConfig{
		Name: name, Tools: tools, PageSize: 2, Resource: "file:///readme", PathArg: true, Reply: " says hi",
	})
}

// A transporter is an upstream a test dials in memory.
type transporter interface {
	transport(context.Context) (mcp.Transport, error)
}

// An env is a pool over in-memory upstreams, with hooks on dialing.
type env struct {
	t         *testing.T
	counters  *opcount.Counters
	pool      *pool.Pool
	upstreams map[string]*mcptest.Upstream
	// others are upstreams of other kinds (hostile ones), by name.
	others map[string]transporter
	// beforeDial, when set, runs before each dial with the dial's context
	// (it may block or fail).
	beforeDial atomic.Pointer[func(context.Context, pool.Spec) error]
}

func newEnv(t *testing.T, opts pool.Options, ups ...*mcptest.Upstream) *env {
	t.Helper()
	e := &env{t: t, counters: &opcount.Counters{}, upstreams: make(map[string]*mcptest.Upstream), others: make(map[string]transporter)}
	for _, u := range ups {
		e.upstreams[u.Name] = u
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
			return u.Transport(ctx)
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

func (e *env) delta(before opcount.Values) opcount.Values { return e.counters.Snapshot().Sub(before) }

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
