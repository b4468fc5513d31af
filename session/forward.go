package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// lookup returns the route of exposed in k at this instant.
func (e *Endpoint) lookup(k *kind, exposed string) (route, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := k.routes[exposed]
	return r, ok
}

// begin looks exposed up in k for a call to forward and, when it is found,
// admits the call (the caller then calls e.calls.Leave). Once the endpoint
// drains, it returns an error wrapping ErrDraining instead.
func (e *Endpoint) begin(k *kind, exposed string) (_ route, ok bool, err error) {
	if !e.calls.Enter() {
		return route{}, false, fmt.Errorf("session %q: %w", e.name, ErrDraining)
	}
	r, ok := e.lookup(k, exposed)
	if !ok {
		e.calls.Leave()
	}
	return r, ok, nil
}

// still reports whether exposed still routes to r in k. A call checks it
// once target has given it its upstream: Options.Upstream gives none while
// the session's registrations lag its settings (pool.Handle.Conn), so a
// call that found its name in registrations a reload had already made
// stale, and got its upstream only once they caught up, is refused here
// rather than forwarded under the old projection.
func (e *Endpoint) still(k *kind, exposed string, r route) bool {
	cur, ok := e.lookup(k, exposed)
	return ok && cur == r
}

// unknown is the refusal of a name (or URI) k does not have.
func unknown(k *kind, name string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown %s %q", k.name, name)}
}

// target returns the upstream for server and a context for a call with
// extra, bounded by the server's timeout (when it has one) and cancelled
// when Drain cuts calls short or the call's answer can no longer reach its
// client (see HTTPHandler), or an error wrapping ErrUnavailable (or
// ErrDraining, when Drain has already cut calls short).
func (e *Endpoint) target(ctx context.Context, extra *mcp.RequestExtra, server string) (*mcp.ClientSession, context.Context, context.CancelFunc, error) {
	t := e.upstream(server)
	if t.Conn == nil {
		return nil, nil, nil, e.notReady(server)
	}
	var cancel context.CancelFunc
	if t.Timeout > 0 {
		ctx, cancel = context.WithTimeout(context.WithValue(ctx, callTimeoutKey{}, t.Timeout), t.Timeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	stop := context.AfterFunc(e.abort, cancel) // Drain cutting calls short
	stopCarrier := func() bool { return true }
	carrier := e.carriers.of(extra)
	if carrier != nil {
		stopCarrier = context.AfterFunc(carrier.ctx, cancel) // the client gone
	}
	if err := e.cutShortError("server %q", server); err != nil {
		// AfterFunc cancels in a goroutine of its own: the call must not
		// reach the upstream before that.
		stop()
		stopCarrier()
		cancel()
		return nil, nil, nil, err
	}
	if carrier != nil && carrier.w != nil {
		carrier.w.startCall() // its answer may take a while: keep its stream alive
	}
	return t.Conn, ctx, func() { stop(); stopCarrier(); cancel() }, nil
}

// notReady is the error of a call (or subscription) to server while it has
// no connection: one being made or remade.
func (e *Endpoint) notReady(server string) error {
	return fmt.Errorf("session %q, server %q: %w (connecting or restarting; try again)", e.name, server, ErrUnavailable)
}

// forwardTool serves tools/call.
func (e *Endpoint) forwardTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	exposed := req.Params.Name
	r, ok, err := e.begin(&e.tools, exposed)
	if err != nil {
		return errorResult(err), nil
	}
	if !ok {
		return nil, unknown(&e.tools, exposed)
	}
	defer e.calls.Leave()
	cs, ctx, cancel, err := e.target(ctx, req.Extra, r.server)
	if err != nil {
		e.observe(r.server, "tools/call", time.Time{}, failureOutcome(nil, err, false))
		return errorResult(err), nil
	}
	defer cancel()
	if !e.still(&e.tools, exposed, r) {
		return nil, unknown(&e.tools, exposed)
	}
	params := &mcp.CallToolParams{
		Name:           r.name,
		Meta:           forwardMeta(cs, req.Session, req.Params.Meta, e.level(req.Session)),
		InputResponses: req.Params.InputResponses,
		RequestState:   req.Params.RequestState,
	}
	if len(req.Params.Arguments) > 0 {
		params.Arguments = req.Params.Arguments
	}
	res, start, err := send(e, ctx, cs, req.Session, req.Params.GetProgressToken(), params, cs.CallTool)
	if err != nil {
		ferr, upstream := e.callFailure(ctx, err, r.server, "tool", exposed)
		e.observe(r.server, "tools/call", start, failureOutcome(ctx.Err(), ferr, upstream))
		switch {
		case upstream:
			return nil, ferr
		case errors.Is(ferr, ErrUnavailable) && ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
			return nil, err // the client went away or cancelled
		}
		return errorResult(ferr), nil
	}
	if res.IsError {
		e.observe(r.server, "tools/call", start, OutcomeToolError)
	} else {
		e.observe(r.server, "tools/call", start, OutcomeOK)
	}
	res.Meta = dropReserved(res.Meta)
	return res, nil
}

// forwardPrompt serves prompts/get.
func (e *Endpoint) forwardPrompt(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	exposed := req.Params.Name
	r, ok, err := e.begin(&e.prompts, exposed)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, unknown(&e.prompts, exposed)
	}
	defer e.calls.Leave()
	cs, ctx, cancel, err := e.target(ctx, req.Extra, r.server)
	if err != nil {
		e.observe(r.server, "prompts/get", time.Time{}, failureOutcome(nil, err, false))
		return nil, err
	}
	defer cancel()
	if !e.still(&e.prompts, exposed, r) {
		return nil, unknown(&e.prompts, exposed)
	}
	params := &mcp.GetPromptParams{
		Name:           r.name,
		Arguments:      req.Params.Arguments,
		Meta:           forwardMeta(cs, req.Session, req.Params.Meta, e.level(req.Session)),
		InputResponses: req.Params.InputResponses,
		RequestState:   req.Params.RequestState,
	}
	res, start, err := send(e, ctx, cs, req.Session, req.Params.GetProgressToken(), params, cs.GetPrompt)
	if err != nil {
		ferr, upstream := e.callFailure(ctx, err, r.server, "prompt", exposed)
		e.observe(r.server, "prompts/get", start, failureOutcome(ctx.Err(), ferr, upstream))
		return nil, ferr
	}
	e.observe(r.server, "prompts/get", start, OutcomeOK)
	res.Meta = dropReserved(res.Meta)
	return res, nil
}

