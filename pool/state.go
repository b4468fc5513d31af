package pool

import "fmt"

// A State is where an entry is in its lifecycle.
type State int

// The states of an entry. StateFailed and StateClosed are terminal. A
// switch on a State lists every state (a test checks the module's), so
// that a state added here is placed by each; one that cannot return a
// value for another panics.
const (
	StateConnecting State = iota
	StateReady
	StateRestarting
	StateFailed
	StateClosed

	numStates // not a state: how many there are
)

// States returns every state, in the order of the constants.
func States() []State {
	out := make([]State, numStates)
	for s := range numStates {
		out[s] = s
	}
	return out
}

// String returns the state's lower-case name, e.g. "restarting": in
// /v1/state and in metrics labels.
func (s State) String() string {
	switch s {
	case StateConnecting:
		return "connecting"
	case StateReady:
		return "ready"
	case StateRestarting:
		return "restarting"
	case StateFailed:
		return "failed"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// ParseState returns the state whose String is name, and false for a
// name that is no state's.
func ParseState(name string) (State, bool) {
	for s := range numStates {
		if s.String() == name {
			return s, true
		}
	}
	return 0, false
}

// Terminal reports whether s is failed or closed.
func (s State) Terminal() bool {
	switch s {
	case StateFailed, StateClosed:
		return true
	case StateConnecting, StateReady, StateRestarting:
		return false
	}
	panic(unknownState(s))
}

// unknownState is the panic of a switch on a value that is no State.
func unknownState(s State) string { return fmt.Sprintf("pool: unknown entry state %d", int(s)) }
