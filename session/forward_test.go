package session_test

// Call forwarding seen on the wire on both legs (client <-> endpoint and
// endpoint <-> upstream): tools/call, prompts/get and resources/read, their
// errors, cancellation, timeouts and progress. The cases come from an audit
// of the forwarding; what go-sdk v1.8.0 itself loses on the way (numbers
// beyond 2^53 decoded into float64, result fields outside the MCP schema)
// is listed in README ("What a session passes on").

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/session"
)

// A wireLog records the JSON-RPC messages that pass through a connection,
// as they are on the wire (params and results are raw JSON there).
type wireLog struct {
	mu   sync.Mutex
	msgs []jsonrpc.Message
}

func (w *wireLog) add(m jsonrpc.Message) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, m)
}

// requests returns every request (call or notification) of method so far.
func (w *wireLog) requests(method string) []*jsonrpc.Request {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*jsonrpc.Request
	for _, m := range w.msgs {
		if r, ok := m.(*jsonrpc.Request); ok && r.Method == method {
			out = append(out, r)
		}
	}
	return out
}

// lastParams returns the params of the last request of method.
func (w *wireLog) lastParams(t *testing.T, method string) json.RawMessage {
	t.Helper()
	reqs := w.requests(method)
	require.NotEmpty(t, reqs, "no %s on the wire", method)
	return reqs[len(reqs)-1].Params
}

// lastResult returns the result of the last successful response.
func (w *wireLog) lastResult(t *testing.T) json.RawMessage {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.msgs) - 1; i >= 0; i-- {
		if r, ok := w.msgs[i].(*jsonrpc.Response); ok && r.Error == nil {
			return r.Result
		}
	}
	t.Fatal("no result on the wire")
	return nil
}

// A logTransport logs what its connections write (out) and read (in).
type logTransport struct {
	mcp.Transport
	out, in *wireLog
}

func (t *logTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &logConn{Connection: c, out: t.out, in: t.in}, nil
}

type logConn struct {
	mcp.Connection
	out, in *wireLog
}

func (c *logConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if c.out != nil {
		c.out.add(msg)
	}
	return c.Connection.Write(ctx, msg)
}

func (c *logConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err == nil && c.in != nil {
		c.in.add(msg)
	}
	return msg, err
}

// A wireUpstream is a go-sdk server with tools, prompts and resources
// that exercise forwarding. Blocking handlers end when their context ends
// (which they report on ended) or when the test ends.
type wireUpstream struct {
	srv     *mcp.Server
	stop    chan struct{}
	started chan string // method of each blocking handler entered
	ended   chan error  // ctx.Err() of each blocking handler whose ctx ended

	received sync.Map // method -> *atomic.Int64, what reached the server

	mu      sync.Mutex
	args    []json.RawMessage // arguments of each "args" call
	lateSS  *mcp.ServerSession
	lateTok any // the token the last "prog" call got
}

func (u *wireUpstream) count(method string) int64 {
	v, ok := u.received.Load(method)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

// upstreamJSONRPCError is the upstream's own JSON-RPC error, with data.
var upstreamJSONRPCError = &jsonrpc.Error{Code: -32042, Message: "quota exceeded for \"err\"", Data: json.RawMessage(`{"retryAfter":3,"detail":["a",{"b":null}]}`)}

func newWireUpstream() *wireUpstream {
	u := &wireUpstream{stop: make(chan struct{}), started: make(chan string, 16), ended: make(chan error, 16)}
	u.srv = mcp.NewServer(&mcp.Implementation{Name: "audit-up", Version: "1"}, nil)
	u.srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			v, _ := u.received.LoadOrStore(method, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
			return next(ctx, method, req)
		}
	})
	block := func(ctx context.Context, method string) error {
		u.started <- method
		select {
		case <-ctx.Done():
			u.ended <- ctx.Err()
			return ctx.Err()
		case <-u.stop:
			return fmt.Errorf("test over")
		}
	}
	tool := func(name string, h mcp.ToolHandler) {
		u.srv.AddTool(&mcp.Tool{Name: name, InputSchema: obj()}, h)
	}
	tool("rich", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return richToolResult(), nil })
	tool("oops", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{
			IsError:           true,
			Meta:              mcp.Meta{"example.com/why": "bad input"},
			Content:           []mcp.Content{&mcp.TextContent{Text: "it failed"}, &mcp.ImageContent{Data: []byte{1, 2, 3}, MIMEType: "image/png"}},
			StructuredContent: map[string]any{"code": "E1", "fields": []any{"a", "b"}},
		}, nil
	})
	tool("args", func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		u.mu.Lock()
		u.args = append(u.args, bytes.Clone(req.Params.Arguments))
		u.mu.Unlock()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
	})
	tool("err", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, upstreamJSONRPCError
	})
	tool("block", func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, block(ctx, "tools/call")
	})
	tool("prog", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		tok := req.Params.GetProgressToken()
		u.mu.Lock()
		u.lateSS, u.lateTok = req.Session, tok
		u.mu.Unlock()
		if tok != nil {
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Total: 2, Message: "half", Meta: mcp.Meta{"example.com/stage": "parse", "io.modelcontextprotocol/subscriptionId": 7}}); err != nil {
				return nil, err
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
	})
	// stray sends progress no matter what the request carried: under a
	// token it made up and under one that looks like the relay's.
	tool("stray", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		for _, tok := range []any{"stray", "wasmhost-progress-AAAAAAAAAAAAAAAAAAAAAAAAAA", 1} {
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1}); err != nil {
				return nil, err
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "strayed"}}}, nil
	})

	u.srv.AddPrompt(&mcp.Prompt{Name: "rich", Arguments: []*mcp.PromptArgument{{Name: "topic"}}}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return richPromptResult(req.Params.Name, req.Params.Arguments["topic"]), nil
	})
	u.srv.AddPrompt(&mcp.Prompt{Name: "prog"}, func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		if tok := req.Params.GetProgressToken(); tok != nil {
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Message: "prompt"}); err != nil {
				return nil, err
			}
		}
		return richPromptResult("prog", ""), nil
	})
	u.srv.AddResource(&mcp.Resource{URI: "audit://prog", Name: "prog"}, func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		if tok := req.Params.GetProgressToken(); tok != nil {
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Message: "read"}); err != nil {
				return nil, err
			}
		}
		return richReadResult(req.Params.URI), nil
	})
	u.srv.AddPrompt(&mcp.Prompt{Name: "err"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return nil, upstreamJSONRPCError
	})
	u.srv.AddPrompt(&mcp.Prompt{Name: "block"}, func(ctx context.Context, _ *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return nil, block(ctx, "prompts/get")
	})

	u.srv.AddResource(&mcp.Resource{URI: "audit://rich", Name: "rich", MIMEType: "text/plain"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return richReadResult(req.Params.URI), nil
	})
	u.srv.AddResource(&mcp.Resource{URI: "audit://err", Name: "err"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return nil, upstreamJSONRPCError
	})
	u.srv.AddResource(&mcp.Resource{URI: "audit://block", Name: "block"}, func(ctx context.Context, _ *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return nil, block(ctx, "resources/read")
	})
	u.srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "audit://items/{id}", Name: "item", MIMEType: "application/json"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		if strings.HasSuffix(req.Params.URI, "/missing") {
			return nil, mcp.ResourceNotFoundError(req.Params.URI)
		}
		return richReadResult(req.Params.URI), nil
	})
	return u
}

