package session

//lint:file-ignore SA1019 sampling, roots and logging are deprecated (SEP-2577) but still used during their deprecation window

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/pool"
)

// A bridgeCall is one forwarded call during which its upstream may ask the
// calling client something (sampling, elicitation, roots, ping) or send it
// log messages. The call's context carries it (bridgeKey) down to the
// relay's connection wrappers and taps, which see where each message
// arrives.
type bridgeCall struct {
	ss    *mcp.ServerSession // the calling client
	cs    *mcp.ClientSession // the upstream connection the call went out on
	ctx   context.Context    // the call's: what is sent to the client goes on its stream
	token string             // names the call in the marks of the relay's taps

	// asking counts the upstream's questions to the client under way
	// (see Answer); at most maxInputRequests at once.
	asking atomic.Int32

	mu        sync.Mutex
	q         chan func() // log messages to send, in order; closed at end
	queued    int         // bytes of the log messages in q (maxQueuedLogBytes)
	done      chan struct{}
	forgotten bool        // answered, or given up on givenUpFor ago: in flight no more
	expire    *time.Timer // forgets the call, given up on, givenUpFor later
}

// givenUpFor bounds how long a call its client gave up on still counts
// among the calls in flight on its connection (see sole) while its
// upstream does not answer it: a server that follows the protocol sends no
// answer to a cancelled request (the TypeScript SDK's never does), and a
// connection that died never will, so until an answer such a call would
// count, and stay in memory, for as long as the connection lives.
var givenUpFor = time.Minute

// bridgeKey is the context key of a forwarded call's *bridgeCall.
type bridgeKey struct{}

// callOf returns the bridgeCall ctx carries, or nil.
func callOf(ctx context.Context) *bridgeCall {
	c, _ := ctx.Value(bridgeKey{}).(*bridgeCall)
	return c
}

// ended reports whether the call has returned.
func (c *bridgeCall) ended() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.q == nil
}

// isForgotten reports whether the call is in flight no more (answered).
func (c *bridgeCall) isForgotten() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.forgotten
}

// maxQueuedLogBytes bounds the bytes of the log messages queued for one
// call's client (their params as the upstream sent them): one message may
// be as large as the go-sdk reads (16 MiB), and progressBuffer of them
// would be 1 GiB held for a slow client.
const maxQueuedLogBytes = 16 << 20

// log queues p, whose params took size bytes, to be sent to the calling
// client at its own level (logging/setLevel is per client), and reports
// whether the call still ran. A client too slow to take them loses log
// messages, as progress: past progressBuffer messages or
// maxQueuedLogBytes queued.
func (c *bridgeCall) log(p *mcp.LoggingMessageParams, size int) bool {
	p = &mcp.LoggingMessageParams{Meta: dropReserved(p.Meta), Level: p.Level, Logger: p.Logger, Data: p.Data}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.q == nil {
		return false
	}
	if c.queued+size > maxQueuedLogBytes {
		return true
	}
	send := func() {
		_ = c.ss.Log(c.ctx, p)
		c.mu.Lock()
		c.queued -= size
		c.mu.Unlock()
	}
	select {
	case c.q <- send:
		c.queued += size
	default:
	}
	return true
}

