package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/view"
)

var quiet = slog.New(slog.DiscardHandler)

// A Topology is the shape of a benchmark daemon: Sessions sessions, each
// using every one of Servers upstream servers (Sessions*Servers views), each
// server offering ToolsPerServer tools (plus a tenth as many prompts and
// resources, at least one of each).
type Topology struct {
	Sessions, Servers, ToolsPerServer int
}

// Views returns Sessions*Servers.
func (t Topology) Views() int { return t.Sessions * t.Servers }

// SessionName returns the name of session i.
func SessionName(i int) string { return fmt.Sprintf("s%05d", i) }

// ServerName returns the name of server i.
func ServerName(i int) string { return fmt.Sprintf("srv%03d", i) }

// Variant returns the metadata settings of variant v (of the 20 or so a
// benchmark spreads over its sessions) in generation gen, written in form
// form. Different variants and different generations have different
// canonical keys; different forms of one (v, gen) are canonical-equivalent
// but differ in bytes (form 0 is the plain one: others cut argument lists
// the policy removes, and reorder and repeat list entries). Every
// generation flips trust, so moving to a new generation changes the
// projection (the trust flag of every visible tool) of every view. tools is
// the number of tools each server offers.
func Variant(v, gen, form, tools int) json.RawMessage {
	var include []string
	for i := range tools {
		if v%4 == 0 || (i+v)%3 != 0 {
			name := ToolName(i)
			if form > 0 && i%2 == 0 {
				name += "(form " + strconv.Itoa(form) + ")"
			}
			include = append(include, name)
		}
	}
	exclude := []string{ToolName(v % tools), "retired_" + strconv.Itoa(gen)}
	if form%2 == 1 {
		for i, j := 0, len(include)-1; i < j; i, j = i+1, j-1 {
			include[i], include[j] = include[j], include[i]
		}
		exclude = append([]string{exclude[1], exclude[0]}, exclude...)
	}
	b, err := json.Marshal(struct {
		Trust           bool     `json:"trust"`
		AlwaysLoadTools bool     `json:"alwaysLoadTools"`
		IncludeTools    []string `json:"includeTools"`
		ExcludeTools    []string `json:"excludeTools"`
	}{gen%2 == 0, v%2 == 0, include, exclude})
	if err != nil {
		panic(err)
	}
	return b
}

// Config builds a config file for t and parses it. Server i is a stdio
// entry (the benchmark dialer reaches it in memory) whose settings are base
// (nil: none). Session s overrides the settings of every server with
// settings(s) when that is non-nil.
func (t Topology) Config(base json.RawMessage, settings func(session int) json.RawMessage) (*config.Config, error) {
	var baseKeys map[string]json.RawMessage
	if base != nil {
		if err := json.Unmarshal(base, &baseKeys); err != nil {
			return nil, fmt.Errorf("base settings: %w", err)
		}
	}
	var b bytes.Buffer
	b.WriteString(`{"mcpServers":{`)
	for i := range t.Servers {
		if i > 0 {
			b.WriteByte(',')
		}
		name := ServerName(i)
		fmt.Fprintf(&b, `%q:{"command":"/usr/bin/%s","args":["--root","/srv/%s"]`, name, name, name)
		for k, v := range baseKeys {
			fmt.Fprintf(&b, `,%q:%s`, k, v)
		}
		b.WriteByte('}')
	}
	b.WriteString(`},"sessions":{`)
	for s := range t.Sessions {
		if s > 0 {
			b.WriteByte(',')
		}
		name := SessionName(s)
		fmt.Fprintf(&b, `%q:{"token":"token-for-%s-0123456789abcdef"`, name, name)
		if settings != nil {
			if o := settings(s); o != nil {
				b.WriteString(`,"overrides":{`)
				for i := range t.Servers {
					if i > 0 {
						b.WriteByte(',')
					}
					fmt.Fprintf(&b, `%q:%s`, ServerName(i), o)
				}
				b.WriteByte('}')
			}
		}
		b.WriteByte('}')
	}
	b.WriteString(`}}`)
	cfg, _, err := config.Parse("bench.json", b.Bytes(), func(string) (string, bool) { return "", false }, nil)
	if err != nil {
		return nil, fmt.Errorf("bench config: %w", err)
	}
	return cfg, nil
}

// An Upstream is an in-memory MCP server with benchmark tools, each of which
// answers a call with a short text.
type Upstream struct {
	Name   string
	Server *mcp.Server
}

