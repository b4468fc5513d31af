package session_test

//lint:file-ignore SA1019 the tests answer sampling, deprecated (SEP-2577) but still asked for during its deprecation window

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
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
		u.record(meta)
		res, ok := responses["who"].(*mcp.ElicitResult)
		if !ok || res.Action != "accept" {
			return ""
		}
		return fmt.Sprintf("%v (state %s)", res.Content["name"], state)
	}
	u.srv.AddTool(&mcp.Tool{Name: "greet", InputSchema: obj()}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if name := answer(req.Params.Meta, req.Params.InputResponses, req.Params.RequestState); name != "" {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Hello, " + name}}}, nil
		}
		return &mcp.CallToolResult{InputRequests: nameQuestion, RequestState: askState}, nil
	})
	u.srv.AddTool(&mcp.Tool{Name: "capital", InputSchema: obj()}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		u.record(req.Params.Meta)
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

// record keeps the client capabilities a call carried.
func (u *askingUpstream) record(meta mcp.Meta) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.caps = append(u.caps, meta[mcp.MetaKeyClientCapabilities])
}

func (u *askingUpstream) capabilities() []any {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]any(nil), u.caps...)
}

// dialAsking connects to a new askingUpstream the way the pool reaches
// upstreams (pool.NewClient), over a link of protocol upVersion ("": the
// go-sdk's newest).
func dialAsking(t *testing.T, upVersion string) (*askingUpstream, *mcp.ClientSession) {
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
	return u, upCS
}

// askingEndpoint returns an Endpoint named name with upCS as its server
// "up", everything it lists registered.
func askingEndpoint(t *testing.T, name string, upCS *mcp.ClientSession) *session.Endpoint {
	t.Helper()
	ep := session.New(session.Options{Name: name, Logger: quiet, Upstream: func(server string) session.Target {
		if server != "up" {
			return session.Target{}
		}
		return session.Target{Conn: upCS}
	}})
	registerAll(t, ep, "up", upCS)
	return ep
}

// newAskingEndpoint puts an Endpoint in front of a new askingUpstream
// (see dialAsking).
func newAskingEndpoint(t *testing.T, upVersion string) (*askingUpstream, *session.Endpoint) {
	t.Helper()
	u, upCS := dialAsking(t, upVersion)
	return u, askingEndpoint(t, "s", upCS)
}

// answeringClient is the options of a client that answers elicitation
// with the name "Ada" and sampling with "Paris", counting the questions in
// asked.
func answeringClient(asked *questions) *mcp.ClientOptions {
	return &mcp.ClientOptions{
		Logger: quiet,
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked.message.Store(req.Params.Message)
			asked.elicit.Add(1)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
		},
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			asked.sample.Add(1)
			return &mcp.CreateMessageResult{Role: "assistant", Model: "test", Content: &mcp.TextContent{Text: "Paris"}}, nil
		},
	}
}

// questions counts what an answeringClient was asked.
type questions struct {
	elicit, sample atomic.Int32
	message        atomic.Value // the last elicitation's message
}

func TestInputRequestsReachTheCallingClient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		client *mcp.ClientSessionOptions // the client's protocol: nil is the newest
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
			up, ep := newAskingEndpoint(t, "")
			var asked questions
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

			assert.Equal(t, int32(3), asked.elicit.Load(), "the client was asked once per call")
			assert.Equal(t, "What is your name?", asked.message.Load(), "the upstream's question")
			assert.Equal(t, int32(1), asked.sample.Load(), "the client's model was asked once")

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
	t.Parallel()
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
	t.Parallel()
	// An upstream link pinned to 2025-11-25 has no input-required results:
	// the go-sdk's upstream server asks the shared connection with
	// elicitation/create, which it refuses, and the call fails.
	ctx := t.Context()
	_, ep := newAskingEndpoint(t, "2025-11-25")
	var asked questions
	cs := connectServerWith(t, ep.Server(), answeringClient(&asked), nil)
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__greet"})
	require.Error(t, err)
	assert.ErrorContains(t, err, "does not support elicitation")
	assert.Zero(t, asked.elicit.Load(), "the calling client is not asked through a connection of the old protocol")
}

