package session_test

//lint:file-ignore SA1019 the tests answer sampling, deprecated (SEP-2577) but still asked for during its deprecation window

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/session"
)

// An askingUpstream answers its tools, prompt and resource with an
// input-required result (SEP-2322) until the call comes back with the
// answers, and records the client capabilities each call carried.
type askingUpstream struct {
	srv *mcp.Server

	mu   sync.Mutex
	caps []any // the per-request client capabilities of each call
}

const askState = "opaque-state-1"

func newAskingUpstream() *askingUpstream {
	u := &askingUpstream{srv: mcp.NewServer(&mcp.Implementation{Name: "asking", Version: "1"}, nil)}
	nameQuestion := mcp.InputRequestMap{"who": &mcp.ElicitParams{
		Message:         "What is your name?",
		RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}},
	}}
	// answer returns the name the call's inputResponses carry, with the
	// state it echoed, or "".
	answer := func(meta mcp.Meta, responses mcp.InputResponseMap, state string) string {
		u.mu.Lock()
		u.caps = append(u.caps, meta[mcp.MetaKeyClientCapabilities])
		u.mu.Unlock()
		res, ok := responses["who"].(*mcp.ElicitResult)
		if !ok || res.Action != "accept" {
			return ""
		}
		return fmt.Sprintf("%v (state %s)", res.Content["name"], state)
	}
	u.srv.AddTool(&mcp.Tool{Name: "greet", InputSchema: objectSchema}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if name := answer(req.Params.Meta, req.Params.InputResponses, req.Params.RequestState); name != "" {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Hello, " + name}}}, nil
		}
		return &mcp.CallToolResult{InputRequests: nameQuestion, RequestState: askState}, nil
	})
	u.srv.AddTool(&mcp.Tool{Name: "capital", InputSchema: objectSchema}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		u.mu.Lock()
		u.caps = append(u.caps, req.Params.Meta[mcp.MetaKeyClientCapabilities])
		u.mu.Unlock()
		if res, ok := req.Params.InputResponses["q"].(*mcp.CreateMessageWithToolsResult); ok && len(res.Content) > 0 {
			if tc, ok := res.Content[0].(*mcp.TextContent); ok {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "The model says " + tc.Text}}}, nil
			}
		}
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"q": &mcp.CreateMessageParams{
			Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "Capital of France?"}}},
			MaxTokens: 10,
		}}}, nil
	})
	u.srv.AddPrompt(&mcp.Prompt{Name: "greet"}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		if name := answer(req.Params.Meta, req.Params.InputResponses, req.Params.RequestState); name != "" {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "Greet " + name}}}}, nil
		}
		return &mcp.GetPromptResult{InputRequests: nameQuestion, RequestState: askState}, nil
	})
	u.srv.AddResource(&mcp.Resource{URI: "ask://greeting", Name: "greeting"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		if name := answer(req.Params.Meta, req.Params.InputResponses, req.Params.RequestState); name != "" {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "Dear " + name}}}, nil
		}
		return &mcp.ReadResourceResult{InputRequests: nameQuestion, RequestState: askState}, nil
	})
	return u
}

func (u *askingUpstream) capabilities() []any {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]any(nil), u.caps...)
}

// newAskingEndpoint puts an Endpoint in front of an askingUpstream (server
// "up"), reached the way the pool reaches upstreams (pool.NewClient); the
// upstream link speaks upVersion ("": the go-sdk's newest).
func newAskingEndpoint(t *testing.T, upVersion string) (*askingUpstream, *session.Endpoint) {
	t.Helper()
	ctx := t.Context()
	u := newAskingUpstream()
	ct, st := mcp.NewInMemoryTransports()
	upSS, err := u.srv.Connect(ctx, st, nil)
	require.NoError(t, err)
	var sopts *mcp.ClientSessionOptions
	if upVersion != "" {
		sopts = &mcp.ClientSessionOptions{ProtocolVersion: upVersion}
	}
	upCS, err := pool.NewClient(&mcp.Implementation{Name: "wasmhost", Version: "test"}, mcp.ClientOptions{Logger: quiet}).Connect(ctx, ct, sopts)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = upCS.Close()
		_ = upSS.Wait()
	})
	ep := session.New(session.Options{Name: "s", Logger: quiet, Upstream: func(server string) session.Target {
		if server != "up" {
			return session.Target{}
		}
		return session.Target{Session: upCS}
	}})
	tools, err := upCS.ListTools(ctx, nil)
	require.NoError(t, err)
	ep.PutTools("up", tools.Tools)
	prompts, err := upCS.ListPrompts(ctx, nil)
	require.NoError(t, err)
	ep.PutPrompts("up", prompts.Prompts)
	resources, err := upCS.ListResources(ctx, nil)
	require.NoError(t, err)
	ep.PutResources("up", resources.Resources)
	return u, ep
}

// answeringClient is the options of a client that answers elicitation
// with the name "Ada" and sampling with "Paris", counting the questions.
func answeringClient(asked *sync.Map) *mcp.ClientOptions {
	count := func(what string) {
		n, _ := asked.LoadOrStore(what, new(int))
		*n.(*int)++
	}
	return &mcp.ClientOptions{
		Logger: quiet,
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			count("elicit:" + req.Params.Message)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
		},
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			count("sample")
			return &mcp.CreateMessageResult{Role: "assistant", Model: "test", Content: &mcp.TextContent{Text: "Paris"}}, nil
		},
	}
}