func richToolResult() *mcp.CallToolResult {
	ann := &mcp.Annotations{Audience: []mcp.Role{"user", "assistant"}, Priority: 0.5, LastModified: "2025-01-02T03:04:05Z"}
	return &mcp.CallToolResult{
		Meta: mcp.Meta{"example.com/trace": "t-1", "plain": map[string]any{"nested": []any{true, nil, "x"}}},
		Content: []mcp.Content{
			&mcp.TextContent{Text: "héllo \u2028 <b>&</b> 😀", Annotations: ann, Meta: mcp.Meta{"k": "v"}},
			&mcp.ImageContent{Data: []byte("\x89PNG\r\n\x1a\n\x00\xff"), MIMEType: "image/png", Annotations: ann},
			&mcp.AudioContent{Data: []byte("RIFF\x00\x01"), MIMEType: "audio/wav", Meta: mcp.Meta{"len": 2}},
			&mcp.ResourceLink{URI: "audit://rich", Name: "rich", Title: "Rich", Description: "a link", MIMEType: "text/plain", Size: new(int64(42)), Annotations: ann, Meta: mcp.Meta{"k": 1}},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "audit://items/1", MIMEType: "text/plain", Text: "embedded", Meta: mcp.Meta{"e": "t"}}, Annotations: ann},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "audit://items/2", MIMEType: "application/octet-stream", Blob: []byte{0, 1, 2, 254, 255}}},
		},
		StructuredContent: map[string]any{"list": []any{1, 2.5, "s", nil, false}, "obj": map[string]any{}, "empty": []any{}},
	}
}

func richPromptResult(name, topic string) *mcp.GetPromptResult {
	return &mcp.GetPromptResult{
		Meta:        mcp.Meta{"example.com/p": "q"},
		Description: "prompt " + name + " about " + topic,
		Messages: []*mcp.PromptMessage{
			{Role: "user", Content: &mcp.TextContent{Text: "about " + topic, Meta: mcp.Meta{"m": true}}},
			{Role: "assistant", Content: &mcp.ImageContent{Data: []byte{9, 8, 7}, MIMEType: "image/gif"}},
			{Role: "user", Content: &mcp.AudioContent{Data: []byte{1}, MIMEType: "audio/ogg"}},
			{Role: "user", Content: &mcp.ResourceLink{URI: "audit://rich", Name: "rich"}},
			{Role: "user", Content: &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "audit://rich", MIMEType: "text/plain", Text: "x"}}},
		},
	}
}

func richReadResult(uri string) *mcp.ReadResourceResult {
	return &mcp.ReadResourceResult{
		Meta: mcp.Meta{"example.com/r": []any{"s"}},
		Contents: []*mcp.ResourceContents{
			{URI: uri, MIMEType: "text/plain", Text: "text of " + uri, Meta: mcp.Meta{"c": 1}},
			{URI: uri + "#bin", MIMEType: "application/octet-stream", Blob: []byte{0, 255, 10, 13}},
		},
	}
}

// A rig is one endpoint in front of an wireUpstream (server "up"),
// reached over one in-memory connection wrapped by a progress relay, with
// a go-sdk client connected to the endpoint, and a plain client of the
// upstream for reference. toUp/fromUp log the endpoint's upstream leg,
// toClient what the endpoint writes to its client.
type rig struct {
	up       *wireUpstream
	ep       *session.Endpoint
	relay    *session.ProgressRelay
	direct   *mcp.ClientSession
	cs       *mcp.ClientSession
	toUp     *wireLog
	fromUp   *wireLog
	toClient *wireLog
	logs     *mcptest.LogBuffer // the endpoint's log

	mu    sync.Mutex
	prog  []*mcp.ProgressNotificationParams
	calls []session.Call // told to Options.OnCall

	timeout atomic.Int64 // the Target's Timeout, a time.Duration
}

