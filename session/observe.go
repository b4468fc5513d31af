package session

import (
	"errors"
	"time"
)

// A Call describes one client request an Endpoint forwarded, or tried to
// forward, to an upstream: a tools/call, prompts/get or resources/read. It
// is what Options.OnCall is told.
type Call struct {
	// Server is the upstream server the request was for.
	Server string
	// Method is "tools/call", "prompts/get" or "resources/read".
	Method string
	// Outcome is one of the Outcome constants.
	Outcome string
	// Took is the time from sending the upstream request to its answer or
	// failure; zero when the request never reached an upstream.
	Took time.Duration
}

// The outcomes of a Call.
const (
	// OutcomeOK: the upstream answered with a result (for a tool, one
	// without isError).
	OutcomeOK = "ok"
	// OutcomeToolError: the upstream answered a tools/call with a result
	// flagged isError, the tool's own failure.
	OutcomeToolError = "tool_error"
	// OutcomeError: the upstream answered with a JSON-RPC error.
	OutcomeError = "error"
	// OutcomeTimeout: the server's "timeout" ended the call (ErrTimeout).
	OutcomeTimeout = "timeout"
	// OutcomeUnavailable: there was no connection to the server, or it
	// failed during the call (ErrUnavailable).
	OutcomeUnavailable = "unavailable"
	// OutcomeCancelled: the client cancelled the call or went away.
	OutcomeCancelled = "cancelled"
	// OutcomeCutShort: the session was draining (ErrDraining).
	OutcomeCutShort = "cut_short"
)

// observe tells Options.OnCall about a call to server with method, sent
// upstream at start (zero: never sent), that ended with outcome.
func (e *Endpoint) observe(server, method string, start time.Time, outcome string) {
	if e.onCall == nil {
		return
	}
	c := Call{Server: server, Method: method, Outcome: outcome}
	if !start.IsZero() {
		c.Took = time.Since(start)
	}
	e.onCall(c)
}

// failureOutcome is the outcome of a call that failed with ferr, from
// callFailure or target, its context having ended with ctxErr (nil: it had
// not, or the call never got one).
func failureOutcome(ctxErr, ferr error, upstream bool) string {
	switch {
	case upstream:
		return OutcomeError
	case errors.Is(ferr, ErrDraining):
		return OutcomeCutShort
	case errors.Is(ferr, ErrTimeout):
		return OutcomeTimeout
	case ctxErr != nil:
		return OutcomeCancelled
	}
	return OutcomeUnavailable
}
