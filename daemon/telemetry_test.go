package daemon_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/internal/telemetry"
)

// startTraces turns traces on for the test, into an in-memory exporter,
// as the replica named replica.
func startTraces(t *testing.T, replica string) *tracetest.InMemoryExporter {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	stop, err := telemetry.Start(t.Context(), telemetry.Config{Exporter: exp, Version: "v-test", Instance: replica})
	require.NoError(t, err)
	require.True(t, telemetry.Enabled())
	t.Cleanup(func() { _ = stop(context.Background()) })
	return exp
}

// attrs returns a span's attributes by key.
func attrs(s tracetest.SpanStub) map[string]attribute.Value {
	m := make(map[string]attribute.Value, len(s.Attributes))
	for _, kv := range s.Attributes {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

// spanNamed waits for the span of trace tid called name and returns it.
func spanNamed(t *testing.T, exp *tracetest.InMemoryExporter, tid trace.TraceID, name string) tracetest.SpanStub {
	t.Helper()
	var found *tracetest.SpanStub
	describe := func() string {
		var b strings.Builder
		for _, s := range exp.GetSpans() {
			fmt.Fprintf(&b, "%s %s parent=%s %v\n", s.SpanContext.TraceID(), s.Name, s.Parent.SpanID(), s.Attributes)
		}
		return b.String()
	}
	mcptest.WaitFor(t, eventWithin, func() bool {
		for _, s := range exp.GetSpans() {
			if s.Name == name && (!tid.IsValid() || s.SpanContext.TraceID() == tid) {
				found = &s
				return true
			}
		}
		return false
	}, describe, "no span %q in trace %s", name, tid)
	return *found
}

// metaUpstream is an HTTP upstream whose tool "meta" answers with the
// traceparent of its request's _meta, and whose tool "fail" fails.
func metaUpstream(t *testing.T) *mcptest.HTTPUpstream {
	return mcptest.NewHTTPUpstream(t, mcptest.HTTPUpstreamConfig{
		NewServer: func() *mcp.Server {
			s := mcp.NewServer(&mcp.Implementation{Name: "meta", Version: "1"}, nil)
			s.AddTool(&mcp.Tool{Name: "meta", InputSchema: map[string]any{"type": "object"}}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				tp, _ := req.Params.Meta["traceparent"].(string)
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: tp}}}, nil
			})
			s.AddTool(&mcp.Tool{Name: "fail", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no"}}}, nil
			})
			return s
		},
		Options: mcp.StreamableHTTPOptions{Logger: slog.New(slog.DiscardHandler)},
	})
}

