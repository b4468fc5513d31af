package session

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/internal/mcpname"
	"github.com/wasmhost/wasmhost/view"
)

// taken reports (and logs) whether another server than server already holds
// exposed among k's routes; if so, put, which registers server's item,
// waits for the name to be let go. e.mu is held.
func (e *Endpoint) taken(k *kind, exposed, server string, put func()) bool {
	old, ok := k.routes[exposed]
	if !ok || old.server == server {
		return false
	}
	if k.waiting[exposed] == nil {
		k.waiting[exposed] = make(map[string]func())
	}
	k.waiting[exposed][server] = put
	e.warnLeftOut("name collision: "+k.name+" left out", "name", exposed, "server", server, "owner", old.server)
	return true
}

// unregister removes the exposed names of k that server holds, from k and
// from the MCP server, and forgets those of server's that wait for their
// name. A name let go goes to the registration waiting for it, if any
// (promote). e.mu is held.
func (e *Endpoint) unregister(k *kind, server string, exposed []string) {
	var gone []string
	for _, x := range exposed {
		if r, ok := k.routes[x]; ok && r.server == server {
			delete(k.routes, x)
			gone = append(gone, x)
		} else if ws := k.waiting[x]; ws != nil {
			delete(ws, server)
			if len(ws) == 0 {
				delete(k.waiting, x)
			}
		}
	}
	if len(gone) > 0 {
		k.remove(gone...)
		e.changes += uint64(len(gone))
	}
	for _, x := range gone {
		k.promote(x)
	}
}

// promote registers the item that waits for exposed, from the first server
// by name, now that nothing holds the name; if that item cannot be
// registered (a put may refuse it), the next waiting one gets the name.
// e.mu is held.
func (k *kind) promote(exposed string) {
	for {
		ws := k.waiting[exposed]
		if len(ws) == 0 {
			return
		}
		if _, held := k.routes[exposed]; held {
			return
		}
		first := slices.Min(slices.Collect(maps.Keys(ws)))
		put := ws[first]
		delete(ws, first)
		if len(ws) == 0 {
			delete(k.waiting, exposed)
		}
		put()
	}
}

// PutTools implements view.Registry: it registers each tool under the name
// the session's naming gives it (see Names in the package documentation),
// replacing an earlier registration.
func (e *Endpoint) PutTools(server string, tools []*mcp.Tool) {
	e.putMu.Lock()
	defer e.putMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	adds := make(map[string]func(string) error, len(tools))
	upstream := make(map[string]string)
	var refused []string
	for _, t := range tools {
		if err := checkToolName(t.Name); err != nil {
			e.warnLeftOut("upstream tool cannot be served, left out", "server", server, "tool", t.Name, "err", err)
			refused = append(refused, t.Name) // an earlier version of it
			continue
		}
		if up, ok := upstreamName(t.Meta); ok {
			upstream[t.Name] = up
		}
		adds[t.Name] = func(exposed string) error {
			c, err := exposedTool(t, exposed)
			if err == nil {
				err = addTool(e.srv, c, e.forwardTool)
			}
			return err
		}
	}
	if len(refused) > 0 {
		e.deleteNamed(&e.tools, server, refused)
	}
	e.putNamed(&e.tools, server, adds, upstream)
}

// putChunk is how many items a Put method registers between two pauses
// (pause). The go-sdk's Add methods take tens of microseconds an item
// (AddTool encodes and decodes the input schema twice), and every call of
// the session waits for e.mu to look its name up: holding it for a whole
// batch of a large server held its calls for as long.
const putChunk = 32

// pause lets go of e.mu for a moment before item i of a batch when i is a
// multiple of putChunk, so that calls waiting to look a name up get it
// (sync.Mutex hands itself to a waiter that has waited a millisecond).
// Each item is registered under e.mu whole; a call made meanwhile sees
// the batch part done, as a call made a moment earlier or later would see
// none or all of it. e.mu is held.
func (e *Endpoint) pause(i int) {
	if i > 0 && i%putChunk == 0 {
		e.mu.Unlock()
		e.mu.Lock()
	}
}

// checkToolName refuses an upstream tool name that breaks the MCP naming
// rule (A-Z, a-z, 0-9, '_', '-' and '.'), or is longer than the rule's 128
// characters. The go-sdk serves such a tool and only logs it, but strict
// clients, and the model APIs behind them, refuse a whole tool list for one
// such name, so one server's odd name would cost the session every other
// server's tools. (The server's own name is the operator's: the config
// loader warns about one outside the rule.)
func checkToolName(name string) error {
	if len(name) > mcpname.MaxLen {
		return fmt.Errorf("the name is %d bytes long, over the %d the MCP naming rule allows", len(name), mcpname.MaxLen)
	}
	if r, bad := mcpname.BadRune(name); bad {
		return fmt.Errorf("the name has %q, outside the MCP naming rule (A-Z, a-z, 0-9, '_', '-', '.')", r)
	}
	return nil
}

// DeleteTools implements view.Registry.
func (e *Endpoint) DeleteTools(server string, names []string) {
	e.putMu.Lock()
	defer e.putMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.deleteNamed(&e.tools, server, names)
}

// PutPrompts implements view.Registry: it registers each prompt under the
// name the session's naming gives it, as PutTools does.
func (e *Endpoint) PutPrompts(server string, prompts []*mcp.Prompt) {
	e.putMu.Lock()
	defer e.putMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	adds := make(map[string]func(string) error, len(prompts))
	upstream := make(map[string]string)
	for _, p := range prompts {
		if up, ok := upstreamName(p.Meta); ok {
			upstream[p.Name] = up
		}
		adds[p.Name] = func(exposed string) error {
			c := *p
			c.Name = exposed
			c.Meta = withoutUpstreamName(p.Meta)
			e.srv.AddPrompt(&c, e.forwardPrompt)
			return nil
		}
	}
	e.putNamed(&e.prompts, server, adds, upstream)
}

