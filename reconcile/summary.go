package reconcile

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// A Summary reports what one reconciling call did, for the daemon's one-line
// reload log and for tests. Counter-based fields are deltas of the shared
// operation counters over the call, so they also include work that other
// goroutines (an upstream list_changed fan-out, a crash restart) did at the
// same time.
type Summary struct {
	// Changed lists, sorted, the sessions whose registry received at least
	// one operation during the call: the sessions whose clients should see
	// a list change.
	Changed []string `json:"changed,omitempty"`
	// TransportsReused counts distinct upstream connections held both
	// before and after the call.
	TransportsReused int `json:"transportsReused"`
	// TransportsStarted counts upstream connections established during the
	// call (the pool's connect counter).
	TransportsStarted int `json:"transportsStarted"`
	// TransportsStopped counts upstream connections closed during the call
	// (the pool's disconnect counter).
	TransportsStopped int `json:"transportsStopped"`
	// Acquired and Released count binding actions: handles acquired and
	// handles released (a reacquire counts once in each).
	Acquired int `json:"acquired"`
	Released int `json:"released"`
	// Refreshed counts metadata refreshes of held handles (SetPolicy counts
	// its re-keyed views here).
	Refreshed int `json:"refreshed"`
	// Replayed counts projections views applied to their registries.
	Replayed int `json:"replayed"`
	// RegistryOps counts registry calls (one put or delete of a batch).
	RegistryOps int `json:"registryOps"`
	// TransportChanges lists, sorted by server, the servers whose
	// transport changed for bindings that held a live connection: each
	// such change is made before break (see the package documentation).
	TransportChanges []TransportChange `json:"transportChanges,omitempty"`
	// Errors lists the bindings that failed, sorted by session then
	// server. Each failure left its binding as documented on the method.
	Errors []*BindingError `json:"-"`
}

// A TransportChange reports one server whose transport (command, args,
// env, cwd, url, headers, ...) a reconciling call changed for bindings
// holding a live connection.
type TransportChange struct {
	Server string `json:"server"`
	// Moved counts the bindings moved to the new connection, their old
	// one released.
	Moved int `json:"moved"`
	// Kept counts the bindings left on their running connection because
	// the new one could not be made (Err says why): they keep what they
	// had, and the next reconciling call tries the change again.
	Kept int `json:"kept"`
	// Err is the first reason a binding was kept; nil when none was.
	Err error `json:"-"`
}

// String formats c on one line, for example
//
//	server "demo": transport changed for 2 sessions
//	server "demo": transport not changed, 2 sessions keep the running connection: <reason>
func (c TransportChange) String() string {
	plural := func(n int) string {
		if n == 1 {
			return "1 session"
		}
		return fmt.Sprintf("%d sessions", n)
	}
	switch {
	case c.Kept == 0:
		return fmt.Sprintf("server %q: transport changed for %s", c.Server, plural(c.Moved))
	case c.Moved == 0:
		return fmt.Sprintf("server %q: transport not changed, %s keep the running connection: %v", c.Server, plural(c.Kept), c.Err)
	}
	return fmt.Sprintf("server %q: transport changed for %s, not for %s, which keep the running connection: %v", c.Server, plural(c.Moved), plural(c.Kept), c.Err)
}

// SessionsChanged returns len(s.Changed).
func (s Summary) SessionsChanged() int { return len(s.Changed) }

// SessionChanged reports whether session is in s.Changed.
func (s Summary) SessionChanged(session string) bool {
	_, ok := slices.BinarySearch(s.Changed, session)
	return ok
}

