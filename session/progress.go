package session

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/pool"
)

// progressBuffer is how many progress notifications of one call may wait
// to be passed on; more are dropped (progress is advisory).
const progressBuffer = 64

// tokenPrefix starts every progress token a relay hands to an upstream.
const tokenPrefix = "wasmhost-progress-"

// A ProgressRelay routes upstream notifications/progress back to the client
// request that asked for them. A forwarded request carries a token of the
// relay's instead of the client's (clients of different sessions may pick
// the same token, and they share one upstream connection). The token is
// random (crypto/rand.Text, 130 bits): only the upstream the call went to
// learns it, so no other upstream can send progress into a call it does
// not serve, whatever tokens it tries. The relay reads the upstream
// connection's incoming messages, recognises its tokens, and hands each
// notification to the waiting call, which sends it to its client with the
// client's token.
//
// The relay hears an upstream's progress where it arrives, in wire order,
// before the result of the call it belongs to, so none is lost:
// [ProgressRelay.WrapTransport] and [ProgressRelay.Dialer] wrap stdio, IO
// and in-memory connections, and put a tap on the HTTP client of streamable
// HTTP and HTTP+SSE transports that reads the server-sent event streams as
// their bytes pass to the go-sdk. (The go-sdk's HTTP connections cannot be
// wrapped themselves: the client passes them its session state through an
// unexported method.) For transports it cannot wrap, the relay is also the
// upstream client's progress handler ([ProgressRelay.Handle]); the go-sdk
// runs that handler asynchronously, so there a notification handled only
// after its call returned is dropped. A ProgressRelay is safe for
// concurrent use and may be shared by every endpoint of a daemon.
//
// The relay is also the pool's [pool.Bridge]: it passes the requests and
// log messages an upstream sends on its own to the client whose call
// caused them (bridge.go). Its wrappers and taps see where each arrives:
// on the HTTP stream of a call, or on a stdio connection while one
// client's calls are in flight.
type ProgressRelay struct {
	mu    sync.Mutex
	calls map[string]*progressCall

	// mark is the _meta key of the marks the taps put on messages for
	// the pool's client (bridge.go): random, so that no upstream can
	// forge one.
	mark    string
	bmu     sync.Mutex
	conns   map[*mcp.ClientSession]map[*bridgeCall]struct{} // calls in flight by upstream connection
	byToken map[string]*bridgeCall
}

var _ pool.Bridge = (*ProgressRelay)(nil)

// A progressCall is one call waiting for progress.
type progressCall struct {
	ch   chan *mcp.ProgressNotificationParams
	wire bool // a wrapper or tap delivered its progress: Handle's copies are repeats
}

// NewProgressRelay returns an empty relay.
func NewProgressRelay() *ProgressRelay {
	return &ProgressRelay{
		calls:   make(map[string]*progressCall),
		mark:    "wasmhost-bridge-" + rand.Text(),
		conns:   make(map[*mcp.ClientSession]map[*bridgeCall]struct{}),
		byToken: make(map[string]*bridgeCall),
	}
}

// begin registers one call: notifications for the returned token are passed
// to send, in order, on a goroutine of the call's own. end unregisters the
// token and returns once every notification already received was sent.
func (r *ProgressRelay) begin(send func(*mcp.ProgressNotificationParams)) (token string, end func()) {
	ch := make(chan *mcp.ProgressNotificationParams, progressBuffer)
	token = tokenPrefix + rand.Text()
	r.mu.Lock()
	r.calls[token] = &progressCall{ch: ch}
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for p := range ch {
			send(p)
		}
	}()
	var once sync.Once
	return token, func() {
		once.Do(func() {
			r.mu.Lock()
			delete(r.calls, token)
			close(ch)
			r.mu.Unlock()
			<-done
		})
	}
}

