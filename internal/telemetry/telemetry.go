// Package telemetry exports OpenTelemetry traces of what wasmhost serves:
// one SERVER span per client request a session endpoint answers, a CLIENT
// child span per request it sends upstream, and a span per policy plugin
// call (under a span per reload). Spans follow the OpenTelemetry semantic
// conventions for MCP where they exist (span name "{mcp.method.name}
// {target}", mcp.method.name, mcp.session.id, mcp.protocol.version,
// gen_ai.tool.name, gen_ai.prompt.name, mcp.resource.uri, error.type,
// network.transport); wasmhost's own attributes are named wasmhost.*.
//
// Tracing is off until Start enables it: then Server, Client and the span
// functions cost one atomic load a request, and no span is made. Trace
// context crosses MCP hops in the request's params._meta, under the W3C
// keys "traceparent" and "tracestate", as the MCP semantic conventions
// recommend: a client's is continued, and the upstream request carries
// its CLIENT span's.
//
// jsonrpc.request.id is not recorded: go-sdk v1.8.0 keeps a request's ID
// out of reach of middleware. It reads the OTEL_* environment and sends
// spans over OTLP/HTTP; it imports internal/clip only of wasmhost's own.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cliptext "github.com/wasmhost/wasmhost/internal/clip"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of wasmhost's spans.
const ScopeName = "github.com/wasmhost/wasmhost"

// Config configures Start.
type Config struct {
	// Endpoint is the OTLP/HTTP collector's base URL, as
	// OTEL_EXPORTER_OTLP_ENDPOINT (/v1/traces is appended unless the path
	// already ends with it). "" leaves it to the exporter's environment:
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, then OTEL_EXPORTER_OTLP_ENDPOINT;
	// with neither set (and no Exporter), tracing stays off.
	Endpoint string
	// Version is the resource's service.version.
	Version string
	// Instance is the resource's service.instance.id: the replica's name
	// (wasmhost run --replica). "" leaves it out.
	Instance string
	// Exporter, when not nil, receives every span as it ends, in place of
	// the OTLP exporter (tests: tracetest.NewInMemoryExporter).
	Exporter sdktrace.SpanExporter
}

// state is what Start installed; nil while tracing is off.
type state struct {
	tracer trace.Tracer
}

var (
	current atomic.Pointer[state]
	startMu sync.Mutex // one Start at a time
)

// Enabled reports whether Start enabled tracing, so that a caller can skip
// work only spans need.
func Enabled() bool { return current.Load() != nil }

// configured reports whether cfg, with the environment, asks for traces,
// and the OTLP traces URL a non-empty cfg.Endpoint makes.
func configured(cfg Config) (on bool, tracesURL string, err error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") ||
		strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")), "none") {
		return false, "", nil
	}
	if cfg.Exporter != nil {
		return true, "", nil
	}
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return false, "", fmt.Errorf("telemetry: OTLP endpoint %q: want an http:// or https:// URL such as http://127.0.0.1:4318", cfg.Endpoint)
		}
		if !strings.HasSuffix(u.Path, "/v1/traces") {
			u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
		}
		return true, u.String(), nil
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "", "", nil
}

// Start enables tracing when cfg or the environment configures an
// exporter (see Config.Endpoint; OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none keep it off), and returns the func that
// flushes the spans not yet exported and turns tracing off again. The
// exporter's other OTEL_EXPORTER_OTLP_* variables (headers, timeout,
// compression, TLS certificates) and the SDK's (OTEL_TRACES_SAMPLER,
// OTEL_BSP_*) apply as the OpenTelemetry SDK reads them. The resource is
// service.name wasmhost (OTEL_SERVICE_NAME replaces it), service.version
// cfg.Version and service.instance.id cfg.Instance, with
// OTEL_RESOURCE_ATTRIBUTES added. When nothing configures an exporter,
// Start does nothing and returns a stop that does nothing. Start refuses
// to run while an earlier Start's tracing is on.
func Start(ctx context.Context, cfg Config) (stop func(context.Context) error, err error) {
	nothing := func(context.Context) error { return nil }
	on, tracesURL, err := configured(cfg)
	if err != nil || !on {
		return nothing, err
	}
	startMu.Lock()
	defer startMu.Unlock()
	if current.Load() != nil {
		return nothing, errors.New("telemetry: tracing is already started")
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "wasmhost")}
	if cfg.Version != "" {
		attrs = append(attrs, attribute.String("service.version", cfg.Version))
	}
	if cfg.Instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", cfg.Instance))
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(), resource.WithAttributes(attrs...), resource.WithFromEnv())
	if err != nil {
		return nothing, fmt.Errorf("telemetry: resource: %w", err)
	}
	var proc sdktrace.SpanProcessor
	if cfg.Exporter != nil {
		proc = sdktrace.NewSimpleSpanProcessor(cfg.Exporter)
	} else {
		var opts []otlptracehttp.Option
		if tracesURL != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(tracesURL))
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nothing, fmt.Errorf("telemetry: OTLP exporter: %w", err)
		}
		proc = sdktrace.NewBatchSpanProcessor(exp)
	}
	// Span names and attributes carry what clients send (tool names,
	// URIs, versions): attribute values are cut by the limit below, the
	// part of a span name a client chose by clip, so that no client can
	// make every span megabytes long.
	limits := sdktrace.NewSpanLimits()
	limits.AttributeValueLengthLimit = maxValueLen
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(proc), sdktrace.WithRawSpanLimits(limits))
	st := &state{tracer: tp.Tracer(ScopeName)}
	current.Store(st)
	return func(ctx context.Context) error {
		current.CompareAndSwap(st, nil)
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("telemetry: flushing spans: %w", err)
		}
		return nil
	}, nil
}