// beginBridge registers a call to cs from the client ss and returns the
// context to make it with, and the func that ends it once the call has
// returned, after every log message it was sent has been passed on.
func (r *ProgressRelay) beginBridge(ctx context.Context, cs *mcp.ClientSession, ss *mcp.ServerSession) (context.Context, func()) {
	if r == nil || ss == nil || cs == nil {
		return ctx, func() {}
	}
	c := &bridgeCall{ss: ss, cs: cs, token: rand.Text(), q: make(chan func(), progressBuffer), done: make(chan struct{})}
	ctx = context.WithValue(ctx, bridgeKey{}, c)
	c.ctx = ctx
	q := c.q
	go func() {
		defer close(c.done)
		for f := range q {
			f()
		}
	}()
	r.bmu.Lock()
	if r.conns[cs] == nil {
		r.conns[cs] = make(map[*bridgeCall]struct{})
	}
	r.conns[cs][c] = struct{}{}
	r.byToken[c.token] = c
	r.bmu.Unlock()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			r.bmu.Lock()
			if ctx.Err() == nil {
				r.dropLocked(c)
			} else { // given up on: the upstream may still work on it (see sole)
				c.mu.Lock()
				if !c.forgotten {
					c.expire = time.AfterFunc(givenUpFor, func() { r.answered(c) })
				}
				c.mu.Unlock()
			}
			delete(r.byToken, c.token)
			r.bmu.Unlock()
			c.mu.Lock()
			close(c.q)
			c.q = nil
			c.mu.Unlock()
			<-c.done
		})
	}
}

// dropLocked forgets c, a call whose upstream answered (or that was never
// given up on), from the calls in flight on its connection. r.bmu is held.
func (r *ProgressRelay) dropLocked(c *bridgeCall) {
	delete(r.conns[c.cs], c)
	if len(r.conns[c.cs]) == 0 {
		delete(r.conns, c.cs)
	}
}

// answered forgets c, once its upstream's answer (or the end of the
// stream that would carry it) has arrived, or givenUpFor after its client
// gave up on it.
func (r *ProgressRelay) answered(c *bridgeCall) {
	c.mu.Lock()
	c.forgotten = true
	if c.expire != nil {
		c.expire.Stop()
	}
	c.mu.Unlock()
	r.bmu.Lock()
	r.dropLocked(c)
	r.bmu.Unlock()
}

// sole returns the call of the one client that has calls in flight among
// calls, or nil and why there is none. A call its client gave up on (it
// ended before its upstream answered) still counts, for givenUpFor at
// most: the upstream may still be working on it, so its questions would
// otherwise go to another client's call.
func sole(calls func(yield func(*bridgeCall) bool)) (*bridgeCall, string) {
	var one *bridgeCall
	clients := map[*mcp.ServerSession]bool{}
	for c := range calls {
		if c.isForgotten() {
			continue
		}
		clients[c.ss] = true
		if !c.ended() {
			one = c
		}
	}
	switch {
	case len(clients) > 1:
		return nil, fmt.Sprintf("calls of %d clients are in flight on the connection, and any could have caused it", len(clients))
	case one == nil:
		return nil, "no client has a call in flight on the connection"
	}
	return one, ""
}

// inferred is the call of the one client with calls in flight on cs.
func (r *ProgressRelay) inferred(cs *mcp.ClientSession) (*bridgeCall, string) {
	r.bmu.Lock()
	defer r.bmu.Unlock()
	return sole(func(yield func(*bridgeCall) bool) {
		for c := range r.conns[cs] {
			if !yield(c) {
				return
			}
		}
	})
}

// The values of the relay's mark (ProgressRelay.mark) in a message's
// _meta: a tap read it on the stream of the call named after markCall, or
// a connection wrapper read it while only that call's client had calls in
// flight; a wrapper read it while no one client did (markNone, then why);
// or a tap delivered it already (markDelivered, log messages).
const (
	markCall      = "call:"
	markNone      = "none:"
	markDelivered = "delivered"
)

// takeMark removes the relay's mark from p's _meta and returns it ("" when
// there is none). Only the relay's taps set it: its key is a secret of the
// relay's, which no upstream or client ever sees.
func (r *ProgressRelay) takeMark(p mcp.Params) string {
	if p == nil || reflect.ValueOf(p).IsNil() { // ping and roots/list may come without params
		return ""
	}
	m := p.GetMeta()
	v, ok := m[r.mark]
	if !ok {
		return ""
	}
	delete(m, r.mark)
	s, _ := v.(string)
	return s
}

// Delivered implements pool.Bridge: it reports whether a tap passed the
// log message on where it arrived, on the stream of the call it came
// during.
func (r *ProgressRelay) Delivered(req *mcp.LoggingMessageRequest) bool {
	return req != nil && req.Params != nil && r.takeMark(req.Params) == markDelivered
}

