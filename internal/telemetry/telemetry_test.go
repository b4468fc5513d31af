package telemetry

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// clearEnv unsets the variables that configure an exporter.
func clearEnv(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"} {
		t.Setenv(k, "")
	}
}

// TestOffByDefault: without an endpoint, tracing stays off and the
// middleware leaves requests alone.
func TestOffByDefault(t *testing.T) {
	clearEnv(t)
	stop, err := Start(t.Context(), Config{Instance: "r"})
	require.NoError(t, err)
	assert.False(t, Enabled())
	require.NoError(t, stop(t.Context()))

	p := &mcp.CallToolParams{Name: "x", Meta: mcp.Meta{"k": "v"}}
	res := &mcp.CallToolResult{}
	next := func(context.Context, string, mcp.Request) (mcp.Result, error) { return res, nil }
	srv, cl := Server("sess")(next), Client("s", "stdio")(next)
	sreq := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "x"}}
	creq := &mcp.ClientRequest[*mcp.CallToolParams]{Params: p}
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = srv(t.Context(), "tools/call", sreq)
		_, _ = cl(t.Context(), "tools/call", creq)
		_, end := Policy(t.Context(), "p", "project", 0)
		end(nil)
	})
	assert.Zero(t, allocs, "no work when off")
	assert.Equal(t, mcp.Meta{"k": "v"}, p.Meta, "the upstream request is left as it is")
}

// TestEndpoints: the flag's URL is a base URL as OTEL_EXPORTER_OTLP_ENDPOINT
// is; the environment alone turns tracing on; OTEL_SDK_DISABLED and
// OTEL_TRACES_EXPORTER=none keep it off; a URL without a scheme is refused.
func TestEndpoints(t *testing.T) {
	clearEnv(t)
	for in, want := range map[string]string{
		"http://127.0.0.1:4318":           "http://127.0.0.1:4318/v1/traces",
		"http://127.0.0.1:4318/":          "http://127.0.0.1:4318/v1/traces",
		"https://otel.example/base":       "https://otel.example/base/v1/traces",
		"http://127.0.0.1:4318/v1/traces": "http://127.0.0.1:4318/v1/traces",
	} {
		on, got, err := configured(Config{Endpoint: in})
		require.NoError(t, err, in)
		assert.True(t, on, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"127.0.0.1:4318", "grpc://x:4317", "http://"} {
		_, _, err := configured(Config{Endpoint: bad})
		assert.Error(t, err, bad)
	}
	on, _, _ := configured(Config{})
	assert.False(t, on)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces")
	on, _, _ = configured(Config{})
	assert.True(t, on)
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	on, _, _ = configured(Config{Endpoint: "http://127.0.0.1:4318"})
	assert.False(t, on)
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_SDK_DISABLED", "true")
	on, _, _ = configured(Config{Exporter: tracetest.NewInMemoryExporter()})
	assert.False(t, on)
}

// TestStartTwice: one tracing at a time; stop turns it off.
func TestStartTwice(t *testing.T) {
	clearEnv(t)
	stop, err := Start(t.Context(), Config{Exporter: tracetest.NewInMemoryExporter()})
	require.NoError(t, err)
	assert.True(t, Enabled())
	_, err = Start(t.Context(), Config{Exporter: tracetest.NewInMemoryExporter()})
	assert.Error(t, err)
	require.NoError(t, stop(t.Context()))
	assert.False(t, Enabled())
}

// TestClientCopiesMeta: the upstream request carries the CLIENT span's
// context in a copy of its _meta, without the caller's traceparent; a
// request made outside any trace gets no span.
func TestClientCopiesMeta(t *testing.T) {
	clearEnv(t)
	exp := tracetest.NewInMemoryExporter()
	stop, err := Start(t.Context(), Config{Exporter: exp})
	require.NoError(t, err)
	defer func() { _ = stop(context.Background()) }()

	callerMeta := mcp.Meta{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "progressToken": "p"}
	p := &mcp.CallToolParams{Name: "t", Meta: callerMeta}
	var sent mcp.Meta
	h := Client("s", "url")(func(_ context.Context, _ string, req mcp.Request) (mcp.Result, error) {
		sent = req.GetParams().(*mcp.CallToolParams).Meta
		return &mcp.CallToolResult{}, nil
	})
	_, _ = h(t.Context(), "tools/call", &mcp.ClientRequest[*mcp.CallToolParams]{Params: p})
	assert.Empty(t, exp.GetSpans(), "no trace, no span")

	srv := Server("sess")(func(ctx context.Context, _ string, _ mcp.Request) (mcp.Result, error) {
		return h(ctx, "tools/call", &mcp.ClientRequest[*mcp.CallToolParams]{Params: p})
	})
	_, _ = srv(t.Context(), "tools/call", &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "x", Meta: callerMeta}})
	spans := exp.GetSpans()
	require.Len(t, spans, 2)
	cl := spans[0]
	assert.Equal(t, "tools/call t", cl.Name)
	assert.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-"+cl.SpanContext.SpanID().String()+"-01", sent["traceparent"])
	assert.Equal(t, "p", sent["progressToken"])
	assert.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", callerMeta["traceparent"], "the caller's map is not changed")
}

// BenchmarkServer measures the SERVER middleware around a tools/call
// handler that does nothing, with traces off and on.
func BenchmarkServer(b *testing.B) {
	res := &mcp.CallToolResult{}
	next := func(context.Context, string, mcp.Request) (mcp.Result, error) { return res, nil }
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "x", Meta: mcp.Meta{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}
	h := Server("sess")(next)
	b.Run("off", func(b *testing.B) {
		for b.Loop() {
			_, _ = h(b.Context(), "tools/call", req)
		}
	})
	b.Run("on", func(b *testing.B) {
		stop, err := Start(b.Context(), Config{Exporter: tracetest.NewNoopExporter()})
		require.NoError(b, err)
		defer func() { _ = stop(context.Background()) }()
		for b.Loop() {
			_, _ = h(b.Context(), "tools/call", req)
		}
	})
}
