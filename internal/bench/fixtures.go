package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
)

// CanonicalizeSettings returns n distinct raw settings objects shaped like
// the ones wasmhost sends (config.Settings.JSON: only the four settings
// keys, compact): a mix of trust values, include lists with and without
// arguments, exclude lists. Objects made with different batch numbers are
// distinct too, in bytes and in canonical form: each names a tool numbered
// batch*n+i, so a fresh batch defeats every memo keyed by settings bytes or
// by key.
func CanonicalizeSettings(n, batch int) []json.RawMessage {
	trusts := [...]string{``, `"trust":null,`, `"trust":false,`, `"trust":true,`}
	out := make([]json.RawMessage, n)
	var b []byte
	for i := range out {
		uid := strconv.Itoa(batch*n + i)
		b = append(b[:0], '{')
		b = append(b, trusts[i%4]...)
		b = append(b, `"alwaysLoadTools":`...)
		b = strconv.AppendBool(b, i%2 == 0)
		b = append(b, `,"includeTools":`...)
		if i%3 == 0 {
			b = append(b, `null`...)
		} else {
			b = append(b, `["read_file(path)","write_file","list_dir","search_`...)
			b = strconv.AppendInt(b, int64(i%17), 10)
			b = append(b, `","grep(pattern, path)","tool_`...)
			b = append(b, uid...)
			b = append(b, `"]`...)
		}
		b = append(b, `,"excludeTools":["delete_`...)
		b = append(b, uid...)
		b = append(b, `","move_file","chmod"]}`...)
		out[i] = json.RawMessage(string(b))
	}
	return out
}

// ToolName is the name of tool i of every benchmark server.
func ToolName(i int) string { return fmt.Sprintf("tool_%04d", i) }

// Tools returns n tools shaped like real ones as a client receives them
// from tools/list: a title, a description of a couple of sentences, an
// input schema (decoded JSON, as go-sdk clients decode it) with a few typed
// and described properties, and annotations. server makes descriptions
// differ between servers.
func Tools(server string, n int) []*mcp.Tool {
	tools := make([]*mcp.Tool, n)
	for i := range tools {
		name := ToolName(i)
		raw := fmt.Sprintf(`{
			"name": %q,
			"title": "Tool %d of %s",
			"description": "Runs operation %d of the %s server on the given path. Returns the result as text; fails when the path does not exist or the caller lacks permission.",
			"inputSchema": {
				"type": "object",
				"properties": {
					"path": {"type": "string", "description": "absolute path of the file or directory"},
					"recursive": {"type": "boolean", "description": "descend into sub-directories", "default": false},
					"limit": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "most entries to return"},
					"pattern": {"type": "string", "description": "glob pattern the names must match"}
				},
				"required": ["path"],
				"additionalProperties": false
			},
			"annotations": {"readOnlyHint": %t, "idempotentHint": true, "openWorldHint": false}
		}`, name, i, server, i, server, i%2 == 0)
		t := new(mcp.Tool)
		if err := json.Unmarshal([]byte(raw), t); err != nil {
			panic(fmt.Sprintf("bench: tool %d: %v", i, err))
		}
		tools[i] = t
	}
	return tools
}

// Snapshot returns a snapshot of a server with nTools tools (see Tools),
// nTools/10 prompts and nTools/10 resources.
func Snapshot(server string, nTools int) *pool.Snapshot {
	snap := &pool.Snapshot{Version: 1, Tools: Tools(server, nTools)}
	for i := range nTools / 10 {
		snap.Prompts = append(snap.Prompts, &mcp.Prompt{
			Name:        fmt.Sprintf("prompt_%03d", i),
			Description: "A prompt of " + server,
			Arguments:   []*mcp.PromptArgument{{Name: "topic", Description: "what to write about", Required: true}},
		})
		snap.Resources = append(snap.Resources, &mcp.Resource{
			URI: fmt.Sprintf("file:///srv/%s/data/%03d.txt", server, i), Name: fmt.Sprintf("data_%03d", i), MIMEType: "text/plain",
		})
	}
	return snap
}

