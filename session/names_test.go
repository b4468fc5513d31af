package session_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/session"
)

// namedUpstream is an upstream server called name whose tools, prompts and
// completions all answer with its name, so a test sees where a call went.
func namedUpstream(t *testing.T, name string, tools ...string) *mcp.ClientSession {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ServerOptions{
		Logger:       quiet,
		Instructions: "Use " + name + " well.",
		CompletionHandler: func(context.Context, *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{name}}}, nil
		},
	})
	for _, tool := range tools {
		srv.AddTool(&mcp.Tool{Name: tool, InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + ":" + tool}}}, nil
		})
	}
	srv.AddPrompt(&mcp.Prompt{Name: "greet", Arguments: []*mcp.PromptArgument{{Name: "who"}}}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Description: name, Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: name}}}}, nil
	})
	return connectServer(t, srv)
}

// namedEndpoint returns an endpoint whose servers are the namedUpstreams
// ups, by name.
func namedEndpoint(ups map[string]*mcp.ClientSession, n session.Naming) *session.Endpoint {
	return session.New(session.Options{Name: "s", Logger: quiet, Naming: n, Upstream: func(s string) session.Target {
		return session.Target{Conn: ups[s]}
	}})
}

func tools(names ...string) []*mcp.Tool {
	out := make([]*mcp.Tool, len(names))
	for i, n := range names {
		out[i] = &mcp.Tool{Name: n, InputSchema: map[string]any{"type": "object"}}
	}
	return out
}

// TestNamesModes: two servers of one session both offer "search" (and the
// prompt "greet"); each naming gives the names its documentation says,
// whatever order the servers come in, and never one name to two tools.
func TestNamesModes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		naming            session.Naming
		tools             map[string]string // exposed name -> where it goes
		prompts           []string
		unknown, unknown2 string
	}{
		{"auto", session.Naming{Mode: session.NamesAuto},
			map[string]string{"a__search": "a:search", "b__search": "b:search", "x": "a:x", "y": "b:y"}, []string{"a__greet", "b__greet"}, "search", "greet"},
		{"prefixed", session.Naming{Mode: session.NamesPrefixed},
			map[string]string{"a__search": "a:search", "a__x": "a:x", "b__search": "b:search", "b__y": "b:y"}, []string{"a__greet", "b__greet"}, "search", "greet"},
		{"zero value is prefixed", session.Naming{},
			map[string]string{"a__search": "a:search", "a__x": "a:x", "b__search": "b:search", "b__y": "b:y"}, []string{"a__greet", "b__greet"}, "search", "greet"},
		// Bare names that clash are left out, both: neither shadows the other.
		{"bare", session.Naming{Mode: session.NamesBare},
			map[string]string{"x": "a:x", "y": "b:y"}, nil, "search", "greet"},
		// A custom prefix is always applied; the other server then has
		// "search" to itself.
		{"auto with a custom prefix", session.Naming{Mode: session.NamesAuto, Prefix: map[string]string{"a": "alpha_"}},
			map[string]string{"alpha_search": "a:search", "alpha_x": "a:x", "search": "b:search", "y": "b:y"}, []string{"alpha_greet", "greet"}, "a__search", "a__greet"},
		// An empty prefix is the upstream's own names for that server only.
		{"prefixed with a bare server", session.Naming{Mode: session.NamesPrefixed, Prefix: map[string]string{"a": ""}},
			map[string]string{"b__search": "b:search", "b__y": "b:y", "search": "a:search", "x": "a:x"}, []string{"b__greet", "greet"}, "a__search", "a__greet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			own := map[string]string{"a": "x", "b": "y"}
			ups := map[string]*mcp.ClientSession{"a": namedUpstream(t, "a", "search", "x"), "b": namedUpstream(t, "b", "search", "y")}
			for _, order := range [][]string{{"a", "b"}, {"b", "a"}} {
				ep := namedEndpoint(ups, tc.naming)
				for _, s := range order {
					ep.PutTools(s, tools("search", own[s]))
					ep.PutPrompts(s, []*mcp.Prompt{{Name: "greet"}})
				}
				assert.Equal(t, slices.Sorted(maps.Keys(tc.tools)), ep.Tools(), "order %v", order)
				if tc.prompts == nil {
					assert.Empty(t, ep.Prompts(), "order %v", order)
				} else {
					assert.Equal(t, tc.prompts, ep.Prompts(), "order %v", order)
				}

				cs := connectClient(t, ep)
				for name, want := range tc.tools {
					res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name})
					require.NoError(t, err, name)
					assert.Equal(t, want, mcptest.Text(res), name)
				}
				_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tc.unknown})
				require.ErrorContains(t, err, "unknown tool")
				_, err = cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: tc.unknown2})
				require.ErrorContains(t, err, "unknown prompt")
			}
		})
	}
}

