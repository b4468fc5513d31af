package view

import (
	"reflect"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/wasmhost/wasmhost/internal/opcount"
)

// A Registry is one session's set of registrations, the thing a session's
// MCP endpoint serves (the daemon implements it with its mcp.Server). Items
// are keyed by (server, name) for tools and prompts and by (server, URI) for
// resources; a put replaces an item with the same key. Each method call is
// one registry operation in the operation counters, so views batch: a replay
// makes at most one call per method.
//
// Methods are called with a view's lock held and may be called concurrently
// by the views of different servers in one session, so implementations must
// be safe for concurrent use and must not call back into the view. They
// must not modify the slices they are given: views with equal projections
// share them. They cannot fail: a registry is in-process state, and a view
// assumes each call took effect entirely.
type Registry interface {
	PutTools(server string, tools []*mcp.Tool)
	DeleteTools(server string, names []string)
	PutPrompts(server string, prompts []*mcp.Prompt)
	DeletePrompts(server string, names []string)
	PutResources(server string, resources []*mcp.Resource)
	DeleteResources(server string, uris []string)
}

// A TemplateRegistry is a Registry that also serves resource templates,
// keyed by their URI templates. A view puts a projection's templates only
// into a registry that implements it; Registry stays as it is, so
// registries written before templates keep working without them.
type TemplateRegistry interface {
	Registry
	PutResourceTemplates(server string, templates []*mcp.ResourceTemplate)
	DeleteResourceTemplates(server string, uriTemplates []string)
}

// applyDiff brings reg from old to next for server: for each kind of item
// it deletes what next lacks, then puts what is new or different. Equal
// projections make no call at all. Either projection may be nil (nothing
// registered). Resource templates go only to a TemplateRegistry.
func applyDiff(reg Registry, c *opcount.Counters, server string, old, next *Projection) {
	if old == next {
		return
	}
	diffOf(old, next).apply(reg, c, server)
}

// A delta is what a registry is sent to go from one projection to another:
// for each kind of item, the keys to delete and the items to put. Since
// projections are immutable, the delta of a pair of them never changes, and
// the views that move between the same two (views with the same key, at a
// rediscovery or a reload) share one (Memo.delta). Its slices are shared
// too: registries only read them.
type delta struct {
	delTools     []string
	putTools     []*mcp.Tool
	delPrompts   []string
	putPrompts   []*mcp.Prompt
	delResources []string
	putResources []*mcp.Resource
	delTemplates []string
	putTemplates []*mcp.ResourceTemplate
}

// diffOf returns the delta from old to next; either may be nil.
func diffOf(old, next *Projection) *delta {
	if old == nil && next != nil {
		// Everything is new: next's own lists, which are what changed
		// returns against nothing (registries only read them).
		return &delta{
			putTools:     slices.Clip(next.Tools),
			putPrompts:   slices.Clip(next.Prompts),
			putResources: slices.Clip(next.Resources),
			putTemplates: slices.Clip(next.ResourceTemplates),
		}
	}
	if old == nil {
		old = &Projection{}
	}
	if next == nil {
		next = &Projection{}
	}
	toolKey := func(t *mcp.Tool) string { return t.Name }
	promptKey := func(p *mcp.Prompt) string { return p.Name }
	resourceKey := func(r *mcp.Resource) string { return r.URI }
	templateKey := func(t *mcp.ResourceTemplate) string { return t.URITemplate }
	return &delta{
		delTools:     slices.Clip(removed(old.Tools, next.Tools, toolKey)),
		putTools:     slices.Clip(changed(old.Tools, next.Tools, toolKey)),
		delPrompts:   slices.Clip(removed(old.Prompts, next.Prompts, promptKey)),
		putPrompts:   slices.Clip(changed(old.Prompts, next.Prompts, promptKey)),
		delResources: slices.Clip(removed(old.Resources, next.Resources, resourceKey)),
		putResources: slices.Clip(changed(old.Resources, next.Resources, resourceKey)),
		delTemplates: slices.Clip(removed(old.ResourceTemplates, next.ResourceTemplates, templateKey)),
		putTemplates: slices.Clip(changed(old.ResourceTemplates, next.ResourceTemplates, templateKey)),
	}
}

// apply sends d to reg for server: for each kind of item, the deletions,
// then the puts, each in one call (counted in c.RegistryOps) and only when
// there is something to send. Resource templates go only to a
// TemplateRegistry.
func (d *delta) apply(reg Registry, c *opcount.Counters, server string) {
	send(c, d.delTools, func(del []string) { reg.DeleteTools(server, del) })
	send(c, d.putTools, func(put []*mcp.Tool) { reg.PutTools(server, put) })
	send(c, d.delPrompts, func(del []string) { reg.DeletePrompts(server, del) })
	send(c, d.putPrompts, func(put []*mcp.Prompt) { reg.PutPrompts(server, put) })
	send(c, d.delResources, func(del []string) { reg.DeleteResources(server, del) })
	send(c, d.putResources, func(put []*mcp.Resource) { reg.PutResources(server, put) })
	if tr, ok := reg.(TemplateRegistry); ok {
		send(c, d.delTemplates, func(del []string) { tr.DeleteResourceTemplates(server, del) })
		send(c, d.putTemplates, func(put []*mcp.ResourceTemplate) { tr.PutResourceTemplates(server, put) })
	}
}

// send makes one registry call with xs, counted in c.RegistryOps, when xs
// is not empty.
func send[T any](c *opcount.Counters, xs []T, call func([]T)) {
	if len(xs) > 0 {
		c.RegistryOps.Add(1)
		call(xs)
	}
}

// removed lists the keys present in old and absent from next, in old's
// order, each once.
func removed[T any](old, next []*T, key func(*T) string) []string {
	keep := make(map[string]struct{}, len(next))
	for _, x := range next {
		keep[key(x)] = struct{}{}
	}
	var out []string
	seen := make(map[string]struct{})
	for _, x := range old {
		k := key(x)
		if _, ok := keep[k]; ok {
			continue
		}
		if _, ok := seen[k]; ok {
			continue
		}
		seen[k] = struct{}{}
		out = append(out, k)
	}
	return out
}

// changed lists the items of next that old lacks or holds in a different
// form, in next's order. Items are compared by pointer first (projections
// share unchanged prompts and resources, and memoized projections share
// tools), then deeply: a re-projected tool is a new clone with equal
// content. A false "different" only costs a redundant put.
func changed[T any](old, next []*T, key func(*T) string) []*T {
	have := make(map[string]*T, len(old))
	for _, x := range old {
		have[key(x)] = x
	}
	var out []*T
	for _, x := range next {
		prev, ok := have[key(x)]
		if ok && (prev == x || reflect.DeepEqual(prev, x)) {
			continue
		}
		out = append(out, x)
	}
	return out
}