// Err joins s.Errors, or returns nil when there are none.
func (s Summary) Err() error {
	if len(s.Errors) == 0 {
		return nil
	}
	errs := make([]error, len(s.Errors))
	for i, e := range s.Errors {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// String formats s on one line, for example
//
//	2 sessions changed; transports 1 reused, 1 started, 0 stopped; 1 acquired, 1 released, 3 refreshed, 2 replayed, 4 registry ops; 0 errors
//
// followed by the errors, if any, after a colon and separated by "; ",
// then by each server whose transport change was not made
// (TransportChange.String), after "; ".
func (s Summary) String() string {
	var b strings.Builder
	plural := func(n int, one, many string) string {
		if n == 1 {
			return fmt.Sprintf("%d %s", n, one)
		}
		return fmt.Sprintf("%d %s", n, many)
	}
	fmt.Fprintf(&b, "%s changed; transports %d reused, %d started, %d stopped; %d acquired, %d released, %d refreshed, %d replayed, %s; %s",
		plural(len(s.Changed), "session", "sessions"),
		s.TransportsReused, s.TransportsStarted, s.TransportsStopped,
		s.Acquired, s.Released, s.Refreshed, s.Replayed,
		plural(s.RegistryOps, "registry op", "registry ops"),
		plural(len(s.Errors), "error", "errors"))
	for i, e := range s.Errors {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(e.Error())
	}
	for _, c := range s.TransportChanges {
		if c.Kept > 0 {
			b.WriteString("; ")
			b.WriteString(c.String())
		}
	}
	return b.String()
}

// A BindingError is the failure of one (session, server) binding.
type BindingError struct {
	Session string
	Server  string
	Err     error
}

// Error returns `session "S", server "X": ` followed by the cause, once: a
// cause that starts with the same words (a view's errors do) is not
// prefixed again.
func (e *BindingError) Error() string {
	prefix := fmt.Sprintf("session %q, server %q: ", e.Session, e.Server)
	cause := fmt.Sprint(e.Err)
	if strings.HasPrefix(cause, prefix) {
		return cause
	}
	return prefix + cause
}

// Unwrap returns the cause.
func (e *BindingError) Unwrap() error { return e.Err }

// A State describes every binding at one instant, for the daemon's state
// endpoint.
type State struct {
	// Policy is the name and version the current policy's handshake
	// reports, e.g. "policy-default 1.0.0".
	Policy   string         `json:"policy"`
	Sessions []SessionState `json:"sessions"`
}

// A SessionState describes one session's bindings.
type SessionState struct {
	Name string `json:"name"`
	// Servers holds one entry per server the session wants or holds,
	// sorted by server name.
	Servers []BindingState `json:"servers"`
}

// A BindingState describes one (session, server) binding.
type BindingState struct {
	Server string `json:"server"`
	// Desired is the transport identity the binding was last reconciled
	// against.
	Desired string `json:"desired"`
	// Identity is the identity captured by the held connection; "" when
	// none is held (the last acquire failed).
	Identity string `json:"identity,omitempty"`
	// EntryID is the held entry's lifecycle id (the fingerprint, or
	// "NAME::unpooled-N"); "" when none is held. For logs only.
	EntryID string `json:"entryId,omitempty"`
	// EntryState is the held entry's state ("ready", "restarting", ...).
	EntryState string `json:"entryState,omitempty"`
	// Overlay is true when the binding comes from a runtime overlay.
	Overlay bool `json:"overlay,omitempty"`
	// Key is the metadata key the view captured; "" before the first
	// computation or after a policy failure.
	Key string `json:"key,omitempty"`
	// Error says why the binding holds nothing or its view shows nothing
	// (a failed acquire, a policy failure, a failed upstream); "" when
	// healthy.
	Error string `json:"error,omitempty"`
	// Pending is true while a reconciling call replaces the binding's
	// connection (Error is then "reacquiring", nothing held), or makes the
	// new connection of a changed transport (the held connection, of
	// Identity, serves meanwhile): a passing state, not a failure.
	Pending bool `json:"pending,omitempty"`
	// SwitchError says why the binding's transport was not changed to
	// Desired: the new connection could not be made (cannot start,
	// handshake or listing failed, timed out). The binding keeps serving
	// on its running connection (Identity, EntryID), with what it showed
	// before, until a later reconciling call makes the change or takes it
	// back. "" otherwise.
	SwitchError string `json:"switchError,omitempty"`
	// Tools, Prompts and Resources count what the view has registered in
	// the session.
	Tools     int `json:"tools"`
	Prompts   int `json:"prompts"`
	Resources int `json:"resources"`
	// Trusted counts the tools the policy marked trusted for the session.
	Trusted int `json:"trusted"`
}
