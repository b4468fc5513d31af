package reconcile

import (
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/wasmhost/wasmhost/view"
)

// A trackedRegistry counts the operations one session's registry receives,
// so a reconciling call can tell which sessions saw a change.
type trackedRegistry struct {
	inner view.Registry
	ops   atomic.Int64
}

var _ view.Registry = (*trackedRegistry)(nil)

func (r *trackedRegistry) PutTools(server string, tools []*mcp.Tool) {
	r.ops.Add(1)
	r.inner.PutTools(server, tools)
}

func (r *trackedRegistry) DeleteTools(server string, names []string) {
	r.ops.Add(1)
	r.inner.DeleteTools(server, names)
}

func (r *trackedRegistry) PutPrompts(server string, prompts []*mcp.Prompt) {
	r.ops.Add(1)
	r.inner.PutPrompts(server, prompts)
}

func (r *trackedRegistry) DeletePrompts(server string, names []string) {
	r.ops.Add(1)
	r.inner.DeletePrompts(server, names)
}

func (r *trackedRegistry) PutResources(server string, resources []*mcp.Resource) {
	r.ops.Add(1)
	r.inner.PutResources(server, resources)
}

func (r *trackedRegistry) DeleteResources(server string, uris []string) {
	r.ops.Add(1)
	r.inner.DeleteResources(server, uris)
}

var _ view.TemplateRegistry = (*trackedRegistry)(nil)

// PutResourceTemplates passes templates on when the wrapped registry serves
// them (view.TemplateRegistry), and counts the operation only then.
func (r *trackedRegistry) PutResourceTemplates(server string, templates []*mcp.ResourceTemplate) {
	if tr, ok := r.inner.(view.TemplateRegistry); ok {
		r.ops.Add(1)
		tr.PutResourceTemplates(server, templates)
	}
}

// DeleteResourceTemplates is PutResourceTemplates' counterpart.
func (r *trackedRegistry) DeleteResourceTemplates(server string, uriTemplates []string) {
	if tr, ok := r.inner.(view.TemplateRegistry); ok {
		r.ops.Add(1)
		tr.DeleteResourceTemplates(server, uriTemplates)
	}
}
