package daemon

import (
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"
)

// How refused requests and connections are logged: at most refusalBurst
// lines at once for one reason, then one every refusalEvery; a value taken
// from the request (a header, the path) at most maxLoggedValue bytes of it.
// Without these a client needing no token could write the log as fast as
// it sends requests, each line as long as its headers (up to 1 MiB).
const (
	refusalBurst   = 10
	refusalEvery   = 6 * time.Second
	maxLoggedValue = 256
)

// Reasons a request is refused: the label of
// wasmhost_http_requests_refused_total, and what the rate limit of the
// refusal log is kept by.
const (
	refusedHost          = "host"           // Host names another host (403)
	refusedOrigin        = "origin"         // Origin names another host (403)
	refusedNoSession     = "no_session"     // /mcp/{session} of no session (401)
	refusedNoCredentials = "no_credentials" // no Authorization header (401)
	refusedNotBearer     = "not_bearer"     // Authorization without "Bearer " (401)
	refusedBadToken      = "bad_token"      // a wrong token, or another session's (401)
	refusedMaxClients    = "max_clients"    // the session holds as many clients as it takes (503)
	refusedAdminOff      = "admin_disabled" // admin API disabled (404)
	// The admin API's own, as the session ones.
	refusedAdminNoCredentials = "admin_no_credentials"
	refusedAdminNotBearer     = "admin_not_bearer"
	refusedAdminBadToken      = "admin_bad_token"
)

// requestRefusals are the reasons of refused requests, for the metric.
var requestRefusals = []string{refusedHost, refusedOrigin, refusedNoSession, refusedNoCredentials, refusedNotBearer,
	refusedBadToken, refusedMaxClients, refusedAdminOff, refusedAdminNoCredentials, refusedAdminNotBearer, refusedAdminBadToken}

// A refusalLog rate-limits the log lines of refusals, by reason; it is
// safe for concurrent use.
type refusalLog struct {
	log *slog.Logger

	mu       sync.Mutex
	byReason map[string]*refusalBucket
}

type refusalBucket struct {
	lim        *rate.Limiter
	suppressed int
}

func newRefusalLog(log *slog.Logger) *refusalLog {
	return &refusalLog{log: log, byReason: make(map[string]*refusalBucket)}
}

// allow reports whether a refusal for reason may be logged now. When it
// may, and others were not logged since the last that was, it first logs
// how many.
func (l *refusalLog) allow(reason string) bool {
	l.mu.Lock()
	b := l.byReason[reason]
	if b == nil {
		b = &refusalBucket{lim: rate.NewLimiter(rate.Every(refusalEvery), refusalBurst)}
		l.byReason[reason] = b
	}
	if !b.lim.Allow() {
		b.suppressed++
		l.mu.Unlock()
		return false
	}
	n := b.suppressed
	b.suppressed = 0
	l.mu.Unlock()
	if n > 0 {
		l.log.Info(strconv.Itoa(n)+" refusals suppressed", "reason", reason, "limit", "at most "+strconv.Itoa(refusalBurst)+" lines at once, then one every "+refusalEvery.String())
	}
	return true
}

// clip returns s cut to maxLoggedValue bytes (on a character boundary),
// saying how long it was when it was cut, for the log.
func clip(s string) string {
	if len(s) <= maxLoggedValue {
		return s
	}
	n := maxLoggedValue
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "... (" + strconv.Itoa(len(s)) + " bytes)"
}