// TestNamesReloadAddingClashingServer: a client uses "search" of server a
// under its own name; a reload adds server b with a "search" too. The
// client is told its list changed, "search" becomes unknown (it never
// reaches b), and each server's tool is there under its prefixed name.
// Once b leaves, a's tool has its own name back.
func TestNamesReloadAddingClashingServer(t *testing.T) {
	t.Parallel()
	for _, mode := range []session.NameMode{session.NamesAuto, session.NamesBare} {
		t.Run(string(mode), func(t *testing.T) {
			ups := map[string]*mcp.ClientSession{"a": namedUpstream(t, "a", "search"), "b": namedUpstream(t, "b", "search")}
			ep := namedEndpoint(ups, session.Naming{Mode: mode})
			ep.PutTools("a", tools("search"))
			changed := make(chan struct{}, 16)
			cs := connectServerWith(t, ep.Server(), &mcp.ClientOptions{Logger: quiet, ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
				changed <- struct{}{}
			}}, nil)
			call := func(name string) (string, error) {
				res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name})
				if err != nil {
					return "", err
				}
				return mcptest.Text(res), nil
			}
			got, err := call("search")
			require.NoError(t, err)
			require.Equal(t, "a:search", got)

			ep.PutTools("b", tools("search"))
			select {
			case <-changed:
			case <-time.After(60 * time.Second):
				t.Fatal("no tools/list_changed after a clashing server was added")
			}
			_, err = call("search")
			require.ErrorContains(t, err, `unknown tool "search"`, "the old name must not route to b")
			if mode == session.NamesAuto {
				assert.Equal(t, []string{"a__search", "b__search"}, ep.Tools())
				got, err = call("a__search")
				require.NoError(t, err)
				assert.Equal(t, "a:search", got)
				got, err = call("b__search")
				require.NoError(t, err)
				assert.Equal(t, "b:search", got)
			} else {
				assert.Empty(t, ep.Tools())
			}

			ep.DeleteTools("b", []string{"search"})
			assert.Equal(t, []string{"search"}, ep.Tools())
			got, err = call("search")
			require.NoError(t, err)
			assert.Equal(t, "a:search", got)
		})
	}
}

// TestNamesNeverTakenFromAHolder: a name one item holds never goes to
// another while the first is there. Server c's own "a__search" is a's
// prefixed name: c gets its prefixed name, and when a clash with b moves
// a's "search" off its own name, a's tool is left out rather than take the
// name c's tool had. The ambiguous pair of prefixed names (server "a" with
// "b__c", server "a__b" with "c") is left out whole, whichever came first.
func TestNamesNeverTakenFromAHolder(t *testing.T) {
	t.Parallel()
	ep := namedEndpoint(nil, session.Naming{Mode: session.NamesAuto})
	ep.PutTools("a", tools("search"))
	ep.PutTools("c", tools("a__search"))
	assert.Equal(t, []string{"c__a__search", "search"}, ep.Tools())
	ep.PutTools("b", tools("search", "b2"))
	assert.Equal(t, []string{"b2", "b__search", "c__a__search"}, ep.Tools())
	ep.DeleteTools("c", []string{"a__search"})
	assert.Equal(t, []string{"a__search", "b2", "b__search"}, ep.Tools())

	for _, order := range [][]string{{"a", "a__b"}, {"a__b", "a"}} {
		ep := namedEndpoint(nil, session.Naming{Mode: session.NamesPrefixed})
		for _, s := range order {
			ep.PutTools(s, tools(map[string]string{"a": "b__c", "a__b": "c"}[s], "own"))
		}
		assert.Equal(t, []string{"a__b__own", "a__own"}, ep.Tools(), "order %v", order)
		ep.DeleteTools("a", []string{"b__c"})
		assert.Equal(t, []string{"a__b__c", "a__b__own", "a__own"}, ep.Tools(), "a__b's tool has the name once a's is gone")
	}
}

