package session

import (
	"context"
	"net/http"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// carrierHeader is the request header HTTPHandler sets on each POST so
// that the calls it carries find it: the go-sdk hands a call the header of
// the request that carried it (mcp.RequestExtra.Header), and nothing else
// of that request. Whatever a client sends under this name is replaced.
const carrierHeader = "Wasmhost-Carrier"

// sessionIDHeader is the streamable HTTP transport's session header.
const sessionIDHeader = "Mcp-Session-Id"

// protocolVersionHeader is the streamable HTTP transport's header naming
// the protocol version a request speaks.
const protocolVersionHeader = "Mcp-Protocol-Version"

// carriers are the POST requests under way on an endpoint's HTTP handler,
// each with a context that ends when the answers of the calls it carries
// can no longer reach their client. It is safe for concurrent use.
type carriers struct {
	mu   sync.Mutex
	seq  uint64
	open map[string]*carrier // by carrierHeader value
	// ending counts, by client session ID, the closes under way: a POST of
	// such a session is born ended.
	ending map[string]int
}

// A carrier is one POST request under way.
type carrier struct {
	session string // its client session's ID; "" for an initialize
	ctx     context.Context
	cancel  context.CancelFunc
	w       *keepAliveWriter // its response
}

// add registers a POST of client session sid, under way with context
// parent and answered through w, and returns its carrierHeader value and
// the func that ends it once the request has been served.
func (c *carriers) add(parent context.Context, sid string, w *keepAliveWriter) (key string, done func()) {
	ctx, cancel := context.WithCancel(parent)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open == nil {
		c.open = make(map[string]*carrier)
	}
	c.seq++
	key = strconv.FormatUint(c.seq, 10)
	c.open[key] = &carrier{session: sid, ctx: ctx, cancel: cancel, w: w}
	if sid != "" && c.ending[sid] > 0 {
		cancel()
	}
	return key, func() {
		c.mu.Lock()
		delete(c.open, key)
		c.mu.Unlock()
		cancel()
	}
}

// end ends the carriers of client session sid, and those that come until
// the returned func is called (once the session is closed).
func (c *carriers) end(sid string) (done func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ending == nil {
		c.ending = make(map[string]int)
	}
	c.ending[sid]++
	for _, k := range c.open {
		if k.session == sid {
			k.cancel()
		}
	}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.ending[sid]--; c.ending[sid] <= 0 {
			delete(c.ending, sid)
		}
	}
}

// endedCarrier stands for the carrier of a call whose request was served
// before the call began: its context has ended, and it has no response.
var endedCarrier = func() *carrier {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return &carrier{ctx: ctx, cancel: cancel}
}()

// of returns the carrier of a call with extra (endedCarrier when its
// request has been served already), or nil for a call that did not come
// through HTTPHandler.
func (c *carriers) of(extra *mcp.RequestExtra) *carrier {
	if extra == nil {
		return nil
	}
	key := extra.Header.Get(carrierHeader)
	if key == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := c.open[key]; k != nil {
		return k
	}
	return endedCarrier
}

// HTTPHandler returns h, the endpoint's streamable HTTP handler
// (mcp.NewStreamableHTTPHandler without an event store), made to cancel
// the upstream requests of a client's calls once their answers can no
// longer reach it: when the POST request that carried a call ends before
// the call does (the client went away or gave up on it; the go-sdk would
// run the call to its end, and keep the session open meanwhile, for
// nothing), when the client ends its session (DELETE), and when Close
// closes it. Without this, a closing session waits for each such call's
// upstream to answer, for ever if it never does. It also keeps each event
// stream it serves (a POST's, a GET's) from looking dead to the client
// while it has nothing to carry: it sends a forwarded call's response
// headers once the call has been under way for a second, and a comment
// whenever the stream has been silent for the keep-alive interval
// (Options.KeepAlive, DefaultKeepAlive).
func (e *Endpoint) HTTPHandler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sid := r.Header.Get(sessionIDHeader)
		switch r.Method {
		case http.MethodPost:
			kw := newKeepAliveWriter(w, e.keepAlive, r.Header.Get(protocolVersionHeader))
			defer kw.finish()
			w = kw
			key, done := e.carriers.add(r.Context(), sid, kw)
			defer done()
			r = r.Clone(r.Context())
			r.Header.Set(carrierHeader, key)
		case http.MethodGet:
			kw := newKeepAliveWriter(w, e.keepAlive, r.Header.Get(protocolVersionHeader))
			defer kw.finish()
			w = kw
		case http.MethodDelete:
			if sid != "" {
				defer e.carriers.end(sid)()
			}
		}
		h.ServeHTTP(w, r)
	})
}
