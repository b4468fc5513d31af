package pool

import "github.com/modelcontextprotocol/go-sdk/mcp"

// A Snapshot is one upstream server's discovered tools, prompts and
// resources, in the order the server listed them. A Snapshot is immutable
// once published: neither it, its slices, nor the items they point to may be
// modified, so one snapshot can be shared by every view of every session on
// a transport. Version grows each time the owner publishes a new snapshot;
// a view never applies a snapshot older than the one it already holds.
type Snapshot struct {
	Version   uint64
	Tools     []*mcp.Tool
	Prompts   []*mcp.Prompt
	Resources []*mcp.Resource
	// ResourceTemplates are the server's resource templates. ABI v1 gives
	// the policy no say over them (it sees resources by URI, and a
	// template is no URI): every projection shares them, as the default
	// policy shares every resource, except those that match the URI of a
	// resource the projection hides (a read of that URI would go through
	// the template).
	ResourceTemplates []*mcp.ResourceTemplate
}
