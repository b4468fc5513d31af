package session_test

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/session"
)

// TestCollisionLeftOutComesBack: tools and prompts whose exposed names are
// ambiguous are all left out until one goes; a resource left out because
// another server holds its URI gets the URI once that server lets it go;
// one its own server withdrew meanwhile does not.
func TestCollisionLeftOutComesBack(t *testing.T) {
	t.Parallel()
	e := session.New(session.Options{Name: "s", Upstream: func(string) session.Target { return session.Target{} }})
	obj := map[string]any{"type": "object"}
	e.PutTools("a", []*mcp.Tool{{Name: "b__c", InputSchema: obj}})
	e.PutTools("a__b", []*mcp.Tool{{Name: "c", InputSchema: obj}})
	e.PutPrompts("a", []*mcp.Prompt{{Name: "b__p"}})
	e.PutPrompts("a__b", []*mcp.Prompt{{Name: "p"}})
	e.PutResources("x", []*mcp.Resource{{URI: "file:///same", Name: "same"}})
	e.PutResources("y", []*mcp.Resource{{URI: "file:///same", Name: "same"}}) // left out
	e.PutResources("z", []*mcp.Resource{{URI: "file:///same", Name: "same"}}) // left out too
	assert.Empty(t, e.Tools(), "neither shadows the other")
	assert.Empty(t, e.Prompts())

	before := e.Changes()
	e.DeleteTools("a", []string{"b__c"})
	e.DeletePrompts("a", []string{"b__p"})
	e.DeleteResources("y", []string{"file:///same"}) // y withdraws its own, still waiting
	e.DeleteResources("x", []string{"file:///same"})
	assert.Equal(t, []string{"a__b__c"}, e.Tools(), "a__b's tool now has the name")
	assert.Equal(t, []string{"a__b__p"}, e.Prompts())
	assert.Equal(t, []string{"file:///same"}, e.Resources(), "z's resource, not y's withdrawn one")
	assert.Greater(t, e.Changes(), before, "clients are told")

	// The route is the new holder's: deleting it as x changes nothing,
	// deleting it as z frees it.
	e.DeleteResources("x", []string{"file:///same"})
	assert.Equal(t, []string{"file:///same"}, e.Resources())
	e.DeleteResources("z", []string{"file:///same"})
	assert.Empty(t, e.Resources())
	e.DeleteTools("a__b", []string{"c"})
	assert.Empty(t, e.Tools())
}

// TestCollisionUnservableStillCounts: a tool that cannot be served (its
// input schema is not an object) still holds its candidate names, so the
// names do not move when it is fixed; the others of the clash stay out.
func TestCollisionUnservableStillCounts(t *testing.T) {
	t.Parallel()
	e := session.New(session.Options{Name: "s", Upstream: func(string) session.Target { return session.Target{} }})
	obj := map[string]any{"type": "object"}
	e.PutTools("a__b", []*mcp.Tool{{Name: "c__d", InputSchema: map[string]any{"type": "string"}}}) // cannot be served
	e.PutTools("a__b__c", []*mcp.Tool{{Name: "d", InputSchema: obj}})
	require.Empty(t, e.Tools())
	e.PutTools("a__b", []*mcp.Tool{{Name: "other", InputSchema: obj}})
	e.DeleteTools("a__b", []string{"c__d"})
	assert.Equal(t, []string{"a__b__c__d", "a__b__other"}, e.Tools(), "a__b__c's tool has the name")
	e.DeleteTools("a__b__c", []string{"d"})
	assert.Equal(t, []string{"a__b__other"}, e.Tools(), "the route was a__b__c's")
}