// newRig connects everything and registers what the upstream lists; the
// forwarded calls are bounded by timeout (0: none).
func newRig(t *testing.T, timeout time.Duration) *rig {
	t.Helper()
	ctx := t.Context()
	r := &rig{up: newWireUpstream(), relay: session.NewProgressRelay(), toUp: &wireLog{}, fromUp: &wireLog{}, toClient: &wireLog{}, logs: &mcptest.LogBuffer{}}

	ct, st := mcp.NewInMemoryTransports()
	upSS, err := r.up.srv.Connect(ctx, st, nil)
	require.NoError(t, err)
	upCS, err := mcp.NewClient(&mcp.Implementation{Name: "wasmhost", Version: "test"}, &mcp.ClientOptions{Logger: quiet, ProgressNotificationHandler: r.relay.Handle}).
		Connect(ctx, &logTransport{Transport: r.relay.WrapTransport(ct), out: r.toUp, in: r.fromUp}, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = upCS.Close()
		_ = upSS.Wait()
	})
	r.direct = connectServer(t, r.up.srv)

	r.timeout.Store(int64(timeout))
	// No keep-alive: its failure would end a call too, in 15 s, well
	// within the tests' generous waits (mcptest.EventWithin), so with it a
	// broken cancellation or disconnect could still pass them.
	r.ep = session.New(session.Options{Name: "s", KeepAlive: -1, Logger: slog.New(slog.NewTextHandler(r.logs, nil)), Progress: r.relay, Upstream: func(server string) session.Target {
		if server != "up" {
			return session.Target{}
		}
		return session.Target{Conn: upCS, Timeout: time.Duration(r.timeout.Load())}
	}, Unavailable: func(server string) string {
		if server == "gone" {
			return "down (test)"
		}
		return ""
	}, OnCall: func(c session.Call) {
		r.mu.Lock()
		r.calls = append(r.calls, c)
		r.mu.Unlock()
	}})
	registerAll(t, r.ep, "up", upCS)

	ct2, st2 := mcp.NewInMemoryTransports()
	ss, err := r.ep.Server().Connect(ctx, &logTransport{Transport: st2, out: r.toClient}, nil)
	require.NoError(t, err)
	r.cs, err = mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, &mcp.ClientOptions{Logger: quiet,
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			r.mu.Lock()
			r.prog = append(r.prog, req.Params)
			r.mu.Unlock()
		},
	}).Connect(ctx, ct2, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = r.cs.Close()
		_ = ss.Wait()
	})
	t.Cleanup(func() { close(r.up.stop) }) // first: blocked handlers return
	return r
}

// registerAll registers on ep, as server's, everything up lists.
func registerAll(t *testing.T, ep *session.Endpoint, server string, up *mcp.ClientSession) {
	t.Helper()
	ctx := t.Context()
	tools, err := up.ListTools(ctx, nil)
	require.NoError(t, err)
	ep.PutTools(server, tools.Tools)
	if up.InitializeResult().Capabilities.Prompts != nil {
		prompts, err := up.ListPrompts(ctx, nil)
		require.NoError(t, err)
		ep.PutPrompts(server, prompts.Prompts)
	}
	if up.InitializeResult().Capabilities.Resources != nil {
		resources, err := up.ListResources(ctx, nil)
		require.NoError(t, err)
		ep.PutResources(server, resources.Resources)
		templates, err := up.ListResourceTemplates(ctx, nil)
		require.NoError(t, err)
		ep.PutResourceTemplates(server, templates.ResourceTemplates)
	}
}

func (r *rig) progress() []*mcp.ProgressNotificationParams {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*mcp.ProgressNotificationParams(nil), r.prog...)
}

// wireValue decodes raw JSON keeping every number's digits (json.Number)
// and leaves out what differs by design between the upstream's answer and
// the endpoint's: the reserved "io.modelcontextprotocol/" _meta keys (each
// hop's own, dropped by the endpoint), the cache fields (the endpoint's
// answers are private) and the result type.
func wireValue(t *testing.T, raw json.RawMessage) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v))
	if m, ok := v.(map[string]any); ok {
		delete(m, "cacheScope")
		delete(m, "ttlMs")
		delete(m, "resultType")
		if meta, ok := m["_meta"].(map[string]any); ok {
			for k := range meta {
				if strings.HasPrefix(k, "io.modelcontextprotocol/") {
					delete(meta, k)
				}
			}
			if len(meta) == 0 {
				delete(m, "_meta")
			}
		}
	}
	return v
}

// sameOnTheWire checks that the endpoint wrote its client the result the
// upstream wrote it, as JSON values with numbers compared digit for digit.
func (r *rig) sameOnTheWire(t *testing.T, what string) {
	t.Helper()
	if diff := cmp.Diff(wireValue(t, r.fromUp.lastResult(t)), wireValue(t, r.toClient.lastResult(t))); diff != "" {
		t.Errorf("%s: result on the client's wire differs from the upstream's (-upstream +client):\n%s", what, diff)
	}
}

