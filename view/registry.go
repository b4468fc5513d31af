package view

import (
	"reflect"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/wasmhost/wasmhost/internal/churn"
)

// A Registry is one session's set of registrations, the thing a session's
// MCP endpoint serves (the daemon implements it with its mcp.Server). Items
// are keyed by (server, name) for tools and prompts and by (server, URI) for
// resources; a put replaces an item with the same key. Each method call is
// one registry operation in the churn counters, so views batch: a replay
// makes at most one call per method.
//
// Methods are called with a view's lock held and may be called concurrently
// by the views of different servers in one session, so implementations must
// be safe for concurrent use and must not call back into the view. They
// cannot fail: a registry is in-process state, and a view assumes each call
// took effect entirely.
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
func applyDiff(reg Registry, c *churn.Counters, server string, old, next *Projection) {
	if old == next {
		return
	}
	if old == nil {
		old = &Projection{}
	}
	if next == nil {
		next = &Projection{}
	}
	diff(c, old.Tools, next.Tools, func(t *mcp.Tool) string { return t.Name },
		func(del []string) { reg.DeleteTools(server, del) }, func(put []*mcp.Tool) { reg.PutTools(server, put) })
	diff(c, old.Prompts, next.Prompts, func(p *mcp.Prompt) string { return p.Name },
		func(del []string) { reg.DeletePrompts(server, del) }, func(put []*mcp.Prompt) { reg.PutPrompts(server, put) })
	diff(c, old.Resources, next.Resources, func(r *mcp.Resource) string { return r.URI },
		func(del []string) { reg.DeleteResources(server, del) }, func(put []*mcp.Resource) { reg.PutResources(server, put) })
	if tr, ok := reg.(TemplateRegistry); ok {
		diff(c, old.ResourceTemplates, next.ResourceTemplates, func(t *mcp.ResourceTemplate) string { return t.URITemplate },
			func(del []string) { tr.DeleteResourceTemplates(server, del) }, func(put []*mcp.ResourceTemplate) { tr.PutResourceTemplates(server, put) })
	}
}

// diff brings one kind of item from old to next: it deletes the keys next
// lacks, then puts what is new or different, each in one call (counted in
// c.RegistryOps) and only when there is something to send.
func diff[T any](c *churn.Counters, old, next []*T, key func(*T) string, del func([]string), put func([]*T)) {
	if keys := removed(old, next, key); len(keys) > 0 {
		c.RegistryOps.Add(1)
		del(keys)
	}
	if items := changed(old, next, key); len(items) > 0 {
		c.RegistryOps.Add(1)
		put(items)
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