// The W3C trace context, carried in _meta.
var propagator = propagation.TraceContext{}

// metaCarrier is a propagation.TextMapCarrier over an MCP _meta object.
type metaCarrier map[string]any

func (m metaCarrier) Get(key string) string {
	s, _ := m[key].(string)
	return s
}

func (m metaCarrier) Set(key, value string) { m[key] = value }

func (m metaCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// params returns req's params, or nil when it has none (a nil pointer in
// the interface included).
func params(req mcp.Request) mcp.Params {
	p := req.GetParams()
	if p == nil {
		return nil
	}
	if v := reflect.ValueOf(p); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil
	}
	return p
}

// maxValueLen bounds, in bytes, each span attribute value and the part of
// a span name a client chose. MCP names are at most 128 bytes; a longer
// one is not served anyway.
const maxValueLen = 256

// clip cuts s to maxValueLen bytes.
func clip(s string) string { return cliptext.String(s, maxValueLen) }

// describe returns the span name of a request for method with params p, and
// the attributes naming its target.
func describe(method string, p mcp.Params) (string, []attribute.KeyValue) {
	attrs := make([]attribute.KeyValue, 1, 10) // room for what Server and Client add
	attrs[0] = attribute.String("mcp.method.name", method)
	switch v := p.(type) {
	case *mcp.CallToolParams:
		if v != nil {
			return method + " " + clip(v.Name), append(attrs, attribute.String("gen_ai.tool.name", v.Name), attribute.String("gen_ai.operation.name", "execute_tool"))
		}
	case *mcp.CallToolParamsRaw: // as a server receives it
		if v != nil {
			return method + " " + clip(v.Name), append(attrs, attribute.String("gen_ai.tool.name", v.Name), attribute.String("gen_ai.operation.name", "execute_tool"))
		}
	case *mcp.GetPromptParams:
		if v != nil {
			return method + " " + clip(v.Name), append(attrs, attribute.String("gen_ai.prompt.name", v.Name))
		}
	case *mcp.ReadResourceParams:
		if v != nil {
			return method, append(attrs, attribute.String("mcp.resource.uri", v.URI))
		}
	case *mcp.SubscribeParams:
		if v != nil {
			return method, append(attrs, attribute.String("mcp.resource.uri", v.URI))
		}
	case *mcp.UnsubscribeParams:
		if v != nil {
			return method, append(attrs, attribute.String("mcp.resource.uri", v.URI))
		}
	}
	return method, attrs
}

// end records the outcome of a request on span and ends it: err, or a tool
// result flagged isError (error.type "tool_error").
func end(span trace.Span, res mcp.Result, err error) {
	if err != nil {
		typ := errorType(err)
		var coded *jsonrpc.Error
		if errors.As(err, &coded) {
			span.SetAttributes(attribute.String("rpc.response.status_code", strconv.FormatInt(coded.Code, 10)))
		}
		span.SetAttributes(attribute.String("error.type", typ))
		span.SetStatus(codes.Error, err.Error())
	} else if r, ok := res.(*mcp.CallToolResult); ok && r != nil && r.IsError {
		span.SetAttributes(attribute.String("error.type", "tool_error"))
		span.SetStatus(codes.Error, "the tool's result is flagged isError")
	}
	span.End()
}