// TestResultsPassUnchanged: results of every content type, with
// annotations, _meta at every level, structured content and isError,
// reach the client as the upstream sent them (minus the reserved _meta
// keys), for tools/call, prompts/get, resources/read and a templated read;
// the upstream sees its own names.
func TestResultsPassUnchanged(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	ctx := t.Context()

	res, err := r.cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__rich"})
	require.NoError(t, err)
	r.sameOnTheWire(t, "tools/call rich")
	want, err := r.direct.CallTool(ctx, &mcp.CallToolParams{Name: "rich"})
	require.NoError(t, err)
	assert.Equal(t, want.Content, res.Content)
	assert.Equal(t, want.StructuredContent, res.StructuredContent)
	delete(res.Meta, "io.modelcontextprotocol/serverInfo") // the endpoint's own, on this hop
	assert.Equal(t, mcp.Meta{"example.com/trace": "t-1", "plain": map[string]any{"nested": []any{true, nil, "x"}}}, res.Meta)

	assert.Contains(t, string(r.toUp.lastParams(t, "tools/call")), `"name":"rich"`)

	res, err = r.cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__oops"})
	require.NoError(t, err, "an isError result is a result, not a JSON-RPC error")
	assert.True(t, res.IsError)
	r.sameOnTheWire(t, "tools/call oops")

	pr, err := r.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "up__rich", Arguments: map[string]string{"topic": "up__rich ünïcode"}})
	require.NoError(t, err)
	r.sameOnTheWire(t, "prompts/get rich")
	assert.Equal(t, "prompt rich about up__rich ünïcode", pr.Description, "the upstream got its own name and the arguments as sent")
	assert.Len(t, pr.Messages, 5)

	rr, err := r.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "audit://rich"})
	require.NoError(t, err)
	r.sameOnTheWire(t, "resources/read rich")
	assert.Len(t, rr.Contents, 2)

	rr, err = r.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "audit://items/%C3%A9"})
	require.NoError(t, err)
	r.sameOnTheWire(t, "resources/read through the template")
	assert.Equal(t, "audit://items/%C3%A9", rr.Contents[0].URI, "the URI reaches the upstream as the client wrote it")
	assert.Contains(t, string(r.toUp.lastParams(t, "resources/read")), `"uri":"audit://items/%C3%A9"`)
}

// TestArgumentsPassFaithfully: tool arguments reach the upstream as
// the client wrote them: large and precise numbers digit for digit,
// unicode and escapes, nesting, nulls, {} and null. (A client that sends no
// arguments at all makes the upstream see {}: the go-sdk client always
// sends an object.)
func TestArgumentsPassFaithfully(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	cases := []string{
		`{"big":123456789012345678901234567890,"neg":-9007199254740993,"prec":0.1000000000000000055511151231257827,"exp":1e400}`,
		`{"s":"é\u00e9\ud83d\ude00\u2028\"\\/<&>","k\u00e9y":"v"}`,
		`{"a":{"b":[1,[2,[3,{"c":null}]],{}],"d":[]},"e":null,"f":false}`,
		`{}`,
		`null`,
	}
	for i, args := range cases {
		_, err := r.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__args", Arguments: json.RawMessage(args)})
		require.NoError(t, err, args)
		r.up.mu.Lock()
		require.Len(t, r.up.args, i+1)
		got := r.up.args[i]
		r.up.mu.Unlock()
		assert.Equal(t, wireValue(t, json.RawMessage(args)), wireValue(t, got), "arguments %s reached the upstream as %s", args, got)
	}

	// No arguments at all: the upstream sees an empty object.
	_, err := r.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__args"})
	require.NoError(t, err)
	r.up.mu.Lock()
	assert.JSONEq(t, `{}`, string(r.up.args[len(r.up.args)-1]))
	r.up.mu.Unlock()
}

// TestUpstreamErrorsRelayedUnchanged: the upstream's JSON-RPC error
// (code, message, data) reaches the client as the same error, for
// tools/call, prompts/get and resources/read, and a resource the upstream
// does not find is "resource not found" with its data.
func TestUpstreamErrorsRelayedUnchanged(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	ctx := t.Context()
	check := func(what string, err error, want *jsonrpc.Error) {
		t.Helper()
		var werr *jsonrpc.Error
		require.ErrorAs(t, err, &werr, what)
		assert.Equal(t, want.Code, werr.Code, what)
		assert.Equal(t, want.Message, werr.Message, what)
		assert.JSONEq(t, string(want.Data), string(werr.Data), what)
	}
	_, err := r.cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__err"})
	check("tools/call", err, upstreamJSONRPCError)
	_, err = r.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "up__err"})
	check("prompts/get", err, upstreamJSONRPCError)
	_, err = r.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "audit://err"})
	check("resources/read", err, upstreamJSONRPCError)

	_, err = r.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "audit://items/missing"})
	_, direct := r.direct.ReadResource(ctx, &mcp.ReadResourceParams{URI: "audit://items/missing"})
	var want *jsonrpc.Error
	require.ErrorAs(t, direct, &want)
	check("resources/read of a templated URI the upstream does not have", err, want)
}