// forwardResource serves resources/read.
func (e *Endpoint) forwardResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	return e.read(ctx, req, &e.resources, req.Params.URI)
}

// read forwards resources/read to the server that key (a resource's URI or
// a template's URI template) routes to in k.
func (e *Endpoint) read(ctx context.Context, req *mcp.ReadResourceRequest, k *kind, key string) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	r, ok, err := e.begin(k, key)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	defer e.calls.Leave()
	cs, ctx, cancel, err := e.target(ctx, req.Extra, r.server)
	if err != nil {
		e.observe(r.server, "resources/read", time.Time{}, failureOutcome(nil, err, false))
		return nil, err
	}
	defer cancel()
	if !e.still(k, key, r) {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	params := &mcp.ReadResourceParams{
		URI:            uri,
		Meta:           forwardMeta(cs, req.Session, req.Params.Meta, e.level(req.Session)),
		InputResponses: req.Params.InputResponses,
		RequestState:   req.Params.RequestState,
	}
	res, start, err := send(e, ctx, cs, req.Session, req.Params.GetProgressToken(), params, cs.ReadResource)
	if err != nil {
		ferr, upstream := e.callFailure(ctx, err, r.server, "resource", uri)
		e.observe(r.server, "resources/read", start, failureOutcome(ctx.Err(), ferr, upstream))
		return nil, ferr
	}
	e.observe(r.server, "resources/read", start, OutcomeOK)
	res.Meta = dropReserved(res.Meta)
	return res, nil
}

// send makes one call forwarded to the upstream connection cs for the
// client session ss: it relays the call's progress (token) and what the
// upstream sends on its own while the call runs, and returns the call's
// answer and when it went out.
func send[P progressParams, R any](e *Endpoint, ctx context.Context, cs *mcp.ClientSession, ss *mcp.ServerSession, token any, params P, call func(context.Context, P) (R, error)) (R, time.Time, error) {
	end := e.relayProgress(ctx, ss, token, params)
	defer end()
	bctx, endBridge := e.relay.beginBridge(ctx, cs, ss)
	defer endBridge()
	start := time.Now()
	res, err := call(bctx, params)
	if err == nil {
		if err = checkInputs(res); err != nil {
			var none R
			return none, start, err
		}
	}
	return res, start, err
}

