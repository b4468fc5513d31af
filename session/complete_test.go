package session_test

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/session"
)

func complete(t *testing.T, cs *mcp.ClientSession, ref *mcp.CompleteReference, value string) (*mcp.CompleteResult, error) {
	t.Helper()
	return cs.Complete(t.Context(), &mcp.CompleteParams{Ref: ref, Argument: mcp.CompleteParamsArgument{Name: "name", Value: value}})
}

func TestCompletionForwarded(t *testing.T) {
	t.Parallel()
	for name, newF := range transportFixtures {
		t.Run(name, func(t *testing.T) {
			f := newF(t)
			c := f.connect("alice", `{}`)
			require.NotNil(t, c.cs.InitializeResult().Capabilities.Completions, "completions announced")
			_, err := c.call(t, "demo__write_note", map[string]any{"name": "weather", "text": "rain"})
			require.NoError(t, err)

			// The prompt is named as the session exposes it and reaches the
			// upstream under its own name.
			res, err := complete(t, c.cs, &mcp.CompleteReference{Type: "ref/prompt", Name: "demo__summarize"}, "we")
			require.NoError(t, err)
			assert.Equal(t, []string{"weather", "welcome"}, res.Completion.Values)
			assert.Equal(t, 2, res.Completion.Total)

			// A resource template keeps its URI template.
			res, err = complete(t, c.cs, &mcp.CompleteReference{Type: "ref/resource", URI: "demo://notes/{name}"}, "wel")
			require.NoError(t, err)
			assert.Equal(t, []string{"welcome"}, res.Completion.Values)

			// A resource's own URI is a reference too; the demo has nothing
			// to suggest for it.
			res, err = complete(t, c.cs, &mcp.CompleteReference{Type: "ref/resource", URI: "demo://about"}, "")
			require.NoError(t, err)
			assert.Empty(t, res.Completion.Values)
		})
	}
}

func TestCompletionOfUnknownReferencesIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.connect("alice", `{}`)
	for _, tc := range []struct {
		ref  *mcp.CompleteReference
		want string
	}{
		// The upstream's own name is not the session's name for it.
		{&mcp.CompleteReference{Type: "ref/prompt", Name: "summarize"}, `unknown prompt "summarize"`},
		{&mcp.CompleteReference{Type: "ref/prompt", Name: "demo__nope"}, `unknown prompt "demo__nope"`},
		{&mcp.CompleteReference{Type: "ref/resource", URI: "demo://secret/{x}"}, `unknown resource "demo://secret/{x}"`},
	} {
		_, err := complete(t, c.cs, tc.ref, "")
		require.Error(t, err, tc.ref)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// TestCompletionOfServerWithoutIt checks that a server announcing no
// completions gets no request and the client an empty answer, and that an
// unreachable server is named.
func TestCompletionOfServerWithoutIt(t *testing.T) {
	t.Parallel()
	up := mcp.NewServer(&mcp.Implementation{Name: "plain", Version: "1"}, nil)
	up.AddPrompt(&mcp.Prompt{Name: "p", Arguments: []*mcp.PromptArgument{{Name: "name"}}}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{}, nil
	})
	upCS := connectServer(t, up)
	require.Nil(t, upCS.InitializeResult().Capabilities.Completions)

	ready := true
	ep := session.New(session.Options{Name: "s", Logger: quiet, Upstream: func(string) session.Target {
		if !ready {
			return session.Target{}
		}
		return session.Target{Conn: upCS}
	}})
	ep.PutPrompts("up", []*mcp.Prompt{{Name: "p"}})
	cs := connectClient(t, ep)
	res, err := complete(t, cs, &mcp.CompleteReference{Type: "ref/prompt", Name: "up__p"}, "x")
	require.NoError(t, err)
	assert.Empty(t, res.Completion.Values)

	ready = false
	_, err = complete(t, cs, &mcp.CompleteReference{Type: "ref/prompt", Name: "up__p"}, "x")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `session "s", server "up": upstream unavailable`)
}

// TestCompletionErrorRelayed checks that the upstream's own JSON-RPC error
// reaches the client unchanged.
func TestCompletionErrorRelayed(t *testing.T) {
	t.Parallel()
	up := mcp.NewServer(&mcp.Implementation{Name: "picky", Version: "1"}, &mcp.ServerOptions{
		CompletionHandler: func(context.Context, *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "no such argument here"}
		},
	})
	upCS := connectServer(t, up)
	ep := session.New(session.Options{Name: "s", Logger: quiet, Upstream: func(string) session.Target { return session.Target{Conn: upCS} }})
	ep.PutResourceTemplates("up", []*mcp.ResourceTemplate{{URITemplate: "x://{id}", Name: "x"}})
	_, err := complete(t, connectClient(t, ep), &mcp.CompleteReference{Type: "ref/resource", URI: "x://{id}"}, "")
	var werr *jsonrpc.Error
	require.ErrorAs(t, err, &werr)
	assert.Equal(t, jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "no such argument here"}, *werr)
}