// TestRefusedNamesNeverReachUpstream: unknown names, the upstream's
// own names, names another server would have, and URIs the session does
// not have are refused by the endpoint (invalid params; resource not found)
// and nothing reaches the upstream.
func TestRefusedNamesNeverReachUpstream(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	ctx := t.Context()
	r.ep.DeleteTools("up", []string{"rich"}) // hidden by the session's policy
	r.ep.DeletePrompts("up", []string{"rich"})
	require.NotContains(t, r.ep.Tools(), "up__rich")
	before := map[string]int64{}
	for _, m := range []string{"tools/call", "prompts/get", "resources/read", "completion/complete"} {
		before[m] = r.up.count(m)
	}

	for _, name := range []string{"up__rich", "rich", "up__nope", "other__rich", "up__", "UP__args", "up__args ", ""} {
		_, err := r.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{}})
		var werr *jsonrpc.Error
		require.ErrorAs(t, err, &werr, "tool %q", name)
		assert.Equal(t, int64(jsonrpc.CodeInvalidParams), werr.Code, "tool %q", name)
		assert.Contains(t, werr.Message, "unknown tool", "tool %q", name)

		_, err = r.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name})
		require.ErrorAs(t, err, &werr, "prompt %q", name)
		assert.Equal(t, int64(jsonrpc.CodeInvalidParams), werr.Code, "prompt %q", name)

		_, err = r.cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: name}, Argument: mcp.CompleteParamsArgument{Name: "topic"}})
		require.ErrorAs(t, err, &werr, "completion of prompt %q", name)
		assert.Equal(t, int64(jsonrpc.CodeInvalidParams), werr.Code, "completion of prompt %q", name)
	}
	for _, uri := range []string{"audit://secret", "audit://items", "audit://rich/", "AUDIT://rich"} {
		_, err := r.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		var werr *jsonrpc.Error
		require.ErrorAs(t, err, &werr, uri)
		assert.Equal(t, int64(jsonrpc.CodeInvalidParams), werr.Code, uri) // go-sdk v1.7+: resource not found
		assert.Equal(t, "Resource not found", werr.Message, uri)
	}
	for m, n := range before {
		assert.Equal(t, n, r.up.count(m), "%s reached the upstream", m)
	}
}

// TestTimeoutSaysSo: a call cut by the server's timeout is cancelled
// upstream, and its client is told the call timed out (ErrTimeout) and
// after how long, not that the upstream is unavailable (as it once was,
// with "context deadline exceeded"); the operator's log says so too,
// naming the session, the server and the call.
func TestTimeoutSaysSo(t *testing.T) {
	t.Parallel()
	const timeout = 150 * time.Millisecond
	r := newRig(t, timeout)
	ctx := t.Context()

	res, err := r.cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__block"})
	require.NoError(t, err, "a tool result with isError")
	assert.True(t, res.IsError)
	select {
	case err := <-r.up.ended:
		assert.ErrorIs(t, err, context.Canceled, "the upstream call was cancelled")
	case <-time.After(mcptest.EventWithin):
		t.Fatal("the upstream's handler still runs after the timeout")
	}
	msg := text(res)
	assert.Contains(t, msg, session.ErrTimeout.Error(), "the client should learn the call timed out")
	assert.NotContains(t, msg, session.ErrUnavailable.Error(), "the upstream is up; it was slow")
	assert.Contains(t, msg, timeout.String(), "the client should learn which limit it ran into")
	assert.True(t, r.logs.HasLine("level=WARN", "upstream call timed out", "session=s", "server=up", "tool=up__block", "timeout="+timeout.String()),
		"the timeout is logged with the session, server and tool:\n%s", r.logs.String())

	_, err = r.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "up__block"})
	require.Error(t, err)
	select {
	case <-r.up.ended:
	case <-time.After(mcptest.EventWithin):
		t.Fatal("the upstream's prompt handler still runs after the timeout")
	}
	assert.ErrorContains(t, err, session.ErrTimeout.Error(), "prompts/get")
	assert.NotContains(t, err.Error(), session.ErrUnavailable.Error(), "prompts/get")
	assert.True(t, r.logs.HasLine("upstream call timed out", "server=up", "prompt=up__block"), "prompts/get:\n%s", r.logs.String())
}

// TestCancellationOfPromptsAndReads: a client cancelling a
// prompts/get or resources/read cancels the forwarded request: the
// upstream gets notifications/cancelled for that request's id and its
// handler's context ends.
func TestCancellationOfPromptsAndReads(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	for _, tc := range []struct {
		method string
		call   func(ctx context.Context) error
	}{
		{"tools/call", func(ctx context.Context) error {
			_, err := r.cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__block"})
			return err
		}},
		{"prompts/get", func(ctx context.Context) error {
			_, err := r.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "up__block"})
			return err
		}},
		{"resources/read", func(ctx context.Context) error {
			_, err := r.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "audit://block"})
			return err
		}},
	} {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- tc.call(ctx) }()
		select {
		case m := <-r.up.started:
			require.Equal(t, tc.method, m)
		case <-time.After(mcptest.EventWithin):
			t.Fatalf("%s did not reach the upstream", tc.method)
		}
		cancel()
		require.Error(t, <-done)
		select {
		case err := <-r.up.ended:
			assert.ErrorIs(t, err, context.Canceled, tc.method)
		case <-time.After(mcptest.EventWithin):
			t.Fatalf("%s: the upstream's handler was not cancelled", tc.method)
		}
		forwarded := r.toUp.requests(tc.method)
		require.NotEmpty(t, forwarded)
		id := forwarded[len(forwarded)-1].ID.Raw()
		require.Eventually(t, func() bool {
			for _, n := range r.toUp.requests("notifications/cancelled") {
				var p mcp.CancelledParams
				if json.Unmarshal(n.Params, &p) == nil && fmt.Sprint(p.RequestID) == fmt.Sprint(id) {
					return true
				}
			}
			return false
		}, mcptest.EventWithin, 5*time.Millisecond, "%s: no notifications/cancelled for request %v upstream", tc.method, id)
	}
}