// ProjectSettings returns settings for a snapshot of nTools tools that
// include three quarters of the tools (two thirds of those by name with an
// argument list, which the policy cuts off) and exclude every tenth, with
// trust and alwaysLoadTools set: the projection keeps 70% of the tools.
func ProjectSettings(nTools int) json.RawMessage {
	var include, exclude []string
	for i := range nTools {
		name := ToolName(i)
		if i%4 != 0 {
			if i%3 != 0 {
				name += "(path, recursive)"
			}
			include = append(include, name)
		}
		if i%10 == 0 {
			exclude = append(exclude, ToolName(i))
		}
	}
	b, err := json.Marshal(map[string]any{
		"trust": true, "alwaysLoadTools": true, "includeTools": include, "excludeTools": exclude,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// A CountingPolicy wraps a policy and counts the calls made through it. Use
// it by pointer: views share projections by policy identity.
type CountingPolicy struct {
	abi.Policy
	canonicalize, project, settings, batches atomic.Int64
}

// Count wraps p.
func Count(p abi.Policy) *CountingPolicy { return &CountingPolicy{Policy: p} }

// Canonicalize implements abi.Policy, counting the call and its settings.
func (c *CountingPolicy) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	c.canonicalize.Add(1)
	if req != nil {
		c.settings.Add(int64(len(req.Settings)))
	}
	return c.Policy.Canonicalize(ctx, req)
}

// Project implements abi.Policy, counting the call.
func (c *CountingPolicy) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	c.project.Add(1)
	return c.Policy.Project(ctx, req)
}

// ProjectBatch implements abi.BatchProjector, counting the call: one batch
// call when the wrapped policy batches, one project call per item (through
// c.Project) when it does not.
func (c *CountingPolicy) ProjectBatch(ctx context.Context, req *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error) {
	bp, ok := c.Policy.(abi.BatchProjector)
	if !ok {
		return abi.ProjectAll(ctx, struct{ abi.Policy }{c}, req)
	}
	c.batches.Add(1)
	return bp.ProjectBatch(ctx, req)
}

// PolicyCalls is a reading of a CountingPolicy.
type PolicyCalls struct {
	// Canonicalize, Project and ProjectBatch count calls; Settings counts
	// the settings objects the canonicalize calls carried.
	Canonicalize, Project, ProjectBatch, Settings int64
}

// Calls returns the calls counted so far.
func (c *CountingPolicy) Calls() PolicyCalls {
	return PolicyCalls{Canonicalize: c.canonicalize.Load(), Project: c.project.Load(), ProjectBatch: c.batches.Load(), Settings: c.settings.Load()}
}

// Total returns the calls of every kind.
func (p PolicyCalls) Total() int64 { return p.Canonicalize + p.Project + p.ProjectBatch }

// Sub returns p minus earlier.
func (p PolicyCalls) Sub(earlier PolicyCalls) PolicyCalls {
	return PolicyCalls{p.Canonicalize - earlier.Canonicalize, p.Project - earlier.Project, p.ProjectBatch - earlier.ProjectBatch, p.Settings - earlier.Settings}
}

// A Registry is a minimal in-memory view.Registry: the registrations of one
// session, by server and name, and a count of the calls made. It stands for
// a session's endpoint without the go-sdk server behind it, so that
// reconcile benchmarks measure wasmhost's own work. It is safe for
// concurrent use.
type Registry struct {
	ops atomic.Int64

	mu        sync.Mutex
	tools     map[string]map[string]*mcp.Tool
	prompts   map[string]map[string]*mcp.Prompt
	resources map[string]map[string]*mcp.Resource
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

// Ops returns how many registry calls were made.
func (r *Registry) Ops() int64 { return r.ops.Load() }

// Tools returns the tools registered for server, in no particular order.
func (r *Registry) Tools(server string) []*mcp.Tool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*mcp.Tool, 0, len(r.tools[server]))
	for _, t := range r.tools[server] {
		out = append(out, t)
	}
	return out
}

func putItems[T any](m map[string]map[string]*T, server string, items []*T, key func(*T) string) {
	byName := m[server]
	if byName == nil {
		byName = make(map[string]*T, len(items))
		m[server] = byName
	}
	for _, x := range items {
		byName[key(x)] = x
	}
}

func deleteItems[T any](m map[string]map[string]*T, server string, keys []string) {
	for _, k := range keys {
		delete(m[server], k)
	}
	if len(m[server]) == 0 {
		delete(m, server)
	}
}

// PutTools implements view.Registry.
func (r *Registry) PutTools(server string, tools []*mcp.Tool) {
	r.ops.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	putItems(r.tools, server, tools, func(t *mcp.Tool) string { return t.Name })
}

// DeleteTools implements view.Registry.
func (r *Registry) DeleteTools(server string, names []string) {
	r.ops.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	deleteItems(r.tools, server, names)
}

// PutPrompts implements view.Registry.
func (r *Registry) PutPrompts(server string, prompts []*mcp.Prompt) {
	r.ops.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	putItems(r.prompts, server, prompts, func(p *mcp.Prompt) string { return p.Name })
}

// DeletePrompts implements view.Registry.
func (r *Registry) DeletePrompts(server string, names []string) {
	r.ops.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	deleteItems(r.prompts, server, names)
}

// PutResources implements view.Registry.
func (r *Registry) PutResources(server string, resources []*mcp.Resource) {
	r.ops.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	putItems(r.resources, server, resources, func(x *mcp.Resource) string { return x.URI })
}

// DeleteResources implements view.Registry.
func (r *Registry) DeleteResources(server string, uris []string) {
	r.ops.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	deleteItems(r.resources, server, uris)
}