// TestHammerInputRequests: clients of several endpoints answer input
// requests at once over one shared upstream connection; each call ends
// with its own client's answer.
func TestHammerInputRequests(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, upCS := dialAsking(t, "")

	const endpoints, clientsPer, calls = 4, 3, 5
	var wg sync.WaitGroup
	for e := range endpoints {
		ep := askingEndpoint(t, fmt.Sprintf("s%d", e), upCS)
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

// TestInputRequestsFloodIsRefused: an upstream answering a call with an
// input-required result of more questions than session.MaxInputRequests
// fails that call, with an error naming the session, the server and the
// count, and the calling client is asked nothing. Before, the go-sdk's
// server asked a client of an older protocol every question at once, a
// goroutine each: one result of 16 MiB made the host hold some 150,000
// goroutines and more than a GiB. A result of MaxInputRequests questions
// still reaches the client.
func TestInputRequestsFloodIsRefused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := mcp.NewServer(&mcp.Implementation{Name: "flood", Version: "1"}, nil)
	questionsFor := func(n int) mcp.InputRequestMap {
		m := make(mcp.InputRequestMap, n)
		for i := range n {
			m[fmt.Sprint(i)] = &mcp.ElicitParams{Message: "q", RequestedSchema: obj()}
		}
		return m
	}
	many := session.MaxInputRequests + 1
	srv.AddTool(&mcp.Tool{Name: "ask", InputSchema: obj()}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if len(req.Params.InputResponses) > 0 {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%d answers", len(req.Params.InputResponses))}}}, nil
		}
		var args struct{ N int }
		if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{InputRequests: questionsFor(args.N), RequestState: "s"}, nil
	})
	srv.AddPrompt(&mcp.Prompt{Name: "ask"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{InputRequests: questionsFor(many), RequestState: "s"}, nil
	})
	ct, st := mcp.NewInMemoryTransports()
	upSS, err := srv.Connect(ctx, st, nil)
	require.NoError(t, err)
	upCS, err := pool.NewClient(&mcp.Implementation{Name: "wasmhost", Version: "test"}, mcp.ClientOptions{Logger: quiet}).Connect(ctx, ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = upCS.Close()
		_ = upSS.Wait()
	})
	ep := askingEndpoint(t, "s", upCS)

	for _, sopts := range []*mcp.ClientSessionOptions{{ProtocolVersion: "2025-11-25"}, nil} {
		var asked atomic.Int32
		cs := connectServerWith(t, ep.Server(), &mcp.ClientOptions{Logger: quiet,
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				asked.Add(1)
				return &mcp.ElicitResult{Action: "decline"}, nil
			},
		}, sopts)
		proto := "newest"
		if sopts != nil {
			proto = sopts.ProtocolVersion
		}

		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__ask", Arguments: map[string]any{"n": many}})
		require.Error(t, err, proto)
		for _, want := range []string{`session "s"`, `server "up"`, `tool "up__ask"`, fmt.Sprint(many), "input-required"} {
			assert.ErrorContains(t, err, want, proto)
		}
		_, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "up__ask"})
		require.Error(t, err, proto)
		assert.ErrorContains(t, err, `prompt "up__ask"`, proto)
		assert.Zero(t, asked.Load(), "%s: the client was asked nothing", proto)

		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__ask", Arguments: map[string]any{"n": session.MaxInputRequests}})
		require.NoError(t, err, proto)
		assert.Equal(t, fmt.Sprintf("%d answers", session.MaxInputRequests), text(res), proto)
		assert.Equal(t, int32(session.MaxInputRequests), asked.Load(), proto)
	}
}