// TestProgressStaysWithItsCall: a client that sent no token gets no
// progress, whatever tokens the upstream makes up (even ones shaped like
// the relay's); progress the upstream sends for a call that has returned
// is not delivered; prompts/get and resources/read relay progress too.
func TestProgressStaysWithItsCall(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	ctx := t.Context()

	res, err := r.cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__stray"})
	require.NoError(t, err)
	require.Equal(t, "strayed", text(res))
	// A relayed notification is written before the result: none was.
	assert.Empty(t, r.toClient.requests("notifications/progress"), "a call without a token got progress")

	params := &mcp.CallToolParams{Name: "up__prog", Arguments: map[string]any{}}
	params.SetProgressToken("first")
	_, err = r.cs.CallTool(ctx, params)
	require.NoError(t, err)
	require.Len(t, r.toClient.requests("notifications/progress"), 1)
	r.up.mu.Lock()
	lateSS, lateTok := r.up.lateSS, r.up.lateTok
	r.up.mu.Unlock()
	require.NotEqual(t, "first", lateTok, "the upstream got the relay's token")
	// The upstream goes on sending progress for the call that returned.
	for i := range 3 {
		require.NoError(t, lateSS.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: lateTok, Progress: float64(2 + i), Message: "late"}))
	}
	// A second call's progress comes after the late ones on the upstream
	// connection; once it reached the client, the late ones were handled.
	params = &mcp.CallToolParams{Name: "up__prog", Arguments: map[string]any{}}
	params.SetProgressToken("second")
	_, err = r.cs.CallTool(ctx, params)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(r.progress()) >= 2 }, mcptest.EventWithin, 5*time.Millisecond)
	var got []string
	for _, p := range r.progress() {
		got = append(got, fmt.Sprintf("%v:%s", p.ProgressToken, p.Message))
	}
	assert.Equal(t, []string{"first:half", "second:half"}, got)

	// prompts/get and resources/read relay progress the same way, before
	// their result.
	pp := &mcp.GetPromptParams{Name: "up__prog"}
	pp.SetProgressToken(41)
	_, err = r.cs.GetPrompt(ctx, pp)
	require.NoError(t, err)
	rp := &mcp.ReadResourceParams{URI: "audit://prog"}
	rp.SetProgressToken("read-tok")
	_, err = r.cs.ReadResource(ctx, rp)
	require.NoError(t, err)
	notes := r.toClient.requests("notifications/progress")
	require.Len(t, notes, 4)
	assert.JSONEq(t, `{"progressToken":41,"progress":1,"message":"prompt"}`, string(notes[2].Params))
	assert.JSONEq(t, `{"progressToken":"read-tok","progress":1,"message":"read"}`, string(notes[3].Params))
	assert.Zero(t, r.relay.Pending())
}

// TestCallUnderWayWhenHidden: a call under way when a reload hides
// its tool, or takes its server away from the session, completes with the
// upstream's answer; a call starting after the reload is refused.
func TestCallUnderWayWhenHidden(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c := f.connect("alice", `{}`)
	c.drainChanged()
	answered := c.callBlocked(t, f)

	changed, err := c.handle.RefreshMetadata(t.Context(), json.RawMessage(`{"excludeTools":["block","echo"]}`))
	require.NoError(t, err)
	require.True(t, changed)
	require.NotContains(t, c.ep.Tools(), "demo__block")
	_, err = c.call(t, "demo__echo", map[string]any{"text": "x"})
	require.ErrorContains(t, err, "unknown tool", "a call starting after the reload is refused")

	f.up.Release <- struct{}{}
	select {
	case res := <-answered:
		assert.False(t, res.IsError, text(res))
		assert.Equal(t, "released", text(res))
	case <-time.After(mcptest.EventWithin):
		t.Fatal("the call under way got no answer")
	}

	// A reload that takes the server away from the session (its handle is
	// released, the last one: the upstream connection closes) lets the call
	// under way finish with its answer too.
	_, err = c.handle.RefreshMetadata(t.Context(), json.RawMessage(`{}`))
	require.NoError(t, err)
	answered = c.callBlocked(t, f)
	released := make(chan error, 1)
	go func() { released <- c.handle.Release(t.Context()) }()
	require.Eventually(t, func() bool { return len(c.ep.Tools()) == 0 }, mcptest.EventWithin, 5*time.Millisecond)
	_, err = c.call(t, "demo__echo", map[string]any{"text": "x"})
	require.ErrorContains(t, err, "unknown tool")
	close(f.up.Release)
	select {
	case res := <-answered:
		assert.False(t, res.IsError, text(res))
		assert.Equal(t, "released", text(res))
	case <-time.After(mcptest.EventWithin):
		t.Fatal("the call under way got no answer")
	}
	require.NoError(t, <-released)
}

// TestUpstreamDiesDuringPromptAndRead: an upstream that dies while
// a prompts/get or resources/read is under way gives the client an error
// naming the server, at once; nothing hangs.
func TestUpstreamDiesDuringPromptAndRead(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"prompts/get", "resources/read"} {
		t.Run(strings.ReplaceAll(method, "/", "-"), func(t *testing.T) {
			f := newFixture(t)
			// No keep-alive, whose failure could end the call within the
			// wait below: the upstream's death alone must answer the client.
			f.keepAlive = -1
			up := f.up
			stop := make(chan struct{})
			t.Cleanup(func() { close(stop) })
			wait := func(ctx context.Context) error {
				up.Started <- struct{}{}
				select {
				case <-ctx.Done():
				case <-stop:
				}
				return fmt.Errorf("ended")
			}
			up.Server.AddPrompt(&mcp.Prompt{Name: "wait"}, func(ctx context.Context, _ *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				return nil, wait(ctx)
			})
			up.Server.AddResource(&mcp.Resource{URI: "demo://wait", Name: "wait"}, func(ctx context.Context, _ *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return nil, wait(ctx)
			})
			c := f.connect("alice", `{}`)
			done := make(chan error, 1)
			go func() {
				var err error
				if method == "prompts/get" {
					_, err = c.cs.GetPrompt(t.Context(), &mcp.GetPromptParams{Name: "demo__wait"})
				} else {
					_, err = c.cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "demo://wait"})
				}
				done <- err
			}()
			select {
			case <-up.Started:
			case <-time.After(mcptest.EventWithin):
				t.Fatal("the call did not reach the upstream")
			}
			up.KillAll()
			select {
			case err := <-done:
				require.Error(t, err)
				assert.Contains(t, err.Error(), `server "demo"`)
				assert.Contains(t, err.Error(), session.ErrUnavailable.Error())
				var coded *jsonrpc.Error
				require.ErrorAs(t, err, &coded)
				assert.Equal(t, int64(jsonrpc.CodeInternalError), coded.Code, "an error of the endpoint's own making is an internal error, not code 0")
			case <-time.After(mcptest.EventWithin):
				t.Fatal("the client hangs after the upstream died")
			}
		})
	}
}

