package view

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/pool"
)

// Keys under which a projected tool's Meta carries the two session flags.
// Their values are Go bools (JSON true/false on the wire).
const (
	MetaTrust      = "wasmhost/trust"
	MetaAlwaysLoad = "wasmhost/alwaysLoad"
	// MetaUpstreamName is set, on a tool or prompt the policy renamed
	// (abi/SPEC.md section 5.3), to the upstream's own name for it, a
	// string: the item's Name is then the policy's exposed name, and a
	// session calls the upstream by this one. A session takes it out of
	// what its clients see.
	MetaUpstreamName = "wasmhost/upstreamName"
)

// A Projection is what one session sees of one server's snapshot. Tools are
// shallow clones of the snapshot's tools whose Meta map is a private copy
// carrying MetaTrust and MetaAlwaysLoad (and, for a tool the policy
// renamed, MetaUpstreamName, with the policy's Name and Description);
// every other field (schemas, annotations, icons) is shared with the
// snapshot and must not be modified. Resources, and prompts the policy
// neither renamed nor redescribed, are the snapshot's own pointers; the
// others are shallow clones like the tools. A Projection is
// immutable once returned and may be shared between views whose metadata
// keys are equal.
type Projection struct {
	Tools             []*mcp.Tool
	Prompts           []*mcp.Prompt
	Resources         []*mcp.Resource
	ResourceTemplates []*mcp.ResourceTemplate // the snapshot's, shared
}