// callFailure sorts out err, the failure of a call forwarded to server
// under ctx, the call's context from target (what is "tool", "prompt" or
// "resource", name the name or URI the client used): the upstream's own
// JSON-RPC error is returned as it is, with upstream true, and so is an
// answer of too many questions (an *inputFlood), named; any other
// failure is named, wrapping ErrDraining when Drain cut the call short,
// ErrTimeout when the server's timeout ended it, and ErrUnavailable
// otherwise.
func (e *Endpoint) callFailure(ctx context.Context, err error, server, what, name string) (_ error, upstream bool) {
	if werr := upstreamError(err); werr != nil {
		return werr, true
	}
	if flood := (*inputFlood)(nil); errors.As(err, &flood) {
		e.log.Warn("upstream answered a call with more questions than are passed on; the call fails", "server", server, what, name, "err", err)
		return fmt.Errorf("session %q, server %q: %s %q: %w", e.name, server, what, name, err), true
	}
	if cerr := e.cutShortError("server %q: %s %q", server, what, name); cerr != nil {
		return cerr, false
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The timeout the call ran under: the server's may have changed
		// since, or its binding gone.
		timeout, _ := ctx.Value(callTimeoutKey{}).(time.Duration)
		// Only the client hears of it otherwise: a server that hangs is
		// the operator's to look at.
		e.log.Warn("upstream call timed out; the upstream request was cancelled", "server", server, what, name, "timeout", timeout)
		return fmt.Errorf("session %q, server %q: %s %q: %w (the server entry's \"timeout\", %s); the upstream request was cancelled",
			e.name, server, what, name, ErrTimeout, timeout), false
	}
	return fmt.Errorf("session %q, server %q: %s %q: %w: %v", e.name, server, what, name, ErrUnavailable, e.redact(err)), false
}

// callTimeoutKey is the context key of the timeout target bounded a call
// by (a time.Duration), for callFailure to name.
type callTimeoutKey struct{}

// progressParams are request params that carry a progress token.
type progressParams interface {
	SetProgressToken(any)
}

// relayProgress, when the client asked for progress (token != nil) and a
// relay is configured, gives params a fresh upstream token whose progress
// notifications are sent to ss with the client's token. The returned func
// ends the relay after the call, once every notification received before
// the response has been passed on.
func (e *Endpoint) relayProgress(ctx context.Context, ss *mcp.ServerSession, token any, params progressParams) func() {
	if token == nil || e.relay == nil || ss == nil {
		return func() {}
	}
	upTok, end := e.relay.begin(func(p *mcp.ProgressNotificationParams) {
		err := ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			Meta:          dropReserved(maps.Clone(p.Meta)),
			ProgressToken: token,
			Progress:      p.Progress,
			Total:         p.Total,
			Message:       p.Message,
		})
		if err != nil {
			e.log.Debug("relaying progress", "err", err)
		}
	})
	params.SetProgressToken(upTok)
	return end
}

// upstreamError returns the upstream's own JSON-RPC error inside err, to be
// relayed unchanged, or nil when err is a transport failure. The go-sdk's
// client reports a request its transport could not deliver (an HTTP
// upstream that is gone, say) with a JSON-RPC error of its own making,
// jsonrpc2.ErrRejected: that one is a transport failure too, and the
// client gets the message that names the server.
func upstreamError(err error) *jsonrpc.Error {
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) {
		return nil
	}
	if werr.Code == rejectedCode && werr.Message == rejectedMessage {
		return nil
	}
	return werr
}

// The code and message of the go-sdk's jsonrpc2.ErrRejected (internal to
// the go-sdk, so matched by value).
const (
	rejectedCode    = -32005
	rejectedMessage = "rejected by transport"
)

// errorResult is a tool result reporting err to the client (and its model).
func errorResult(err error) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: "wasmhost: " + err.Error()}},
	}
}