// A textIn is the argument of a tool that takes a text.
type textIn struct {
	Text string `json:"text"`
}

// TestHammerSharedUpstream: many clients of many sessions call
// through one shared upstream connection at once, all with the same
// progress tokens; every call gets its own answer and every progress
// notification goes to the call it belongs to.
func TestHammerSharedUpstream(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"in-memory", "streamable-http"} {
		t.Run(name, func(t *testing.T) {
			f := transportFixtures[name](t)
			mcp.AddTool(f.up.Server, &mcp.Tool{Name: "tag"}, func(ctx context.Context, req *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, any, error) {
				if tok := req.Params.GetProgressToken(); tok != nil {
					for i := range 2 {
						if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i + 1), Message: in.Text}); err != nil {
							return nil, nil, err
						}
					}
				}
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
			})

			const sessions, clientsPer, workers, calls = 5, 3, 3, 6
			type caller struct {
				name string
				cs   *mcp.ClientSession
				mu   sync.Mutex
				prog map[string][]string // client token -> messages
			}
			var callers []*caller
			var firsts []*client // they send no token
			for s := range sessions {
				c := f.connect(fmt.Sprintf("s%d", s), `{"includeTools":["tag","echo"]}`)
				firsts = append(firsts, c)
				callers = append(callers, &caller{name: fmt.Sprintf("s%d/c0", s), cs: c.cs})
				for k := 1; k < clientsPer; k++ {
					cl := &caller{name: fmt.Sprintf("s%d/c%d", s, k), prog: map[string][]string{}}
					cl.cs = connectServerWith(t, c.ep.Server(), &mcp.ClientOptions{Logger: quiet, ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
						cl.mu.Lock()
						tok := fmt.Sprint(req.Params.ProgressToken)
						cl.prog[tok] = append(cl.prog[tok], req.Params.Message)
						cl.mu.Unlock()
					}}, nil)
					callers = append(callers, cl)
				}
			}
			var wg sync.WaitGroup
			for _, cl := range callers {
				for w := range workers {
					wg.Go(func() {
						for i := range calls {
							tok := fmt.Sprintf("w%d-%d", w, i) // the same tokens in every client
							want := cl.name + "/" + tok
							params := &mcp.CallToolParams{Name: "demo__tag", Arguments: map[string]any{"text": want}}
							if cl.prog != nil {
								params.SetProgressToken(tok)
							}
							res, err := cl.cs.CallTool(t.Context(), params)
							if !assert.NoError(t, err, want) {
								return
							}
							assert.Equal(t, want, text(res))
						}
					})
				}
			}
			wg.Wait()
			for _, cl := range callers {
				if cl.prog == nil {
					continue
				}
				// The go-sdk client runs its notification handler off the
				// goroutine that hands a call its result: the last
				// notifications may be handled just after their call returned.
				require.Eventually(t, func() bool {
					cl.mu.Lock()
					defer cl.mu.Unlock()
					n := 0
					for _, msgs := range cl.prog {
						n += len(msgs)
					}
					return n >= 2*workers*calls
				}, 10*time.Second, 5*time.Millisecond, "%s: progress", cl.name)
				cl.mu.Lock()
				assert.Len(t, cl.prog, workers*calls, cl.name)
				for tok, msgs := range cl.prog {
					assert.Equal(t, []string{cl.name + "/" + tok, cl.name + "/" + tok}, msgs, "%s token %s", cl.name, tok)
				}
				cl.mu.Unlock()
			}
			for _, c := range firsts {
				c.mu.Lock()
				assert.Empty(t, c.prog, "a client that sent no token got progress")
				c.mu.Unlock()
			}
			assert.Zero(t, f.relay.Pending())
		})
	}
}

// TestProgressMetaRelayed: a progress notification's _meta reaches the
// client without the reserved keys, as results' and requests' do (the
// relay once rebuilt it from token, progress, total and message only).
func TestProgressMetaRelayed(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	params := &mcp.CallToolParams{Name: "up__prog", Arguments: map[string]any{}}
	params.SetProgressToken("p")
	_, err := r.cs.CallTool(t.Context(), params)
	require.NoError(t, err)
	notes := r.toClient.requests("notifications/progress")
	require.Len(t, notes, 1)
	var p mcp.ProgressNotificationParams
	require.NoError(t, json.Unmarshal(notes[0].Params, &p))
	assert.Equal(t, "p", p.ProgressToken)
	assert.Equal(t, "half", p.Message)
	assert.Equal(t, 2.0, p.Total)
	assert.Equal(t, "parse", p.Meta["example.com/stage"], "client wire: %s", notes[0].Params)
	assert.NotContains(t, p.Meta, "io.modelcontextprotocol/subscriptionId", "a reserved key of the upstream hop reached the client")
}