// Project asks p which of snap's items one session with the given raw
// settings sees, and with which flags, then builds the projection by
// cloning. Only names cross into the policy (plus each tool's annotations
// when the policy's handshake lists abi.WantToolAnnotations). The response
// is validated against the request even though policies are required to
// validate it themselves, so a faulty policy fails closed rather than
// indexing out of range. snap is never modified. A nil snap projects to an
// empty projection without calling the policy.
func Project(ctx context.Context, p abi.Policy, settings json.RawMessage, snap *pool.Snapshot) (*Projection, error) {
	if snap == nil {
		return &Projection{}, nil
	}
	names, err := snapshotNames(p, snap)
	if err != nil {
		return nil, err
	}
	req := &abi.ProjectRequest{
		Settings:        settings,
		Tools:           names.Tools,
		ToolAnnotations: names.ToolAnnotations,
		Prompts:         names.Prompts,
		Resources:       names.Resources,
	}
	resp, err := p.Project(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp == nil {
		return nil, fmt.Errorf("project: policy returned no response")
	}
	if err := abi.ValidateProjectWith(req, resp, p.Handshake().Renames); err != nil {
		return nil, err
	}
	return projection(snap, resp), nil
}

// snapshotNames lists what of snap crosses into the policy p.
func snapshotNames(p abi.Policy, snap *pool.Snapshot) (abi.BatchSnapshot, error) {
	return SnapshotNames(snap, slices.Contains(p.Handshake().Wants, abi.WantToolAnnotations))
}

// SnapshotNames returns what of snap crosses into a policy: the names of its
// tools and prompts, the URIs of its resources, and, with annotations (the
// policy's handshake wants [abi.WantToolAnnotations]), each tool's
// annotations as JSON. Schemas and descriptions never cross.
func SnapshotNames(snap *pool.Snapshot, annotations bool) (abi.BatchSnapshot, error) {
	names := abi.BatchSnapshot{
		Tools:     make([]string, len(snap.Tools)),
		Prompts:   make([]string, len(snap.Prompts)),
		Resources: make([]string, len(snap.Resources)),
	}
	for i, t := range snap.Tools {
		names.Tools[i] = t.Name
	}
	for i, pr := range snap.Prompts {
		names.Prompts[i] = pr.Name
	}
	for i, r := range snap.Resources {
		names.Resources[i] = r.URI
	}
	if annotations {
		names.ToolAnnotations = make([]json.RawMessage, len(snap.Tools))
		for i, t := range snap.Tools {
			b, err := json.Marshal(t.Annotations)
			if err != nil {
				return names, fmt.Errorf("project: tools[%d] %q: marshal annotations: %w", i, t.Name, err)
			}
			names.ToolAnnotations[i] = b
		}
	}
	return names, nil
}

// projection applies a validated response to snap: the visible tools are
// cloned with their session flags, prompts, resources and resource
// templates are shared, except the templates that match the URI of a
// resource the policy hides (see visibleTemplates).
func projection(snap *pool.Snapshot, resp *abi.ProjectResponse) *Projection {
	out := &Projection{
		Tools:             make([]*mcp.Tool, len(resp.Tools)),
		Prompts:           make([]*mcp.Prompt, len(resp.Prompts)),
		Resources:         make([]*mcp.Resource, len(resp.Resources)),
		ResourceTemplates: visibleTemplates(snap, resp.Resources),
	}
	for j, d := range resp.Tools {
		out.Tools[j] = cloneTool(snap.Tools[d.Index], d.Trust, d.AlwaysLoad, d.Rename())
	}
	for j, i := range resp.Prompts {
		out.Prompts[j] = renamedPrompt(snap.Prompts[i], resp.PromptRename(j))
	}
	for j, i := range resp.Resources {
		out.Resources[j] = snap.Resources[i]
	}
	return out
}

// visibleTemplates returns snap's resource templates without those that
// match the URI of one of its resources the projection leaves out (shown
// holds the indexes of those it keeps, strictly increasing): a session
// reads (and subscribes to, and completes) a URI no resource of it has
// through a template that matches it, so such a template would serve a
// resource the policy hid. The policy has no say over templates
// otherwise (ABI v1 shows it none), so with every resource shown, as the
// default policy shows them, every template is.
func visibleTemplates(snap *pool.Snapshot, shown []int) []*mcp.ResourceTemplate {
	if len(shown) == len(snap.Resources) || len(snap.ResourceTemplates) == 0 {
		return snap.ResourceTemplates
	}
	var hidden []string
	for i, r := range snap.Resources {
		if len(shown) > 0 && shown[0] == i {
			shown = shown[1:]
			continue
		}
		hidden = append(hidden, r.URI)
	}
	out := make([]*mcp.ResourceTemplate, 0, len(snap.ResourceTemplates))
	for _, t := range snap.ResourceTemplates {
		// A template that does not parse is kept: the session's server
		// refuses it anyway.
		if matches, ok := TemplateMatcher(t.URITemplate); !ok || !slices.ContainsFunc(hidden, matches) {
			out = append(out, t)
		}
	}
	return out
}

// TemplateMatcher returns whether a URI matches the resource template
// tmpl (RFC 6570, as the go-sdk's server matches a read against it), and
// false when tmpl does not parse.
func TemplateMatcher(tmpl string) (matches func(uri string) bool, ok bool) {
	t, err := uritemplate.New(tmpl)
	if err != nil {
		return nil, false
	}
	return t.Regexp().MatchString, true
}

// cloneTool copies t and its Meta map and sets the two session flags on the
// copy, and the policy's rename: a new name (with MetaUpstreamName set to
// the upstream's) and a new description. The rest is shared: the
// snapshot's tool is left untouched.
func cloneTool(t *mcp.Tool, trust, alwaysLoad bool, r abi.Rename) *mcp.Tool {
	c := *t
	c.Meta = make(mcp.Meta, len(t.Meta)+3)
	copyUpstreamMeta(c.Meta, t.Meta)
	c.Meta[MetaTrust] = trust
	c.Meta[MetaAlwaysLoad] = alwaysLoad
	if r.Name != "" && r.Name != t.Name {
		c.Meta[MetaUpstreamName] = t.Name
		c.Name = r.Name
	}
	if r.Description != "" {
		c.Description = r.Description
	}
	return &c
}

// metaPrefix starts every _meta key wasmhost sets on a projected item.
// The namespace is wasmhost's: an upstream's own keys in it are dropped,
// since a session reads them (MetaUpstreamName routes its calls) and an
// upstream must not steer that.
const metaPrefix = "wasmhost/"

// hasOwnKeys reports whether an upstream's meta holds a key of wasmhost's
// namespace.
func hasOwnKeys(meta mcp.Meta) bool {
	for k := range meta {
		if strings.HasPrefix(k, metaPrefix) {
			return true
		}
	}
	return false
}

// copyUpstreamMeta copies an upstream item's meta into dst, leaving out
// the keys of wasmhost's namespace.
func copyUpstreamMeta(dst, src mcp.Meta) {
	for k, v := range src {
		if !strings.HasPrefix(k, metaPrefix) {
			dst[k] = v
		}
	}
}

// renamedPrompt returns p itself when r changes nothing and p carries no
// key of wasmhost's namespace, and otherwise a
// copy of p (and of its Meta map) renamed and redescribed as cloneTool
// does a tool.
func renamedPrompt(p *mcp.Prompt, r abi.Rename) *mcp.Prompt {
	owned := hasOwnKeys(p.Meta)
	if !owned && (r.IsZero() || (r.Name == p.Name && r.Description == "")) {
		return p
	}
	c := *p
	if owned || (r.Name != "" && r.Name != p.Name) {
		c.Meta = make(mcp.Meta, len(p.Meta)+1)
		copyUpstreamMeta(c.Meta, p.Meta)
	}
	if r.Name != "" && r.Name != p.Name {
		c.Meta[MetaUpstreamName] = p.Name
		c.Name = r.Name
	}
	if r.Description != "" {
		c.Description = r.Description
	}
	return &c
}