// TestTracesOfAToolCall: with traces on, a tools/call through a session
// is a SERVER span that continues the trace of the client's _meta
// traceparent, with a CLIENT child span for the upstream call, whose own
// context reaches the upstream in its request's _meta; the resource names
// the replica. A tool result flagged isError marks both spans.
func TestTracesOfAToolCall(t *testing.T) {
	exp := startTraces(t, "replica-7")
	up := metaUpstream(t)
	r := start(t, map[string]any{
		"listen":     "127.0.0.1:0",
		"mcpServers": map[string]any{"up": map[string]any{"url": up.URL()}},
		"sessions":   map[string]any{"alice": map[string]any{"token": aliceToken}},
	})
	alice := r.connect("alice", aliceToken)

	tid := trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	parent := trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
	res, err := alice.cs.CallTool(t.Context(), &mcp.CallToolParams{
		Name: "up__meta",
		Meta: mcp.Meta{"traceparent": fmt.Sprintf("00-%s-%s-01", tid, parent), "tracestate": "vendor=x"},
	})
	require.NoError(t, err)
	require.False(t, res.IsError, resultText(res))

	srv := spanNamed(t, exp, tid, "tools/call up__meta")
	assert.Equal(t, trace.SpanKindServer, srv.SpanKind)
	assert.Equal(t, parent, srv.Parent.SpanID(), "the client's traceparent is continued")
	assert.True(t, srv.Parent.IsRemote())
	assert.Equal(t, "vendor=x", srv.SpanContext.TraceState().String())
	a := attrs(srv)
	assert.Equal(t, "tools/call", a["mcp.method.name"].AsString())
	assert.Equal(t, "up__meta", a["gen_ai.tool.name"].AsString())
	assert.Equal(t, "execute_tool", a["gen_ai.operation.name"].AsString())
	assert.Equal(t, "alice", a["wasmhost.session"].AsString())
	assert.Equal(t, alice.cs.ID(), a["mcp.session.id"].AsString())
	assert.NotEmpty(t, alice.cs.ID())
	assert.Equal(t, alice.cs.InitializeResult().ProtocolVersion, a["mcp.protocol.version"].AsString())
	assert.Equal(t, "tcp", a["network.transport"].AsString())
	assert.NotContains(t, a, "error.type")

	cl := spanNamed(t, exp, tid, "tools/call meta")
	assert.Equal(t, trace.SpanKindClient, cl.SpanKind)
	assert.Equal(t, srv.SpanContext.SpanID(), cl.Parent.SpanID(), "the upstream call is the server span's child")
	ca := attrs(cl)
	assert.Equal(t, "meta", ca["gen_ai.tool.name"].AsString())
	assert.Equal(t, "up", ca["wasmhost.server"].AsString())
	assert.Equal(t, "tcp", ca["network.transport"].AsString())
	assert.NotEmpty(t, ca["mcp.session.id"].AsString(), "the upstream connection's session")
	assert.NotEqual(t, alice.cs.ID(), ca["mcp.session.id"].AsString())
	// The upstream got the client span's context, not the client's.
	assert.Equal(t, fmt.Sprintf("00-%s-%s-01", tid, cl.SpanContext.SpanID()), resultText(res))

	for _, s := range []tracetest.SpanStub{srv, cl} {
		ra := make(map[string]string)
		for _, kv := range s.Resource.Attributes() {
			ra[string(kv.Key)] = kv.Value.String()
		}
		assert.Equal(t, "wasmhost", ra["service.name"])
		assert.Equal(t, "v-test", ra["service.version"])
		assert.Equal(t, "replica-7", ra["service.instance.id"], "traces carry the replica's identity")
		assert.Equal(t, "github.com/wasmhost/wasmhost", s.InstrumentationScope.Name)
	}

	// A call without a traceparent starts a trace; a tool's own failure
	// is error.type tool_error.
	res, err = alice.call(t, "up__fail", map[string]any{})
	require.NoError(t, err)
	require.True(t, res.IsError)
	fsrv := spanNamed(t, exp, trace.TraceID{}, "tools/call up__fail")
	assert.False(t, fsrv.Parent.IsValid(), "a new trace")
	assert.Equal(t, "tool_error", attrs(fsrv)["error.type"].AsString())
	fcl := spanNamed(t, exp, fsrv.SpanContext.TraceID(), "tools/call fail")
	assert.Equal(t, fsrv.SpanContext.SpanID(), fcl.Parent.SpanID())
	assert.Equal(t, "tool_error", attrs(fcl)["error.type"].AsString())

	// An unknown tool: the JSON-RPC error's code.
	_, err = alice.call(t, "up__nope", map[string]any{})
	require.Error(t, err)
	nsrv := spanNamed(t, exp, trace.TraceID{}, "tools/call up__nope")
	assert.Equal(t, "-32602", attrs(nsrv)["error.type"].AsString())

	// Other requests get a server span too (tools/list), without a
	// target in its name.
	alice.tools(t)
	lst := spanNamed(t, exp, trace.TraceID{}, "tools/list")
	assert.Equal(t, "alice", attrs(lst)["wasmhost.session"].AsString())
}

// TestTracesOfAReload: a reload is a span, with a span per policy plugin
// call under it; the reload's batch call is one span with its item count.
func TestTracesOfAReload(t *testing.T) {
	exp := startTraces(t, "replica-3")
	cfg := baseConfig()
	r := start(t, cfg)
	writeConfig(t, r.path, set(cfg, "sessions.alice.overrides.demo.includeTools", []string{"echo", "add", "pid", "read_note"}))
	code, body := r.do("POST", "/v1/reload", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, code, body)

	var reload tracetest.SpanStub
	mcptest.WaitFor(t, eventWithin, func() bool {
		for _, s := range exp.GetSpans() {
			if s.Name == "wasmhost.reload" && attrs(s)["wasmhost.reload.trigger"].AsString() == "admin" {
				reload = s
				return true
			}
		}
		return false
	}, r.logs.String, "no reload span")
	var batch []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Parent.SpanID() == reload.SpanContext.SpanID() && strings.HasPrefix(s.Name, "wasmhost.policy ") {
			if s.Name == "wasmhost.policy project_batch" {
				batch = append(batch, s)
			}
		}
	}
	require.Len(t, batch, 1, "one batch call for the reload's views")
	a := attrs(batch[0])
	assert.Equal(t, "project_batch", a["wasmhost.policy.export"].AsString())
	assert.Equal(t, "policy-default", a["wasmhost.policy.plugin"].AsString())
	assert.GreaterOrEqual(t, a["wasmhost.policy.items"].AsInt64(), int64(1))
	assert.NotContains(t, attrs(reload), "error.type")
}
