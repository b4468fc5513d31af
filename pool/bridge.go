package pool

//lint:file-ignore SA1019 sampling, roots and logging are deprecated (SEP-2577) but still used during their deprecation window

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/time/rate"

	"github.com/wasmhost/wasmhost/internal/clip"
)

// A Bridge passes what an upstream sends on its own, outside the answers
// to wasmhost's requests, to the client whose call caused it
// (session.ProgressRelay is the daemon's). The pool's client hands it the
// requests sampling/createMessage, elicitation/create, roots/list and ping,
// and the log messages (notifications/message) it did not already deliver
// where they arrived.
type Bridge interface {
	// Answer answers req, a request of method that the upstream on cs
	// sent on its own, with the answer of the client whose call caused it,
	// or refuses it with an error naming why that client is not known.
	// next answers it as the go-sdk client would (ping).
	Answer(ctx context.Context, cs *mcp.ClientSession, b Bridging, method string, req mcp.Request, next mcp.MethodHandler) (mcp.Result, error)
	// Delivered reports whether the log message req was already passed
	// to the client of the call it was sent during (where it arrived on
	// the connection); the pool logs the others for the operator.
	Delivered(req *mcp.LoggingMessageRequest) bool
}

// Bridging is what a connection lets a Bridge infer.
type Bridging struct {
	// Server is the server's name, for errors.
	Server string
	// Infer is true when a request may go to the one client that has
	// calls in flight on the connection: the server is unpooled (its
	// connection serves one session), or a pooled stdio server, and its
	// entry does not say "bridgeInference": false. A pooled server is
	// then assumed to carry no state of one session's into requests made
	// during another's call.
	Infer bool
	// NoInference says why Infer is false, for the error of a request
	// refused.
	NoInference string
}

// bridging returns what s's connection lets a bridge infer.
func (s Spec) bridging() Bridging {
	b := Bridging{Server: s.Name}
	switch {
	case s.NoBridgeInference:
		b.NoInference = fmt.Sprintf(`server %q has "bridgeInference": false`, s.Name)
	case s.Pooled && s.Command == "":
		b.NoInference = fmt.Sprintf("server %q is pooled and reached over HTTP: only a request on the stream of the call that caused it is passed on", s.Name)
	default:
		b.Infer = true
	}
	return b
}

// The methods of the requests an upstream sends on its own that a Bridge
// answers.
var bridgedMethods = map[string]bool{
	"sampling/createMessage": true,
	"elicitation/create":     true,
	"roots/list":             true,
	"ping":                   true,
}

// bridgeClient sets in opts what the pool's client for s announces and
// does with what the upstream sends on its own, and returns the middleware
// to add to the client (nil: none). Without a bridge nothing is announced
// and requests are refused, as the go-sdk does; log messages always go to
// the operator's log, at most upstreamLogBurst at once and one a second
// after that, each field cut to upstreamLogBytes.
func (e *Entry) bridgeClient(opts *mcp.ClientOptions) mcp.Middleware {
	lim := rate.NewLimiter(rate.Every(time.Second), upstreamLogBurst)
	bridge := e.pool.bridge
	opts.LoggingMessageHandler = func(ctx context.Context, req *mcp.LoggingMessageRequest) {
		if req == nil || req.Params == nil || (bridge != nil && bridge.Delivered(req)) {
			return
		}
		if lim.Allow() {
			p := req.Params
			e.log.Log(ctx, slogLevel(p.Level), "upstream log message (sent outside any client's call)",
				"logger", clip.String(p.Logger, upstreamLogBytes), "level", clip.String(string(p.Level), upstreamLogBytes), "data", clipData(p.Data))
		}
	}
	if bridge == nil {
		return nil
	}
	b := e.spec.bridging()
	if b.Infer || e.spec.Command == "" { // over HTTP a request may come on its call's stream
		opts.Capabilities = &mcp.ClientCapabilities{
			RootsV2:     &mcp.RootCapabilities{},
			Sampling:    &mcp.SamplingCapabilities{},
			Elicitation: &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}, URL: &mcp.URLElicitationCapabilities{}},
		}
	}
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if !bridgedMethods[method] {
				return next(ctx, method, req)
			}
			cs, _ := req.GetSession().(*mcp.ClientSession)
			return bridge.Answer(ctx, cs, b, method, req, next)
		}
	}
}

// upstreamLogBurst is how many log messages an upstream connection may
// have logged for the operator at once.
const upstreamLogBurst = 10

// upstreamLogBytes bounds each field of an upstream's log message in the
// operator's log, as a line of its standard error is bounded (a message
// may be 16 MiB).
const upstreamLogBytes = 2 << 10

// clipData returns the data of an upstream's log message as it is when
// its JSON fits upstreamLogBytes, or else that JSON cut to it.
func clipData(data any) any {
	b, err := json.Marshal(data)
	switch {
	case err != nil:
		return fmt.Sprintf("(data not JSON: %v)", err)
	case len(b) <= upstreamLogBytes:
		return data
	}
	return clip.String(string(b), upstreamLogBytes)
}

// upstreamLogLevel is the level the pool asks a connected upstream that
// announces logging for: every message, each client getting those at or
// above its own level (logging/setLevel is per client).
const upstreamLogLevel mcp.LoggingLevel = "debug"

// setUpstreamLevel asks cs's upstream, when it announces logging and the
// pool has a bridge, to send its log messages from upstreamLogLevel on.
func (e *Entry) setUpstreamLevel(ctx context.Context, cs *mcp.ClientSession) {
	res := cs.InitializeResult()
	if e.pool.bridge == nil || res == nil || res.Capabilities == nil || res.Capabilities.Logging == nil {
		return
	}
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: upstreamLogLevel}); err != nil {
		e.log.Debug("asking the upstream for its log messages", "err", err)
	}
}

// slogLevel maps an MCP log level onto the operator log's.
func slogLevel(l mcp.LoggingLevel) slog.Level {
	switch l {
	case "debug":
		return slog.LevelDebug
	case "info", "notice":
		return slog.LevelInfo
	case "warning":
		return slog.LevelWarn
	}
	return slog.LevelError
}

// bridgingKey is the context key of the Bridging the pool connects a
// client with.
type bridgingKey struct{}

// BridgingOf returns what the connection being made under ctx lets a
// bridge infer, when the pool makes it: a transport wrapper reads it in
// its Connect, to attribute the log messages it reads off the connection.
func BridgingOf(ctx context.Context) (Bridging, bool) {
	b, ok := ctx.Value(bridgingKey{}).(Bridging)
	return b, ok
}