// TestNamesFitSixtyFourBytes: a name over 64 bytes is cut and ends with a
// hash of the whole name, the same one whatever else the session has; the
// call reaches the upstream under its own name.
func TestNamesFitSixtyFourBytes(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 70)
	ups := map[string]*mcp.ClientSession{"srv": namedUpstream(t, "srv", long, "short")}
	ep := namedEndpoint(ups, session.Naming{Mode: session.NamesAuto})
	ep.PutTools("srv", tools(long, "short"))
	want := strings.Repeat("x", 55) + "_" + "c71bd109" // sha256 of 70 "x" starts c71bd109
	assert.Equal(t, want, session.ShortName(long))
	assert.Equal(t, []string{"short", want}, ep.Tools())
	cs := connectClient(t, ep)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: want})
	require.NoError(t, err)
	assert.Equal(t, "srv:"+long, mcptest.Text(res))

	prefixed := session.ExposedName("srv", long)
	assert.Len(t, prefixed, session.MaxNameLen)
	assert.True(t, strings.HasPrefix(prefixed, "srv__xxx"))
	assert.NotEqual(t, session.ShortName(long), prefixed, "the hash is of the whole exposed name")
	assert.Equal(t, "a__b", session.ExposedName("a", "b"), "a short name is unchanged")
	// A cut never splits a UTF-8 sequence.
	assert.True(t, strings.HasPrefix(session.ShortName(strings.Repeat("é", 40)), strings.Repeat("é", 27)+"_"))
}

// TestCompletionFollowsExposedNames: a prompt reference names the prompt
// as the session exposes it, and reaches the server that name routes to;
// the upstream's own name, when the session prefixed it, is unknown.
func TestCompletionFollowsExposedNames(t *testing.T) {
	t.Parallel()
	ups := map[string]*mcp.ClientSession{"a": namedUpstream(t, "a"), "b": namedUpstream(t, "b")}
	ep := namedEndpoint(ups, session.Naming{Mode: session.NamesAuto})
	ep.PutPrompts("a", []*mcp.Prompt{{Name: "greet"}})
	cs := connectClient(t, ep)
	res, err := complete(t, cs, &mcp.CompleteReference{Type: "ref/prompt", Name: "greet"}, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, res.Completion.Values)

	ep.PutPrompts("b", []*mcp.Prompt{{Name: "greet"}})
	_, err = complete(t, cs, &mcp.CompleteReference{Type: "ref/prompt", Name: "greet"}, "")
	require.ErrorContains(t, err, `unknown prompt "greet"`)
	for _, s := range []string{"a", "b"} {
		res, err := complete(t, cs, &mcp.CompleteReference{Type: "ref/prompt", Name: s + "__greet"}, "")
		require.NoError(t, err)
		assert.Equal(t, []string{s}, res.Completion.Values)
		got, err := cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: s + "__greet"})
		require.NoError(t, err)
		assert.Equal(t, s, got.Description)
	}

	// A resource template keeps its URI template, and a reference to it
	// reaches its own server.
	ep.PutResourceTemplates("b", []*mcp.ResourceTemplate{{Name: "notes", URITemplate: "b://notes/{name}"}})
	res, err = complete(t, cs, &mcp.CompleteReference{Type: "ref/resource", URI: "b://notes/{name}"}, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"b"}, res.Completion.Values)
}

