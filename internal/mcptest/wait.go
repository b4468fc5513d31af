package mcptest

import (
	"fmt"
	"runtime"
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
