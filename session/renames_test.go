package session_test

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/session"
	"github.com/wasmhost/wasmhost/view"
)

// renamed returns a tool the policy renamed from upstream to name, as a
// view's projection carries it.
func renamed(upstream, name string) *mcp.Tool {
	return &mcp.Tool{Name: name, Description: "new", InputSchema: map[string]any{"type": "object"},
		Meta: mcp.Meta{view.MetaUpstreamName: upstream, view.MetaTrust: true}}
}

// TestNamesRenamed: the session's naming applies on top of the policy's
// name (a prefix, or auto's clash rule, on the exposed name); a call of
// it, a prompts/get and a completion reach the upstream under the
// upstream's own name; the client never sees that name in _meta.
func TestNamesRenamed(t *testing.T) {
	t.Parallel()
	ups := map[string]*mcp.ClientSession{"a": namedUpstream(t, "a", "search_files"), "b": namedUpstream(t, "b", "find")}
	for _, tc := range []struct {
		naming session.Naming
		find   string // what a's renamed tool is exposed as
		greet  string
	}{
		{session.Naming{Mode: session.NamesPrefixed}, "a__find", "a__hi"},
		// b's own "find" clashes with a's renamed one: both prefixed.
		{session.Naming{Mode: session.NamesAuto}, "a__find", "hi"},
		{session.Naming{Mode: session.NamesAuto, Prefix: map[string]string{"a": "alpha_"}}, "alpha_find", "alpha_hi"},
	} {
		ep := namedEndpoint(ups, tc.naming)
		ep.PutTools("a", []*mcp.Tool{renamed("search_files", "find")})
		ep.PutTools("b", tools("find"))
		ep.PutPrompts("a", []*mcp.Prompt{{Name: "hi", Meta: mcp.Meta{view.MetaUpstreamName: "greet"}}})
		assert.Contains(t, ep.Tools(), tc.find, "%+v", tc.naming)
		assert.NotContains(t, ep.Tools(), "search_files")
		assert.Equal(t, []string{tc.greet}, ep.Prompts())

		cs := connectClient(t, ep)
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tc.find})
		require.NoError(t, err)
		assert.Equal(t, "a:search_files", mcptest.Text(res), "the upstream got its own name")
		list, err := cs.ListTools(t.Context(), nil)
		require.NoError(t, err)
		for _, tool := range list.Tools {
			assert.NotContains(t, tool.Meta, view.MetaUpstreamName, tool.Name)
			if tool.Name == tc.find {
				assert.Equal(t, "new", tool.Description)
				assert.Equal(t, true, tool.Meta[view.MetaTrust], "the session flags stay")
			}
		}
		got, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: tc.greet})
		require.NoError(t, err, "prompts/get reaches the upstream's greet")
		assert.Equal(t, "a", got.Description)
		prompts, err := cs.ListPrompts(t.Context(), nil)
		require.NoError(t, err)
		require.Len(t, prompts.Prompts, 1)
		assert.Nil(t, prompts.Prompts[0].Meta)
		comp, err := cs.Complete(t.Context(), &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: tc.greet}, Argument: mcp.CompleteParamsArgument{Name: "who"}})
		require.NoError(t, err)
		assert.Equal(t, []string{"a"}, comp.Completion.Values)
	}
}
