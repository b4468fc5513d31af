// Package viewtest provides an in-memory view.Registry for tests of the
// view, pool and reconcile layers: it applies puts and deletes like a
// session's MCP server would and records every operation, so tests can
// compare the registered state with an expected projection and count the
// calls a change caused.
package viewtest

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/wasmhost/wasmhost/view"
)

// An Op is one recorded registry call.
type Op struct {
	// Method is the Registry method name, e.g. "PutTools".
	Method string
	Server string
	// Keys are the names (or URIs) the call carried, in call order.
	Keys []string
}

// String formats the op as Method(server, keys).
func (o Op) String() string { return fmt.Sprintf("%s(%s, %q)", o.Method, o.Server, o.Keys) }

// A Registry is an in-memory view.Registry for one session. It is safe for
// concurrent use. The zero value is not usable; use NewRegistry.
type Registry struct {
	mu        sync.Mutex
	tools     map[string]map[string]*mcp.Tool
	prompts   map[string]map[string]*mcp.Prompt
	resources map[string]map[string]*mcp.Resource
	ops       []Op
}

var _ view.Registry = (*Registry)(nil)

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{
		tools:     make(map[string]map[string]*mcp.Tool),
		prompts:   make(map[string]map[string]*mcp.Prompt),
		resources: make(map[string]map[string]*mcp.Resource),
	}
}

func put[T any](m map[string]map[string]*T, server string, items []*T, key func(*T) string) []string {
	if m[server] == nil {
		m[server] = make(map[string]*T)
	}
	keys := make([]string, len(items))
	for i, x := range items {
		keys[i] = key(x)
		m[server][keys[i]] = x
	}
	return keys
}

func del[T any](m map[string]map[string]*T, server string, keys []string) {
	for _, k := range keys {
		delete(m[server], k)
	}
	if len(m[server]) == 0 {
		delete(m, server)
	}
}

func (r *Registry) record(method, server string, keys []string) {
	r.ops = append(r.ops, Op{Method: method, Server: server, Keys: slices.Clone(keys)})
}

// PutTools implements view.Registry.
func (r *Registry) PutTools(server string, tools []*mcp.Tool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("PutTools", server, put(r.tools, server, tools, func(t *mcp.Tool) string { return t.Name }))
}

// DeleteTools implements view.Registry.
func (r *Registry) DeleteTools(server string, names []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	del(r.tools, server, names)
	r.record("DeleteTools", server, names)
}

// PutPrompts implements view.Registry.
func (r *Registry) PutPrompts(server string, prompts []*mcp.Prompt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("PutPrompts", server, put(r.prompts, server, prompts, func(p *mcp.Prompt) string { return p.Name }))
}

// DeletePrompts implements view.Registry.
func (r *Registry) DeletePrompts(server string, names []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	del(r.prompts, server, names)
	r.record("DeletePrompts", server, names)
}

// PutResources implements view.Registry.
func (r *Registry) PutResources(server string, resources []*mcp.Resource) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record("PutResources", server, put(r.resources, server, resources, func(x *mcp.Resource) string { return x.URI }))
}

// DeleteResources implements view.Registry.
func (r *Registry) DeleteResources(server string, uris []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	del(r.resources, server, uris)
	r.record("DeleteResources", server, uris)
}

// Ops returns a copy of every operation recorded so far.
func (r *Registry) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// OpCount returns how many operations were recorded so far.
func (r *Registry) OpCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Tool returns the registered tool server/name, or nil.
func (r *Registry) Tool(server, name string) *mcp.Tool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tools[server][name]
}

// Servers returns the servers that have at least one registration, sorted.
func (r *Registry) Servers() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := make(map[string]struct{})
	for s := range r.tools {
		set[s] = struct{}{}
	}
	for s := range r.prompts {
		set[s] = struct{}{}
	}
	for s := range r.resources {
		set[s] = struct{}{}
	}
	return slices.Sorted(maps.Keys(set))
}

// A State is what a registry holds for one server, each list sorted by name
// (resources by URI), in a form cmp.Diff can compare.
type State struct {
	Tools     []*mcp.Tool
	Prompts   []*mcp.Prompt
	Resources []*mcp.Resource
}

// State returns what the registry holds for server.
func (r *Registry) State(server string) State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return State{
		Tools:     sortedValues(r.tools[server]),
		Prompts:   sortedValues(r.prompts[server]),
		Resources: sortedValues(r.resources[server]),
	}
}

// StateOf returns the State a registry holding exactly p would have; nil
// means nothing registered.
func StateOf(p *view.Projection) State {
	if p == nil {
		return State{}
	}
	tools := make(map[string]*mcp.Tool)
	for _, t := range p.Tools {
		tools[t.Name] = t
	}
	prompts := make(map[string]*mcp.Prompt)
	for _, x := range p.Prompts {
		prompts[x.Name] = x
	}
	resources := make(map[string]*mcp.Resource)
	for _, x := range p.Resources {
		resources[x.URI] = x
	}
	return State{Tools: sortedValues(tools), Prompts: sortedValues(prompts), Resources: sortedValues(resources)}
}

// ToolNames returns the sorted names of the tools registered for server.
func (r *Registry) ToolNames(server string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.tools[server]))
}

// PromptNames returns the sorted names of the prompts registered for server.
func (r *Registry) PromptNames(server string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.prompts[server]))
}

// ResourceURIs returns the sorted URIs of the resources registered for
// server.
func (r *Registry) ResourceURIs(server string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.resources[server]))
}

func sortedValues[T any](m map[string]*T) []*T {
	if len(m) == 0 {
		return nil
	}
	out := make([]*T, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[k])
	}
	return out
}