// TestClientGoneCancelsUpstream: a client whose connection breaks
// during a call (it crashed; no notifications/cancelled) has its forwarded
// call cancelled upstream.
func TestClientGoneCancelsUpstream(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	cc, sc := net.Pipe()
	ss, err := r.ep.Server().Connect(t.Context(), &mcp.IOTransport{Reader: sc, Writer: sc}, nil)
	require.NoError(t, err)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "x", Version: "1"}, &mcp.ClientOptions{Logger: quiet}).Connect(t.Context(), &mcp.IOTransport{Reader: cc, Writer: cc}, nil)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__block"})
		done <- err
	}()
	select {
	case <-r.up.started:
	case <-time.After(mcptest.EventWithin):
		t.Fatal("the call did not reach the upstream")
	}
	require.NoError(t, cc.Close()) // the client crashes
	require.Error(t, <-done)
	select {
	case err := <-r.up.ended:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(mcptest.EventWithin):
		t.Fatal("the upstream call outlives its client")
	}
	_ = ss.Wait()
	_ = cs.Close()
}

// TestOnCallOutcomes: Options.OnCall hears of every forwarded request
// once, with its server, method and outcome, and how long the upstream
// took when the request reached it.
func TestOnCallOutcomes(t *testing.T) {
	t.Parallel()
	r := newRig(t, time.Second)
	ctx := t.Context()
	r.ep.PutTools("gone", []*mcp.Tool{{Name: "x", InputSchema: obj()}}) // no upstream

	_, err := r.cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__rich"})
	require.NoError(t, err)
	_, err = r.cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__oops"})
	require.NoError(t, err)
	_, err = r.cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__err"})
	require.Error(t, err)
	_, err = r.cs.CallTool(ctx, &mcp.CallToolParams{Name: "gone__x"})
	require.NoError(t, err, "an isError result")
	_, err = r.cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__block"})
	require.NoError(t, err, "an isError result")
	<-r.up.started
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		<-r.up.started
		cancel()
	}()
	_, err = r.cs.GetPrompt(cctx, &mcp.GetPromptParams{Name: "up__block"})
	require.Error(t, err)
	_, err = r.cs.CallTool(ctx, &mcp.CallToolParams{Name: "no__such"})
	require.Error(t, err)

	want := []session.Call{
		{Server: "up", Method: "tools/call", Outcome: session.OutcomeOK},
		{Server: "up", Method: "tools/call", Outcome: session.OutcomeToolError},
		{Server: "up", Method: "tools/call", Outcome: session.OutcomeError},
		{Server: "gone", Method: "tools/call", Outcome: session.OutcomeUnavailable},
		{Server: "up", Method: "tools/call", Outcome: session.OutcomeTimeout},
		{Server: "up", Method: "prompts/get", Outcome: session.OutcomeCancelled},
	}
	var got []session.Call
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		got = slices.Clone(r.calls)
		return len(got) >= len(want)
	}, mcptest.EventWithin, 10*time.Millisecond, "calls told: %v", got)
	for i := range got {
		if got[i].Server == "gone" {
			assert.Zero(t, got[i].Took, "a call that never reached an upstream took no upstream time")
		} else {
			assert.Positive(t, got[i].Took, got[i])
		}
		got[i].Took = 0
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("calls told (-want +got):\n%s", diff)
	}
	assert.GreaterOrEqual(t, r.callTook(4), time.Second, "the timed-out call took the timeout")
}

// callTook returns how long the i-th call told to OnCall took upstream.
func (r *rig) callTook(i int) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[i].Took
}

// TestUnknownNameOfADownServer: a client calling a tool or prompt of one of
// the session's servers that is down learns that the server is down; any
// other unknown name is refused as before, with nothing added.
func TestUnknownNameOfADownServer(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	ctx := t.Context()
	_, err := r.cs.CallTool(ctx, &mcp.CallToolParams{Name: "gone__x"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown tool "gone__x": server "gone" is down (test)`)
	_, err = r.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "gone__p"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown prompt "gone__p": server "gone" is down (test)`)

	for _, name := range []string{"up__nope", "other__x", "plain"} {
		_, err = r.cs.CallTool(ctx, &mcp.CallToolParams{Name: name})
		require.Error(t, err, name)
		assert.NotContains(t, err.Error(), "server", name)
		var werr *jsonrpc.Error
		require.ErrorAs(t, err, &werr)
		assert.Equal(t, int64(jsonrpc.CodeInvalidParams), werr.Code)
	}
}

// TestTimeoutNamesTheOneThatApplied: a call cut by the server's timeout
// names the timeout it ran under, not the server's timeout when it ended
// (a reload may have changed it meanwhile).
func TestTimeoutNamesTheOneThatApplied(t *testing.T) {
	t.Parallel()
	const timeout = 150 * time.Millisecond
	r := newRig(t, timeout)
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := r.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__block"})
		assert.NoError(t, err)
		done <- res
	}()
	<-r.up.started
	r.timeout.Store(int64(time.Hour)) // changed while the call runs
	res := <-done
	require.NotNil(t, res)
	msg := text(res)
	assert.Contains(t, msg, session.ErrTimeout.Error())
	assert.Contains(t, msg, timeout.String(), "the timeout the call ran under")
	assert.NotContains(t, msg, time.Hour.String())
	assert.True(t, r.logs.HasLine("upstream call timed out", "timeout="+timeout.String()), r.logs.String())
}
