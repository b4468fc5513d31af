package daemon

import (
	"io"
	"net/http"
	"strings"
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
			refuseBody(w)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "Service Unavailable: this wasmhost replica is shutting down; start a new session (another replica will take it)", http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r)
	})
}