// TestDownServerNamedForBareName: a call of a tool by the bare name its
// server had, while that server is down, is told the server is down.
func TestDownServerNamedForBareName(t *testing.T) {
	t.Parallel()
	down := ""
	ep := session.New(session.Options{Name: "s", Logger: quiet, Naming: session.Naming{Mode: session.NamesAuto},
		Upstream:    func(string) session.Target { return session.Target{} },
		Unavailable: func(s string) string { return map[bool]string{true: down}[s == "a"] },
	})
	ep.PutTools("a", tools("search"))
	ep.PutPrompts("a", []*mcp.Prompt{{Name: "greet"}})
	cs := connectClient(t, ep)
	down = "restarting"
	ep.DeleteTools("a", []string{"search"})
	ep.DeletePrompts("a", []string{"greet"})
	_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search"})
	require.ErrorContains(t, err, `unknown tool "search": server "a" is restarting`)
	_, err = cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "greet"})
	require.ErrorContains(t, err, `server "a" is restarting`)
	_, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "other"})
	require.ErrorContains(t, err, `unknown tool "other"`)
	assert.NotContains(t, err.Error(), "restarting")

	// Back up: the names are its own again, and forgotten as gone.
	down = ""
	ep.PutTools("a", tools("search"))
	assert.Equal(t, []string{"search"}, ep.Tools())
}

// TestSetNamingRenames: changing the naming renames what is registered and
// tells clients.
func TestSetNamingRenames(t *testing.T) {
	t.Parallel()
	ep := namedEndpoint(nil, session.Naming{Mode: session.NamesPrefixed})
	ep.PutTools("a", tools("search"))
	before := ep.Changes()
	ep.SetNaming(session.Naming{Mode: session.NamesAuto})
	assert.Equal(t, []string{"search"}, ep.Tools())
	assert.Greater(t, ep.Changes(), before)
	before = ep.Changes()
	ep.SetNaming(session.Naming{Mode: session.NamesAuto})
	assert.Equal(t, before, ep.Changes(), "the same naming changes nothing")
}

// TestPutToolsLooksAtItsOwn checks that registering one server's tools
// again resolves the names of that server's tools only, not those of every
// server of the session: a reload re-registering each of a session's
// servers in turn would otherwise cost the square of its tools. The
// servers offer tools of the same names (copies of one upstream), so under
// auto naming every name is shared; a new server's tools look at the
// items that share their names, and no more.
func TestPutToolsLooksAtItsOwn(t *testing.T) {
	t.Parallel()
	const servers, tools = 200, 6
	for _, mode := range session.Modes {
		t.Run(string(mode), func(t *testing.T) {
			ep := session.New(session.Options{Name: "s", Upstream: func(string) session.Target { return session.Target{} }, Logger: quiet, Naming: session.Naming{Mode: mode}})
			list := func(trust bool) []*mcp.Tool {
				var l []*mcp.Tool
				for i := range tools {
					l = append(l, &mcp.Tool{Name: fmt.Sprintf("tool_%d", i), InputSchema: map[string]any{"type": "object"}, Meta: mcp.Meta{"trust": trust}})
				}
				return l
			}
			for i := range servers {
				ep.PutTools(fmt.Sprintf("srv%03d", i), list(false))
			}
			want := len(ep.Tools())
			before := ep.ResolvedTools()
			for i := range servers {
				ep.PutTools(fmt.Sprintf("srv%03d", i), list(true))
			}
			require.Len(t, ep.Tools(), want)
			require.LessOrEqual(t, ep.ResolvedTools()-before, uint64(servers*tools), "tools looked at to register %d servers' %d tools again", servers, tools)
			// A server that goes and comes back looks at the items that
			// share a name with its own: under auto naming, every server's.
			before = ep.ResolvedTools()
			var names []string
			for _, tool := range list(true) {
				names = append(names, tool.Name)
			}
			ep.DeleteTools("srv000", names)
			require.LessOrEqual(t, ep.ResolvedTools()-before, uint64(servers*tools))
		})
	}
}
