package main

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/wasmhost/wasmhost/internal/mcptest"
)

// otlpReceiver is an OTLP/HTTP trace receiver, as a collector serves it on
// :4318: it decodes the protobuf export requests POSTed to /v1/traces.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []receivedSpan
	bad   []string // requests it could not take
}

// A receivedSpan is a span with its resource's attributes.
type receivedSpan struct {
	span     *tracev1.Span
	resource map[string]string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *otlpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	fail := func(why string) {
		r.mu.Lock()
		r.bad = append(r.bad, req.Method+" "+req.URL.Path+": "+why)
		r.mu.Unlock()
		http.Error(w, why, http.StatusBadRequest)
	}
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		fail("not an OTLP/HTTP protobuf trace export: " + req.Header.Get("Content-Type"))
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			fail(err.Error())
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		fail(err.Error())
		return
	}
	var export collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &export); err != nil {
		fail(err.Error())
		return
	}
	r.mu.Lock()
	for _, rs := range export.ResourceSpans {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, receivedSpan{span: s, resource: res})
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func attrMap(kvs []*commonv1.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.GetValue().GetStringValue()
	}
	return m
}

// wait returns the n spans named name, once received.
func (r *otlpReceiver) wait(t *testing.T, name string, n int) []receivedSpan {
	t.Helper()
	var found []receivedSpan
	mcptest.WaitFor(t, 60*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		found = found[:0]
		for _, s := range r.spans {
			if s.span.Name == name {
				found = append(found, s)
			}
		}
		return len(found) >= n
	}, r.describe, "the collector received no %d spans %q", n, name)
	return found
}

func (r *otlpReceiver) describe() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, s := range r.spans {
		b.WriteString(hex.EncodeToString(s.span.TraceId) + " " + s.span.Name + "\n")
	}
	for _, s := range r.bad {
		b.WriteString("refused: " + s + "\n")
	}
	return b.String()
}

// tracedQuickRun runs `wasmhost run` on the demo server with args, calls
// its tool add under a client trace, and returns the server and upstream
// spans rec received of it.
func tracedQuickRun(t *testing.T, rec *otlpReceiver, args ...string) (srv, up receivedSpan) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // export each span soon, not every 5 s
	args = append(args, "--listen", "127.0.0.1:0", "--name", "demo", "--", os.Args[0], "-test.run=^TestHelperDemoServer$")
	url, token := startQuick(t, args...)
	cs := quickClient(t, url, token)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{
		Name: "add", Arguments: map[string]any{"a": 2, "b": 3},
		Meta: mcp.Meta{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
	})
	require.NoError(t, err)
	require.False(t, res.IsError, "%+v", res.Content)

	// The session's tool and the upstream's have the same name here.
	got := rec.wait(t, "tools/call add", 2)
	require.Len(t, got, 2, rec.describe())
	srv, up = got[0], got[1]
	if srv.span.Kind != tracev1.Span_SPAN_KIND_SERVER {
		srv, up = up, srv
	}
	assert.Equal(t, tracev1.Span_SPAN_KIND_SERVER, srv.span.Kind)
	assert.Equal(t, tracev1.Span_SPAN_KIND_CLIENT, up.span.Kind)
	assert.Equal(t, "0af7651916cd43dd8448eb211c80319c", hex.EncodeToString(srv.span.TraceId))
	assert.Equal(t, "b7ad6b7169203331", hex.EncodeToString(srv.span.ParentSpanId), "the client's trace continued")
	assert.Equal(t, srv.span.SpanId, up.span.ParentSpanId, "the upstream call is the request's child")
	assert.Equal(t, "pipe", attrMap(up.span.Attributes)["network.transport"], "a stdio upstream")
	assert.Equal(t, "default", attrMap(srv.span.Attributes)["wasmhost.session"])
	rec.mu.Lock()
	assert.Empty(t, rec.bad, "no export refused")
	rec.mu.Unlock()
	return srv, up
}

// TestRunExportsTracesToACollector: `wasmhost run --otlp-endpoint URL
// --replica NAME` exports its spans over OTLP/HTTP to a collector at URL,
// with the replica as service.instance.id.
func TestRunExportsTracesToACollector(t *testing.T) {
	rec := newOTLPReceiver(t)
	srv, up := tracedQuickRun(t, rec, "--otlp-endpoint", rec.srv.URL, "--replica", "replica-b")
	for _, s := range []receivedSpan{srv, up} {
		assert.Equal(t, "wasmhost", s.resource["service.name"])
		assert.Equal(t, "replica-b", s.resource["service.instance.id"], "traces carry the replica's identity")
		assert.NotEmpty(t, s.resource["service.version"])
	}
}

// TestRunExportsTracesByEnvironment: without the flag, the OpenTelemetry
// environment variables configure the export (and may rename the
// service).
func TestRunExportsTracesByEnvironment(t *testing.T) {
	rec := newOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rec.srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "gateway-a")
	srv, _ := tracedQuickRun(t, rec, "--replica", "replica-c")
	assert.Equal(t, "gateway-a", srv.resource["service.name"])
	assert.Equal(t, "replica-c", srv.resource["service.instance.id"])
}

// TestRunRefusesABadOTLPEndpoint: a mistyped endpoint is a usage error, not
// traces lost without a word.
func TestRunRefusesABadOTLPEndpoint(t *testing.T) {
	r := runCLI(t, "", "run", "--otlp-endpoint", "127.0.0.1:4318", "--", "true")
	assert.Equal(t, exitUsage, r.code, r.errOut)
	assert.Contains(t, r.errOut, "--otlp-endpoint")
	assert.Contains(t, r.errOut, "http://127.0.0.1:4318")
}
