package session_test

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/session"
)

// TestCollisionLeftOutComesBack: a tool, prompt or resource left out
// because another server holds its exposed name gets the name once that
// server lets it go; one its own server withdrew meanwhile does not.
func TestCollisionLeftOutComesBack(t *testing.T) {
	e := session.New(session.Options{Name: "s", Upstream: func(string) session.Target { return session.Target{} }})
	obj := map[string]any{"type": "object"}
	e.PutTools("a", []*mcp.Tool{{Name: "b__c", InputSchema: obj}})
	e.PutTools("a__b", []*mcp.Tool{{Name: "c", InputSchema: obj}}) // left out
	e.PutPrompts("a", []*mcp.Prompt{{Name: "b__p"}})
	e.PutPrompts("a__b", []*mcp.Prompt{{Name: "p"}}) // left out
	e.PutResources("x", []*mcp.Resource{{URI: "file:///same", Name: "same"}})
	e.PutResources("y", []*mcp.Resource{{URI: "file:///same", Name: "same"}}) // left out
	e.PutResources("z", []*mcp.Resource{{URI: "file:///same", Name: "same"}}) // left out too
	assert.Equal(t, []string{"a__b__c"}, e.Tools())

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

// TestCollisionPromotionSkipsUnservable: when the first registration
// waiting for a freed name cannot be served (its input schema is not an
// object), the next one waiting gets the name.
func TestCollisionPromotionSkipsUnservable(t *testing.T) {
	e := session.New(session.Options{Name: "s", Upstream: func(string) session.Target { return session.Target{} }})
	obj := map[string]any{"type": "object"}
	e.PutTools("a", []*mcp.Tool{{Name: "b__c__d", InputSchema: obj}})
	e.PutTools("a__b", []*mcp.Tool{{Name: "c__d", InputSchema: map[string]any{"type": "string"}}}) // waits; cannot be served
	e.PutTools("a__b__c", []*mcp.Tool{{Name: "d", InputSchema: obj}})                              // waits
	require.Equal(t, []string{"a__b__c__d"}, e.Tools())

	e.DeleteTools("a", []string{"b__c__d"})
	assert.Equal(t, []string{"a__b__c__d"}, e.Tools(), "a__b__c's tool has the name")
	e.DeleteTools("a__b__c", []string{"d"})
	assert.Empty(t, e.Tools(), "the route was a__b__c's")
}