// Answer implements pool.Bridge: req goes to the client whose call caused
// it when that is known (see docs/protocol.md):
// the call on whose HTTP stream it arrived, or, when b allows inferring,
// the one client with calls in flight on cs when it arrived (a connection
// wrapper marks it as it reads it; else when Answer runs). Otherwise it is refused with
// an error naming why, except that a ping is answered by wasmhost and
// roots/list gets an empty list.
func (r *ProgressRelay) Answer(ctx context.Context, cs *mcp.ClientSession, b pool.Bridging, method string, req mcp.Request, next mcp.MethodHandler) (mcp.Result, error) {
	var call *bridgeCall
	var why string
	switch mark := r.takeMark(req.GetParams()); {
	case strings.HasPrefix(mark, markCall):
		r.bmu.Lock()
		call = r.byToken[strings.TrimPrefix(mark, markCall)]
		r.bmu.Unlock()
		if call == nil || call.cs != cs || call.ended() {
			call, why = nil, "the call it came during has ended"
		}
	case strings.HasPrefix(mark, markNone):
		why = strings.TrimPrefix(mark, markNone)
	case !b.Infer:
		why = b.NoInference
	default:
		call, why = r.inferred(cs)
	}
	if call == nil {
		switch method {
		case "ping":
			return next(ctx, method, req)
		case "roots/list":
			return &mcp.ListRootsResult{Roots: []*mcp.Root{}}, nil
		}
		return nil, refusal(b.Server, method, why)
	}
	// Each question holds a goroutine, and an entry of the client's
	// connection, until the client (its user, say) answers: an upstream
	// asking without bound during one call would pin as many as it liked.
	if call.asking.Add(1) > maxInputRequests {
		call.asking.Add(-1)
		return nil, refusal(b.Server, method, fmt.Sprintf("the call it came during has %d questions to its client under way, the most wasmhost passes on", maxInputRequests))
	}
	defer call.asking.Add(-1)
	// Asked on the call's own context, the question goes on the call's
	// stream to the client; it ends when the call or the upstream's
	// request does.
	cctx, cancel := context.WithCancel(call.ctx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	caps := clientCaps(call.ss)
	switch method {
	case "sampling/createMessage":
		if caps.Sampling == nil {
			return nil, refusal(b.Server, method, "the calling client does not support sampling")
		}
		return call.ss.CreateMessageWithTools(cctx, req.(*mcp.CreateMessageWithToolsRequest).Params)
	case "elicitation/create":
		if caps.Elicitation == nil {
			return nil, refusal(b.Server, method, "the calling client does not support elicitation")
		}
		return call.ss.Elicit(cctx, req.(*mcp.ElicitRequest).Params)
	case "roots/list":
		if caps.RootsV2 == nil {
			return &mcp.ListRootsResult{Roots: []*mcp.Root{}}, nil
		}
		p, _ := req.GetParams().(*mcp.ListRootsParams)
		return call.ss.ListRoots(cctx, p)
	case "ping":
		if err := call.ss.Ping(cctx, nil); err != nil {
			return nil, err
		}
		return next(ctx, method, req)
	}
	return nil, refusal(b.Server, method, "not a request wasmhost passes on")
}

// clientCaps returns the capabilities ss's client announced (none when it
// announced nothing).
func clientCaps(ss *mcp.ServerSession) *mcp.ClientCapabilities {
	if ip := ss.InitializeParams(); ip != nil && ip.Capabilities != nil {
		return ip.Capabilities
	}
	return &mcp.ClientCapabilities{}
}

// refusal is the error an upstream gets for a request of method that
// wasmhost does not pass on, saying why. (The go-sdk would replace the
// message of a "method not found" error with its own.)
func refusal(server, method, why string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
		Message: fmt.Sprintf("wasmhost: %s from server %q not passed on to a client: %s", method, server, why)}
}

