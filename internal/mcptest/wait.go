package mcptest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Bounds of the tests' waits. Each wait ends as soon as what it waits for
// happens; the bound only stops a test that would otherwise hang, so it is
// one a loaded 2-core machine running -race cannot miss.
const (
	// ReadyWithin bounds a start (of the daemon or of stdio mode): loading
	// the policy plugin and starting the upstreams (a test binary built
	// with -race); and a stop, which may wait for upstreams to end.
	ReadyWithin = 2 * time.Minute
	// EventWithin bounds the wait for anything else: a log line, a
	// notification, a reload, a client's connect.
	EventWithin = time.Minute
)

// Within returns d, cut so that a wait ends a little before the test
// binary's own deadline (go test -timeout): a test that fails then says
// what it waited for and prints its logs, rather than being killed with
// nothing but stacks.
func Within(t testing.TB, d time.Duration) time.Duration {
	if tt, ok := t.(*testing.T); ok {
		if deadline, ok := tt.Deadline(); ok {
			if left := time.Until(deadline) - 10*time.Second; left < d {
				return max(left, time.Second)
			}
		}
	}
	return d
}

// WaitFor polls cond every 20 ms until it holds, for at most d. On
// failure it prints what it waited for and logs() as they are then (not as
// they were when the wait began).
func WaitFor(t testing.TB, d time.Duration, cond func() bool, logs func() string, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(Within(t, d))
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v\nlogs:\n%s", fmt.Sprintf(format, args...), d, logs())
		}
		<-tick.C
	}
}

// Stacks returns every goroutine's stack, to print with a wait that
// timed out: it shows where the process is stuck.
func Stacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// A Goroutine is one goroutine of a [Stacks] dump.
type Goroutine struct {
	// ID is its number ("goroutine 23").
	ID string
	// State is what it is doing or waiting for, as the dump says it
	// ("running", "chan receive", "sync.Mutex.Lock", ...), without the time
	// it has waited.
	State string
	// Stack is its frames, ending with the "created by … in goroutine N"
	// line.
	Stack string
}

// Goroutines returns every goroutine of a [Stacks] dump taken now. A test
// waits on them for what no channel or counter tells: that a goroutine is
// blocked on a lock, or that one has ended.
func Goroutines() []Goroutine {
	var out []Goroutine
	for block := range strings.SplitSeq(Stacks(), "\n\n") {
		header, stack, _ := strings.Cut(block, "\n")
		rest, ok := strings.CutPrefix(header, "goroutine ")
		if !ok {
			continue
		}
		id, rest, _ := strings.Cut(rest, " ")
		_, state, _ := strings.Cut(rest, "[")
		state, _, _ = strings.Cut(state, "]")
		state, _, _ = strings.Cut(state, ",")
		out = append(out, Goroutine{ID: id, State: state, Stack: stack})
	}
	return out
}

// BlockedIn reports whether a goroutine waits in state (see
// [Goroutine.State]) with a frame whose function is fn
// ("github.com/…/reconcile.(*Reconciler).Repair", say) on its stack.
func BlockedIn(state, fn string) bool {
	for _, g := range Goroutines() {
		if g.State == state && strings.Contains(g.Stack, fn+"(") {
			return true
		}
	}
	return false
}