// NewUpstream returns server name offering nTools tools (see Tools) and the
// prompts and resources of Snapshot (at least one of each).
func NewUpstream(name string, nTools int) *Upstream {
	srv := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1.0.0"}, &mcp.ServerOptions{Logger: quiet})
	snap := Snapshot(name, nTools)
	if len(snap.Prompts) == 0 {
		snap.Prompts = []*mcp.Prompt{{Name: "prompt_000"}}
		snap.Resources = []*mcp.Resource{{URI: "file:///srv/" + name + "/data/000.txt", Name: "data_000"}}
	}
	for _, t := range snap.Tools {
		text := name + "/" + t.Name
		srv.AddTool(t, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil
		})
	}
	for _, p := range snap.Prompts {
		srv.AddPrompt(p, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{}, nil
		})
	}
	for _, r := range snap.Resources {
		srv.AddResource(r, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{}, nil
		})
	}
	return &Upstream{Name: name, Server: srv}
}

// Transport connects a new server session of u over in-memory transports
// and returns the client's end.
func (u *Upstream) Transport(ctx context.Context) (mcp.Transport, error) {
	ct, st := mcp.NewInMemoryTransports()
	if _, err := u.Server.Connect(ctx, st, nil); err != nil {
		return nil, err
	}
	return ct, nil
}

// A World is a daemon without its HTTP side: a pool over in-memory
// upstreams, a reconciler, and one registry per session.
type World struct {
	Topology
	Counters *opcount.Counters
	Pool     *pool.Pool
	Rec      *reconcile.Reconciler
	ups      map[string]*Upstream

	mu   sync.Mutex
	regs map[string]view.Registry
}

// WorldOptions change how a World is built.
type WorldOptions struct {
	// Registry makes each session's registry; nil means NewRegistry.
	Registry func(session string) view.Registry
	// Dialer reaches the upstreams; nil means in memory (Upstream).
	Dialer pool.Dialer
}

// NewWorld returns a world of t's upstreams whose reconciler uses policy.
func NewWorld(t Topology, policy abi.Policy, opts WorldOptions) *World {
	w := &World{Topology: t, Counters: &opcount.Counters{}, ups: make(map[string]*Upstream), regs: make(map[string]view.Registry)}
	for i := range t.Servers {
		u := NewUpstream(ServerName(i), t.ToolsPerServer)
		w.ups[u.Name] = u
	}
	newRegistry := opts.Registry
	if newRegistry == nil {
		newRegistry = func(string) view.Registry { return NewRegistry() }
	}
	dial := opts.Dialer
	if dial == nil {
		dial = w.dial
	}
	w.Pool = pool.New(pool.Options{Counters: w.Counters, Logger: quiet, Dialer: dial})
	w.Rec = reconcile.New(reconcile.Options{
		Pool: w.Pool, Policy: policy, Counters: w.Counters, Logger: quiet,
		Registry: func(session string) view.Registry {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.regs[session] == nil {
				w.regs[session] = newRegistry(session)
			}
			return w.regs[session]
		},
	})
	return w
}

func (w *World) dial(ctx context.Context, spec pool.Spec) (mcp.Transport, error) {
	u := w.ups[spec.Name]
	if u == nil {
		return nil, fmt.Errorf("no upstream %q", spec.Name)
	}
	return u.Transport(ctx)
}

// Registry returns session's registry, or nil before the session's first
// apply.
func (w *World) Registry(session string) view.Registry {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.regs[session]
}

// RegistryOps returns the registry calls made so far, in every session
// whose registry is a *Registry.
func (w *World) RegistryOps() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var n int64
	for _, r := range w.regs {
		if r, ok := r.(*Registry); ok {
			n += r.Ops()
		}
	}
	return n
}

// Apply applies cfg and fails on any binding error.
func (w *World) Apply(ctx context.Context, cfg *config.Config) (reconcile.Summary, error) {
	sum, err := w.Rec.Apply(ctx, cfg)
	if err == nil {
		err = sum.Err()
	}
	return sum, err
}

// Settle waits until every pool entry is steady.
func (w *World) Settle(ctx context.Context) error {
	for _, s := range w.Rec.Sessions() {
		for _, b := range w.Rec.Bindings(s) {
			if h := w.Rec.Handle(s, b.Server); h != nil {
				if err := h.Entry().Settle(ctx); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Close releases every binding and closes the pool.
func (w *World) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := w.Rec.Close(ctx)
	if perr := w.Pool.Close(ctx); err == nil {
		err = perr
	}
	return err
}