// DeletePrompts implements view.Registry.
func (e *Endpoint) DeletePrompts(server string, names []string) {
	e.putMu.Lock()
	defer e.putMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.deleteNamed(&e.prompts, server, names)
}

// PutResources implements view.Registry: resources keep their URIs.
func (e *Endpoint) PutResources(server string, resources []*mcp.Resource) {
	defer e.routesChanged() // after the lock: see syncSubscriptions
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, r := range resources {
		e.pause(i)
		e.putResource(server, r)
	}
}

// putResource registers one resource of server. e.mu is held.
func (e *Endpoint) putResource(server string, r *mcp.Resource) {
	if e.taken(&e.resources, r.URI, server, func() { e.putResource(server, r) }) {
		return
	}
	if err := addResource(e.srv, r, e.forwardResource); err != nil {
		e.warnLeftOut("upstream resource cannot be served, left out", "server", server, "uri", r.URI, "err", err)
		return
	}
	e.resources.routes[r.URI] = route{server, r.URI}
	e.changes++
}

// DeleteResources implements view.Registry.
func (e *Endpoint) DeleteResources(server string, uris []string) {
	defer e.routesChanged() // after the lock: see syncSubscriptions
	e.mu.Lock()
	defer e.mu.Unlock()
	e.unregister(&e.resources, server, uris)
}

// PutResourceTemplates implements view.TemplateRegistry: templates keep
// their URI templates, and a read of a URI that no resource has and a
// template matches goes to the template's server.
func (e *Endpoint) PutResourceTemplates(server string, templates []*mcp.ResourceTemplate) {
	defer e.routesChanged() // after the lock: see syncSubscriptions
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, t := range templates {
		e.pause(i)
		e.putTemplate(server, t)
	}
}

// putTemplate registers one resource template of server. e.mu is held.
func (e *Endpoint) putTemplate(server string, t *mcp.ResourceTemplate) {
	key := t.URITemplate
	if e.taken(&e.templates, key, server, func() { e.putTemplate(server, t) }) {
		return
	}
	read := func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return e.read(ctx, req, &e.templates, key)
	}
	if err := addTemplate(e.srv, t, read); err != nil {
		e.warnLeftOut("upstream resource template cannot be served, left out", "server", server, "uriTemplate", key, "err", err)
		return
	}
	e.templates.routes[key] = route{server, key}
	e.changes++
}

// DeleteResourceTemplates implements view.TemplateRegistry.
func (e *Endpoint) DeleteResourceTemplates(server string, uriTemplates []string) {
	defer e.routesChanged() // after the lock: see syncSubscriptions
	e.mu.Lock()
	defer e.mu.Unlock()
	e.unregister(&e.templates, server, uriTemplates)
}

// exposedTool returns a copy of t named exposed, with an input schema the
// go-sdk server accepts: a missing schema or one without "type" becomes an
// object schema. The projection's tool is never modified.
func exposedTool(t *mcp.Tool, exposed string) (*mcp.Tool, error) {
	c := *t
	c.Name = exposed
	c.Meta = withoutUpstreamName(t.Meta)
	switch s := t.InputSchema.(type) {
	case nil:
		c.InputSchema = map[string]any{"type": "object"}
	case map[string]any:
		if _, ok := s["type"]; !ok {
			m := maps.Clone(s)
			m["type"] = "object"
			c.InputSchema = m
		} else if s["type"] != "object" {
			return nil, fmt.Errorf("input schema type is %v, not \"object\"", s["type"])
		}
	}
	return &c, nil
}

// upstreamName returns the upstream's own name of an item the policy
// renamed (view.MetaUpstreamName in its Meta), and whether there is one.
func upstreamName(m mcp.Meta) (string, bool) {
	up, ok := m[view.MetaUpstreamName].(string)
	return up, ok && up != ""
}

// withoutUpstreamName returns m without view.MetaUpstreamName, copying it
// only when it has that key (and nil when nothing else is left): the
// upstream's name of a renamed item is the session's to route by, not its
// clients' to see.
func withoutUpstreamName(m mcp.Meta) mcp.Meta {
	if _, ok := m[view.MetaUpstreamName]; !ok {
		return m
	}
	c := maps.Clone(m)
	delete(c, view.MetaUpstreamName)
	if len(c) == 0 {
		return nil
	}
	return c
}

// addTool calls srv.AddTool, turning its panics (an input schema it
// refuses) into errors.
func addTool(srv *mcp.Server, t *mcp.Tool, h mcp.ToolHandler) error {
	return unpanic(func() { srv.AddTool(t, h) })
}

// addResource calls srv.AddResource, turning its panic (an unparsable URI)
// into an error.
func addResource(srv *mcp.Server, r *mcp.Resource, h mcp.ResourceHandler) error {
	return unpanic(func() { srv.AddResource(r, h) })
}

// addTemplate calls srv.AddResourceTemplate, turning its panic (an invalid
// URI template) into an error.
func addTemplate(srv *mcp.Server, t *mcp.ResourceTemplate, h mcp.ResourceHandler) error {
	return unpanic(func() { srv.AddResourceTemplate(t, h) })
}

// unpanic runs add, one of the go-sdk's Add methods, and returns the panic
// it raises for input it refuses as an error.
func unpanic(add func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	add()
	return nil
}