// bridged reports whether a tap marks the request method (one a Bridge
// answers).
func bridged(method string) bool {
	switch method {
	case "sampling/createMessage", "elicitation/create", "roots/list", "ping":
		return true
	}
	return false
}

// markMessage returns data, an event's JSON-RPC message read by a tap on
// the stream of call, marked for the pool's client: a request a Bridge
// answers names call; a log message is passed to call's client now, and
// marked delivered. It returns nil for any other message, and for a log
// message of a call that has ended (the operator's log gets it).
func (r *ProgressRelay) markMessage(call *bridgeCall, data []byte) []byte {
	if !bytes.Contains(data, []byte(`"method"`)) {
		return nil // an answer: most events on a call's stream
	}
	msg, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		return nil
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok {
		return nil
	}
	var mark string
	switch {
	case req.Method == "notifications/message" && !req.IsCall():
		var p mcp.LoggingMessageParams
		if json.Unmarshal(req.Params, &p) != nil || !call.log(&p, len(req.Params)) {
			return nil
		}
		mark = markDelivered
	case req.IsCall() && bridged(req.Method):
		mark = markCall + call.token
	default:
		return nil
	}
	if !r.setMark(req, mark) {
		return nil
	}
	out, err := jsonrpc.EncodeMessage(req)
	if err != nil {
		return nil
	}
	return out
}

// setMark puts the relay's mark in req's _meta, and reports whether it
// could (req's params are an object, or none: left out or null).
func (r *ProgressRelay) setMark(req *jsonrpc.Request, mark string) bool {
	params := map[string]json.RawMessage{}
	if len(req.Params) > 0 && json.Unmarshal(req.Params, &params) != nil {
		return false
	}
	if params == nil { // "params": null, which an upstream may send
		params = map[string]json.RawMessage{}
	}
	meta := map[string]any{}
	if raw, ok := params["_meta"]; ok && json.Unmarshal(raw, &meta) != nil {
		return false
	}
	if meta == nil {
		meta = map[string]any{}
	}
	meta[r.mark] = mark
	m, err1 := json.Marshal(meta)
	params["_meta"] = m
	p, err2 := json.Marshal(params)
	if err1 != nil || err2 != nil {
		return false
	}
	req.Params = p
	return true
}

// soleCall returns the call of the one client with calls in flight among
// calls, or nil and why there is none.
func soleCall(calls map[jsonrpc.ID]*bridgeCall) (*bridgeCall, string) {
	return sole(func(yield func(*bridgeCall) bool) {
		for _, c := range calls {
			if !yield(c) {
				return
			}
		}
	})
}

// logCall returns the call of the one client with calls in flight among
// calls, when b allows inferring it, or nil.
func logCall(b pool.Bridging, calls map[jsonrpc.ID]*bridgeCall) *bridgeCall {
	if !b.Infer {
		return nil
	}
	c, _ := soleCall(calls)
	return c
}

// keepLevels keeps the level each client sets with logging/setLevel, which
// the go-sdk keeps to itself, so that a call forwarded to an upstream of
// protocol 2026-07-28, where the level goes with each request, carries its
// caller's (forwardMeta).
func (e *Endpoint) keepLevels(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if err != nil || method != "logging/setLevel" {
			return res, err
		}
		p, _ := req.GetParams().(*mcp.SetLoggingLevelParams)
		ss, _ := req.GetSession().(*mcp.ServerSession)
		if p == nil || ss == nil {
			return res, err
		}
		if _, had := e.levels.Swap(ss, p.Level); !had {
			go func() {
				_ = ss.Wait()
				e.levels.Delete(ss)
			}()
		}
		return res, err
	}
}

// level returns the level ss set with logging/setLevel ("" when none).
func (e *Endpoint) level(ss *mcp.ServerSession) mcp.LoggingLevel {
	if ss == nil {
		return ""
	}
	l, _ := e.levels.Load(ss)
	level, _ := l.(mcp.LoggingLevel)
	return level
}