// Pending returns how many calls wait for progress (for tests and state).
func (r *ProgressRelay) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// deliver hands p to its call and reports whether the token was the
// relay's (then the message is consumed, whether or not a call still waits).
// wire is true when a transport wrapper or tap read p off the connection;
// from then on the go-sdk handler's copies of that call's notifications
// (Handle, wire false) are repeats and are passed over.
func (r *ProgressRelay) deliver(p *mcp.ProgressNotificationParams, wire bool) bool {
	tok, ok := p.ProgressToken.(string)
	if !ok || len(tok) <= len(tokenPrefix) || tok[:len(tokenPrefix)] != tokenPrefix {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.calls[tok]
	switch {
	case !ok:
	case wire:
		c.wire = true
		fallthrough
	case !c.wire:
		select {
		case c.ch <- p:
		default: // the client is slow; drop this update
		}
	}
	return true
}

// Handle is a go-sdk ProgressNotificationHandler for upstream clients
// (pool.Options.OnProgress): it passes a
// notification carrying one of the relay's tokens to the call still waiting
// for it, for transports WrapTransport leaves alone. Wrapped connections
// never reach it (their wrapper consumes the relay's notifications), and it
// passes over a call whose progress a tap delivered, so nothing is
// delivered twice.
func (r *ProgressRelay) Handle(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	if req != nil && req.Params != nil {
		r.deliver(req.Params, false)
	}
}

// WrapTransport returns t wrapped so that the relay sees the progress
// notifications arriving on its connection, or t itself for transports it
// does not wrap (see the type documentation).
func (r *ProgressRelay) WrapTransport(t mcp.Transport) mcp.Transport {
	switch t.(type) {
	case *mcp.CommandTransport, *mcp.IOTransport, *mcp.InMemoryTransport:
		return &relayTransport{Transport: t, relay: r}
	}
	if tapped, ok := pool.WithRoundTripper(t, r.tap); ok {
		return tapped
	}
	return t
}

// Dialer returns a pool dialer that dials with base (nil meaning
// pool.DefaultDialer) and wraps the transport with WrapTransport.
func (r *ProgressRelay) Dialer(base pool.Dialer) pool.Dialer {
	if base == nil {
		base = pool.DefaultDialer
	}
	return func(ctx context.Context, spec pool.Spec) (mcp.Transport, error) {
		t, err := base(ctx, spec)
		if err != nil {
			return nil, err
		}
		return r.WrapTransport(t), nil
	}
}

// Unwrap returns the transport WrapTransport wrapped, or t itself.
func Unwrap(t mcp.Transport) mcp.Transport {
	if rt, ok := t.(*relayTransport); ok {
		return rt.Transport
	}
	return t
}

type relayTransport struct {
	mcp.Transport
	relay *ProgressRelay
}

func (t *relayTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	b, _ := pool.BridgingOf(ctx)
	return &relayConn{Connection: c, relay: t.relay, bridging: b, calls: make(map[jsonrpc.ID]*bridgeCall)}, nil
}

type relayConn struct {
	mcp.Connection
	relay    *ProgressRelay
	bridging pool.Bridging // what the pool lets be inferred (none when it did not connect it)

	mu      sync.Mutex
	calls   map[jsonrpc.ID]*bridgeCall // the forwarded calls awaiting their answers
	sweepAt int                        // len(calls) at which Write lets go of those forgotten
}

// Write notes the forwarded calls going out, so that Read can tell whose
// calls are in flight.
func (c *relayConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		if call := callOf(ctx); call != nil {
			c.mu.Lock()
			if len(c.calls) >= c.sweepAt {
				// Let go of the calls given up on and never answered
				// (givenUpFor), now and then: amortised, a write looks at
				// one other call at most.
				for id, k := range c.calls {
					if k.isForgotten() {
						delete(c.calls, id)
					}
				}
				c.sweepAt = 2*len(c.calls) + 64
			}
			c.calls[req.ID] = call
			c.mu.Unlock()
		}
	}
	return c.Connection.Write(ctx, msg)
}

// Read passes every message on except the progress notifications that
// carry the relay's tokens, which go to their calls, and the log messages
// that arrive while one client's calls are in flight, when the connection
// allows that inference (pool.Bridging): they go to that client, before
// the answer that follows them. The requests a Bridge answers are marked
// with that client's call, or with why there is none, as they arrive.
func (c *relayConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err != nil {
			return msg, err
		}
		if c.relay.deliverMessage(msg) || c.deliverLog(msg) {
			continue
		}
		return msg, nil
	}
}

// deliverLog passes msg to its client when it is a log message the
// connection can attribute, and reports whether it did; it also forgets
// the calls msg answers, and marks the requests a Bridge answers (Read).
func (c *relayConn) deliverLog(msg jsonrpc.Message) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch m := msg.(type) {
	case *jsonrpc.Response:
		if call := c.calls[m.ID]; call != nil {
			delete(c.calls, m.ID)
			c.relay.answered(call)
		}
	case *jsonrpc.Request:
		if m.IsCall() {
			if bridged(m.Method) && c.bridging.Infer {
				// Inferred now, as it arrives: by the time the pool's
				// client hands it to the Bridge, the call that caused it
				// may have ended and another client's begun.
				mark := markNone
				call, why := soleCall(c.calls)
				if call != nil {
					mark = markCall + call.token
				} else {
					mark += why
				}
				c.relay.setMark(m, mark)
			}
			return false
		}
		if m.Method != "notifications/message" {
			return false
		}
		call := logCall(c.bridging, c.calls)
		var p mcp.LoggingMessageParams //lint:ignore SA1019 logging is deprecated (SEP-2577) but still used during its deprecation window
		return call != nil && json.Unmarshal(m.Params, &p) == nil && call.log(&p, len(m.Params))
	}
	return false
}

// deliverMessage delivers msg, read off an upstream connection by a
// wrapper or tap, when it is a progress notification carrying one of the
// relay's tokens, and reports whether it was.
func (r *ProgressRelay) deliverMessage(msg jsonrpc.Message) bool {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.IsCall() || req.Method != "notifications/progress" {
		return false
	}
	var p mcp.ProgressNotificationParams
	return json.Unmarshal(req.Params, &p) == nil && r.deliver(&p, true)
}

// String names the wrapped transport, for logs.
func (t *relayTransport) String() string { return fmt.Sprintf("progress relay over %T", t.Transport) }