// errorType is err's error.type: a JSON-RPC error's code, else a few low
// cardinality classes.
func errorType(err error) string {
	var coded *jsonrpc.Error
	switch {
	case errors.As(err, &coded):
		return strconv.FormatInt(coded.Code, 10)
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	return "_OTHER"
}

// isNotification reports whether method is a notification, which has no
// answer and gets no span.
func isNotification(method string) bool { return strings.HasPrefix(method, "notifications/") }

// Server returns the receiving middleware of session's endpoint: a SERVER
// span for each client request (notifications get none), continuing the
// trace context of the request's _meta, with the session's name as
// wasmhost.session. The upstream requests its handler sends get CLIENT
// spans under it (Client). It must be the outermost middleware, to see
// the errors the client is answered with.
func Server(session string) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			st := current.Load()
			if st == nil || isNotification(method) {
				return next(ctx, method, req)
			}
			p := params(req)
			if p != nil {
				if meta := p.GetMeta(); meta != nil {
					ctx = propagator.Extract(ctx, metaCarrier(meta))
				}
			}
			name, attrs := describe(method, p)
			attrs = append(attrs, attribute.String("wasmhost.session", session))
			if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss != nil {
				if id := ss.ID(); id != "" {
					attrs = append(attrs, attribute.String("mcp.session.id", id))
				}
				if ip := ss.InitializeParams(); ip != nil && ip.ProtocolVersion != "" {
					attrs = append(attrs, attribute.String("mcp.protocol.version", ip.ProtocolVersion))
				}
			}
			if extra := req.GetExtra(); extra != nil && extra.Header != nil {
				attrs = append(attrs, attribute.String("network.transport", "tcp"), attribute.String("network.protocol.name", "http"))
			} else {
				attrs = append(attrs, attribute.String("network.transport", "pipe"))
			}
			ctx, span := st.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
			res, err := next(ctx, method, req)
			end(span, res, err)
			return res, err
		}
	}
}

// Client returns the sending middleware of an upstream connection to
// server over transport (pool.Spec.Transport: "stdio" is a pipe, any
// other a TCP connection): a CLIENT span for each
// request sent on behalf of a traced one (a request the connection makes
// on its own, a list or a ping, gets none), named wasmhost.server, whose
// trace context the request carries in its _meta (a copy of it: the map
// given is not changed).
func Client(server, transport string) mcp.Middleware {
	netTransport := "tcp"
	if transport == "stdio" {
		netTransport = "pipe"
	}
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			st := current.Load()
			if st == nil || isNotification(method) || !trace.SpanContextFromContext(ctx).IsValid() {
				return next(ctx, method, req)
			}
			p := params(req)
			name, attrs := describe(method, p)
			attrs = append(attrs, attribute.String("wasmhost.server", server), attribute.String("network.transport", netTransport))
			if cs, ok := req.GetSession().(*mcp.ClientSession); ok && cs != nil {
				if id := cs.ID(); id != "" {
					attrs = append(attrs, attribute.String("mcp.session.id", id))
				}
				if ir := cs.InitializeResult(); ir != nil && ir.ProtocolVersion != "" {
					attrs = append(attrs, attribute.String("mcp.protocol.version", ir.ProtocolVersion))
				}
			}
			ctx, span := st.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
			if p != nil {
				meta := maps.Clone(p.GetMeta())
				if meta == nil {
					meta = make(map[string]any, 2)
				}
				delete(meta, "traceparent") // the caller's hop, not this one
				delete(meta, "tracestate")
				propagator.Inject(ctx, metaCarrier(meta))
				p.SetMeta(meta)
			}
			res, err := next(ctx, method, req)
			end(span, res, err)
			return res, err
		}
	}
}

// Reload starts an INTERNAL span "wasmhost.reload" for a config reload
// made by trigger; the policy calls it makes are its children. end records
// err and ends it.
func Reload(ctx context.Context, trigger string) (_ context.Context, end func(error)) {
	st := current.Load()
	if st == nil {
		return ctx, func(error) {}
	}
	ctx, span := st.tracer.Start(ctx, "wasmhost.reload", trace.WithAttributes(attribute.String("wasmhost.reload.trigger", trigger)))
	return ctx, func(err error) { endInternal(span, err) }
}

// Policy starts an INTERNAL span "wasmhost.policy {export}" for one call
// of plugin's export; items is how many items a batch call carries (0: not
// a batch). end records err and ends it.
func Policy(ctx context.Context, plugin, export string, items int) (_ context.Context, end func(error)) {
	st := current.Load()
	if st == nil {
		return ctx, func(error) {}
	}
	attrs := []attribute.KeyValue{
		attribute.String("wasmhost.policy.plugin", plugin),
		attribute.String("wasmhost.policy.export", export),
	}
	if items > 0 {
		attrs = append(attrs, attribute.Int("wasmhost.policy.items", items))
	}
	ctx, span := st.tracer.Start(ctx, "wasmhost.policy "+export, trace.WithAttributes(attrs...))
	return ctx, func(err error) { endInternal(span, err) }
}

// endInternal records err on an internal span and ends it.
func endInternal(span trace.Span, err error) {
	if err != nil {
		span.SetAttributes(attribute.String("error.type", errorType(err)))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// shutdownTimeout bounds the final flush of StopWithin.
const shutdownTimeout = 5 * time.Second

// StopWithin calls stop with a context bounded to a few seconds, so a
// collector that is down cannot hold a process's exit.
func StopWithin(stop func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	return stop(ctx)
}
