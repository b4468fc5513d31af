package session_test

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestResourceTemplatesForwarded: the upstream's resource templates reach
// the session as they are, and a URI that no resource has but a template
// matches is read from the template's server, as a direct client would
// read it. Nothing in the session's settings hides templates.
func TestResourceTemplatesForwarded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.connect("alice", `{"excludeTools":["add_tool"]}`)
	assert.Equal(t, []string{"demo://notes/{name}"}, c.ep.ResourceTemplates())

	res, err := c.cs.ListResourceTemplates(t.Context(), nil)
	require.NoError(t, err)
	require.Len(t, res.ResourceTemplates, 1)
	assert.Equal(t, "demo://notes/{name}", res.ResourceTemplates[0].URITemplate)
	assert.Equal(t, "note", res.ResourceTemplates[0].Name)
	assert.Equal(t, "text/plain", res.ResourceTemplates[0].MIMEType)

	_, err = c.call(t, "demo__write_note", map[string]any{"name": "todo", "text": "buy milk"})
	require.NoError(t, err)
	rr, err := c.cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "demo://notes/todo"})
	require.NoError(t, err, "a templated URI is read through the template's server")
	require.Len(t, rr.Contents, 1)
	assert.Equal(t, "buy milk", rr.Contents[0].Text)

	_, err = c.cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "other://x"})
	require.Error(t, err, "a URI neither a resource nor a template matches")

	// The template goes when the view lets everything go.
	require.NoError(t, c.handle.Release(t.Context()))
	assert.Empty(t, c.ep.ResourceTemplates())
}