func TestInputRequestsReachTheCallingClient(t *testing.T) {
	for _, tc := range []struct {
		name      string
		client    *mcp.ClientSessionOptions // the client's protocol: nil is the newest
		upVersion string
	}{
		// The client answers the input-required result itself and calls
		// again (its go-sdk does so); the Endpoint passes both ways.
		{name: "client speaks 2026-07-28"},
		// The go-sdk's server asks the client with elicitation/create and
		// sampling/createMessage, then calls the Endpoint again.
		{name: "client speaks 2025-11-25", client: &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			up, ep := newAskingEndpoint(t, tc.upVersion)
			var asked sync.Map
			cs := connectServerWith(t, ep.Server(), answeringClient(&asked), tc.client)

			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__greet"})
			require.NoError(t, err)
			assert.Equal(t, "Hello, Ada (state "+askState+")", text(res))

			res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__capital"})
			require.NoError(t, err)
			assert.Equal(t, "The model says Paris", text(res))

			pr, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "up__greet"})
			require.NoError(t, err)
			require.Len(t, pr.Messages, 1)
			assert.Equal(t, "Greet Ada (state "+askState+")", pr.Messages[0].Content.(*mcp.TextContent).Text)

			rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "ask://greeting"})
			require.NoError(t, err)
			require.Len(t, rr.Contents, 1)
			assert.Equal(t, "Dear Ada (state "+askState+")", rr.Contents[0].Text)

			n, _ := asked.Load("elicit:What is your name?")
			require.NotNil(t, n, "the client was asked")
			assert.Equal(t, 3, *n.(*int), "the client was asked once per call")
			n, _ = asked.Load("sample")
			require.NotNil(t, n, "the client's model was asked")
			assert.Equal(t, 1, *n.(*int))

			// Every call told the upstream what the calling client can
			// answer, and nothing else.
			caps := up.capabilities()
			require.Len(t, caps, 8, "each of the four calls came twice")
			for i, c := range caps {
				m, ok := c.(map[string]any)
				require.True(t, ok, "call %d carried capabilities %#v", i, c)
				assert.Contains(t, m, "elicitation", "call %d", i)
				assert.Contains(t, m, "sampling", "call %d", i)
				assert.NotContains(t, m, "roots", "call %d", i)
			}
		})
	}
}

func TestInputRequestsWithoutAnAnsweringClient(t *testing.T) {
	ctx := t.Context()
	up, ep := newAskingEndpoint(t, "")
	cs := connectServer(t, ep.Server()) // no elicitation or sampling handler

	// The upstream asks anyway: the client cannot answer, and the call
	// fails in the client, not on the shared connection.
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__greet"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "elicitation")

	// And it was told so: the call carried the shared connection's
	// capabilities, which are none.
	caps := up.capabilities()
	require.NotEmpty(t, caps)
	m, _ := caps[0].(map[string]any)
	assert.NotContains(t, m, "elicitation")
	assert.NotContains(t, m, "sampling")
}

func TestInputRequestsNeedTheNewProtocolUpstream(t *testing.T) {
	// An upstream link pinned to 2025-11-25 has no input-required results:
	// the go-sdk's upstream server asks the shared connection with
	// elicitation/create, which it refuses, and the call fails.
	ctx := t.Context()
	_, ep := newAskingEndpoint(t, "2025-11-25")
	var asked sync.Map
	cs := connectServerWith(t, ep.Server(), answeringClient(&asked), nil)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__greet"})
	if err == nil {
		assert.True(t, res.IsError, "got %q", text(res))
	}
	_, ok := asked.Load("elicit:What is your name?")
	assert.False(t, ok, "the calling client is not asked through a connection of the old protocol")
}

// TestHammerInputRequests: clients of several endpoints answer input
// requests at once over one shared upstream connection; each call ends
// with its own client's answer.
func TestHammerInputRequests(t *testing.T) {
	ctx := t.Context()
	u := newAskingUpstream()
	ct, st := mcp.NewInMemoryTransports()
	upSS, err := u.srv.Connect(ctx, st, nil)
	require.NoError(t, err)
	upCS, err := pool.NewClient(&mcp.Implementation{Name: "wasmhost", Version: "test"}, mcp.ClientOptions{Logger: quiet}).Connect(ctx, ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = upCS.Close()
		_ = upSS.Wait()
	})
	tools, err := upCS.ListTools(ctx, nil)
	require.NoError(t, err)

	const endpoints, clientsPer, calls = 4, 3, 5
	var wg sync.WaitGroup
	for e := range endpoints {
		ep := session.New(session.Options{Name: fmt.Sprintf("s%d", e), Logger: quiet, Upstream: func(string) session.Target {
			return session.Target{Session: upCS}
		}})
		ep.PutTools("up", tools.Tools)
		for c := range clientsPer {
			name := fmt.Sprintf("s%d-c%d", e, c)
			var sopts *mcp.ClientSessionOptions
			if c%2 == 1 {
				sopts = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}
			}
			cs := connectServerWith(t, ep.Server(), &mcp.ClientOptions{Logger: quiet,
				ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": name}}, nil
				},
			}, sopts)
			wg.Go(func() {
				for range calls {
					res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__greet"})
					if !assert.NoError(t, err, name) {
						return
					}
					assert.Equal(t, "Hello, "+name+" (state "+askState+")", text(res))
				}
			})
		}
	}
	wg.Wait()
}
