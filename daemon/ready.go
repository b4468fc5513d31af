package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/wasmhost/wasmhost/session"
)

// DefaultDrainTimeout is how long a stop gives the calls under way by
// default (Options.DrainTimeout).
const DefaultDrainTimeout = session.DrainGrace

// drainTimeout is Options.DrainTimeout with its default.
func (d *Daemon) drainTimeout() time.Duration {
	if d.opts.DrainTimeout > 0 {
		return d.opts.DrainTimeout
	}
	return DefaultDrainTimeout
}

// Replica is the name the daemon's metrics carry (Options.Replica).
func (d *Daemon) Replica() string { return d.opts.Replica }

// isReady reports whether the daemon takes new work: its first config is
// applied (the policy loaded, the pool started) and it is not stopping.
func (d *Daemon) isReady() bool {
	select {
	case <-d.ready:
		return !d.draining.Load()
	default:
		return false
	}
}

// serveReadyz answers GET /readyz: 200 once the daemon is ready, 503 while
// it starts and from the moment it begins to stop.
func (d *Daemon) serveReadyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	switch {
	case d.isReady():
		_, _ = io.WriteString(w, "ready\n")
	case d.draining.Load():
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "draining\n")
	default:
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "starting\n")
	}
}

// refuseWhileDraining answers 503 to the MCP requests that come once the
// daemon has begun to stop (new client sessions, new calls, new event
// streams; a DELETE ending a client session is still served), so that
// nothing new starts on a replica on its way out. The request is refused
// before anything reads it: it did nothing, and a load balancer may retry
// it on another replica (Retry-After says the same to a client). The
// requests already under way are the drain's to finish.
func (d *Daemon) refuseWhileDraining(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.draining.Load() && r.Method != http.MethodDelete && strings.HasPrefix(r.URL.Path, "/mcp/") {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "Service Unavailable: this wasmhost replica is shutting down; start a new session (another replica will take it)", http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// perRequestProtocol is the first MCP protocol version whose requests
// each carry what initialize used to (SEP-2575): no client session.
const perRequestProtocol = "2026-07-28"

// peekLimit bounds how much of a per-request-protocol POST byProtocol
// reads to find its method: a subscriptions/listen request is small.
const peekLimit = 64 << 10

// byProtocol sends the POSTs of the per-request protocol (their
// Mcp-Protocol-Version header) that carry no Mcp-Session-Id to stateless,
// the others to stateful. A subscriptions/listen request among them (the
// stream that carries list_changed to such a client, open as long as the
// client likes) is recorded in d.listens, so that a stop ends it rather
// than wait the drain timeout for it.
func (d *Daemon) byProtocol(stateful, stateless http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Mcp-Protocol-Version") < perRequestProtocol || r.Header.Get("Mcp-Session-Id") != "" {
			stateful.ServeHTTP(w, r)
			return
		}
		head, err := io.ReadAll(io.LimitReader(r.Body, peekLimit))
		if err != nil {
			http.Error(w, "Bad Request: request body unreadable: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
		var msg struct {
			Method string `json:"method"`
		}
		if json.Unmarshal(head, &msg) == nil && msg.Method == "subscriptions/listen" {
			ctx, end := d.listens.add(r.Context())
			defer end()
			r = r.WithContext(ctx)
		}
		stateless.ServeHTTP(w, r)
	})
}

// listenStreams are the subscriptions/listen requests under way.
type listenStreams struct {
	mu     sync.Mutex
	ended  bool // endAll was called: a stream added now ends at once
	next   int
	cancel map[int]context.CancelFunc
}

// add records a stream under way with context parent; end removes it.
func (l *listenStreams) add(parent context.Context) (ctx context.Context, end func()) {
	ctx, cancel := context.WithCancel(parent)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		cancel()
		return ctx, cancel
	}
	if l.cancel == nil {
		l.cancel = make(map[int]context.CancelFunc)
	}
	l.next++
	id := l.next
	l.cancel[id] = cancel
	return ctx, func() {
		l.mu.Lock()
		delete(l.cancel, id)
		l.mu.Unlock()
		cancel()
	}
}

// endAll ends the streams under way and those added later.
func (l *listenStreams) endAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended = true
	for _, cancel := range l.cancel {
		cancel()
	}
}
