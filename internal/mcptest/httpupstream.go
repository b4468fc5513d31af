package mcptest

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPUpstreamConfig says what an HTTPUpstream serves and records.
type HTTPUpstreamConfig struct {
	// NewServer returns the MCP server of a new process. It is called when
	// the upstream starts, restarts and comes back, on the goroutine that
	// calls NewHTTPUpstream, Restart or Back.
	NewServer func() *mcp.Server
	// Options are the streamable HTTP handler's, shared by every process.
	Options mcp.StreamableHTTPOptions
	// Headers names the request headers Requests records.
	Headers []string
	// Serve, if set, serves each request that no Fault answered, in place
	// of the MCP handler next, which it is to call. method is the JSON-RPC
	// method of a POST.
	Serve func(w http.ResponseWriter, r *http.Request, method string, next http.Handler)
}

// An HTTPRequest is one HTTP request an HTTPUpstream got.
type HTTPRequest struct {
	Verb    string      // the HTTP method
	Method  string      // the JSON-RPC method of a POST, if any
	Session string      // the Mcp-Session-Id header
	Header  http.Header // the headers HTTPUpstreamConfig.Headers names
}

// A Fault sees each request an HTTPUpstream gets before its MCP handler
// does, and reports whether it answered it. method is the JSON-RPC method
// of a POST.
type Fault func(w http.ResponseWriter, r *http.Request, method string) bool

// An HTTPUpstream is an MCP server "process" served over streamable HTTP at
// a fixed address, which a test can restart (a new process: the sessions it
// knew are gone, their ids answered with 404), take down (connection
// refused) and bring back at the same address, or make misbehave (see
// SetFault and Hang). It records every request it gets (see Requests).
type HTTPUpstream struct {
	t    testing.TB
	addr string
	cfg  HTTPUpstreamConfig
	stop chan struct{} // closed when the test ends

	mu      sync.Mutex
	ts      *httptest.Server // nil while down
	srv     *mcp.Server      // the current process's
	handler http.Handler     // the current process's
	fault   Fault
	reqs    []HTTPRequest
}

// NewHTTPUpstream starts an HTTPUpstream on a free local port. It is taken
// down, and the requests it hangs on let go, when the test ends, after the
// cleanups registered later (a client's, say) have run.
func NewHTTPUpstream(t testing.TB, cfg HTTPUpstreamConfig) *HTTPUpstream {
	t.Helper()
	u := &HTTPUpstream{t: t, cfg: cfg, stop: make(chan struct{})}
	u.srv = cfg.NewServer()
	u.handler = mcp.NewStreamableHTTPHandler(u.server, &u.cfg.Options)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	u.addr = ln.Addr().String()
	u.serve(ln)
	t.Cleanup(func() {
		close(u.stop)
		u.Down()
	})
	return u
}

// server is the MCP handlers' getServer: the current process's server.
func (u *HTTPUpstream) server(*http.Request) *mcp.Server {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.srv
}

// URL returns the upstream's MCP endpoint.
func (u *HTTPUpstream) URL() string { return "http://" + u.addr + "/mcp" }

func (u *HTTPUpstream) serve(ln net.Listener) {
	ts := httptest.NewUnstartedServer(http.HandlerFunc(u.serveHTTP))
	ts.Listener = ln
	ts.Start()
	u.mu.Lock()
	u.ts = ts
	u.mu.Unlock()
}

func (u *HTTPUpstream) serveHTTP(w http.ResponseWriter, req *http.Request) {
	var method string
	if req.Method == http.MethodPost {
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct{ Method string }
		_ = json.Unmarshal(body, &msg)
		method = msg.Method
	}
	seen := HTTPRequest{Verb: req.Method, Method: method, Session: req.Header.Get("Mcp-Session-Id"), Header: http.Header{}}
	for _, name := range u.cfg.Headers {
		if vs := req.Header.Values(name); len(vs) > 0 {
			seen.Header[http.CanonicalHeaderKey(name)] = append([]string(nil), vs...)
		}
	}
	u.mu.Lock()
	u.reqs = append(u.reqs, seen)
	h, fault := u.handler, u.fault
	u.mu.Unlock()
	if fault != nil && fault(w, req, method) {
		return
	}
	if u.cfg.Serve != nil {
		u.cfg.Serve(w, req, method, h)
		return
	}
	h.ServeHTTP(w, req)
}

// SetFault makes f (nil: none) see every request first.
func (u *HTTPUpstream) SetFault(f Fault) {
	u.mu.Lock()
	u.fault = f
	u.mu.Unlock()
}

// Hang makes the upstream accept the requests match selects and never
// answer them, until the client gives up, release is called or the test
// ends. It replaces any Fault; release removes it.
func (u *HTTPUpstream) Hang(match func(r *http.Request, method string) bool) (release func()) {
	stop := make(chan struct{})
	u.SetFault(func(_ http.ResponseWriter, req *http.Request, method string) bool {
		if !match(req, method) {
			return false
		}
		select {
		case <-req.Context().Done():
		case <-stop:
		case <-u.stop:
		}
		return true
	})
	var once sync.Once
	return func() { once.Do(func() { u.SetFault(nil); close(stop) }) }
}

// Requests returns the requests seen so far.
func (u *HTTPUpstream) Requests() []HTTPRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]HTTPRequest(nil), u.reqs...)
}

// CloseClientConnections drops every open connection, as a network blip
// or a proxy's idle timeout does; the process lives on.
func (u *HTTPUpstream) CloseClientConnections() {
	u.mu.Lock()
	ts := u.ts
	u.mu.Unlock()
	if ts != nil {
		ts.CloseClientConnections()
	}
}

// Restart replaces the server process: a new MCP server (from NewServer)
// and handler, which know none of the old session ids, and every open
// connection dropped (when dropConns), as when a process exits.
func (u *HTTPUpstream) Restart(dropConns bool) {
	srv := u.cfg.NewServer()
	h := mcp.NewStreamableHTTPHandler(u.server, &u.cfg.Options)
	u.mu.Lock()
	old := u.srv
	u.srv, u.handler = srv, h
	ts := u.ts
	u.mu.Unlock()
	if dropConns && ts != nil {
		ts.CloseClientConnections()
	}
	for ss := range old.Sessions() { // the old process is gone
		_ = ss.Close()
	}
}

// Down stops the server: connections are refused until Back.
func (u *HTTPUpstream) Down() {
	u.mu.Lock()
	ts, srv := u.ts, u.srv
	u.ts = nil
	u.mu.Unlock()
	if ts == nil {
		return
	}
	for ss := range srv.Sessions() {
		_ = ss.Close()
	}
	ts.Listener.Close()
	ts.CloseClientConnections()
	ts.Close()
}

// Back serves again after Down, a new process, at the same address.
func (u *HTTPUpstream) Back() {
	u.t.Helper()
	u.Restart(false)
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ln, err = net.Listen("tcp", u.addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			u.t.Fatalf("listen again on %s: %v", u.addr, err)
		}
	}
	u.serve(ln)
}
