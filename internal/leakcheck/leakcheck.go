//go:build linux

// Package leakcheck measures what a leak leaves behind in a test process
// (goroutines with their stacks, open file descriptors, child processes)
// and waits for the process to come back to a baseline. The daemon's and
// stdio mode's soak tests use it. It reads /proc, so it is Linux only.
package leakcheck

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Resources is what a leak leaves behind in this process at one instant.
type Resources struct {
	// Goroutines counts the goroutines; Stacks groups them by stack (the
	// goroutine measuring left out).
	Goroutines int
	Stacks     map[string]int
	// FDs maps each open file descriptor to its target.
	FDs map[string]string
	// Children maps each child process's pid to its state and command
	// line.
	Children map[int]string
}

// Take measures this process's goroutines, file descriptors and child
// processes.
func Take() (Resources, error) {
	r := Resources{Goroutines: runtime.NumGoroutine(), Stacks: make(map[string]int), FDs: make(map[string]string), Children: make(map[int]string)}
	var prof bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&prof, 1); err != nil {
		return r, err
	}
	_, profile, _ := strings.Cut(prof.String(), "\n") // "goroutine profile: total N"
	for _, rec := range strings.Split(profile, "\n\n") {
		count, stack, ok := strings.Cut(strings.TrimSpace(rec), " @ ")
		n, err := strconv.Atoi(count)
		if ok && err == nil && !strings.Contains(stack, "leakcheck.Take") {
			r.Stacks[stack] += n
		}
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return r, err
	}
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil {
			r.FDs[e.Name()] = target // (ReadDir's own descriptor is closed by now)
		}
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return r, err
	}
	self := strconv.Itoa(os.Getpid())
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", p.Name(), "stat"))
		if err != nil {
			continue // it ended meanwhile
		}
		// The command name may hold spaces and parentheses: fields are
		// counted from the last ')': state, ppid, ...
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[1] != self {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		r.Children[pid] = "state " + f[0] + ": " + strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")
	}
	return r, nil
}

// Exceeds reports how now goes beyond base: more goroutines or descriptors
// than base's plus margin, or more child processes than maxChildren, with
// the goroutine stacks, descriptors and processes that are new. It returns
// nil when now is within the limits.
func (base Resources) Exceeds(now Resources, margin, maxChildren int) error {
	var b strings.Builder
	if now.Goroutines > base.Goroutines+margin {
		fmt.Fprintf(&b, "goroutines: %d, baseline %d (margin %d); stacks with more goroutines than at the baseline:\n", now.Goroutines, base.Goroutines, margin)
		for _, stack := range slices.Sorted(maps.Keys(now.Stacks)) {
			if extra := now.Stacks[stack] - base.Stacks[stack]; extra > 0 {
				fmt.Fprintf(&b, "+%d @ %s\n\n", extra, stack)
			}
		}
	}
	if len(now.FDs) > len(base.FDs)+margin {
		fmt.Fprintf(&b, "file descriptors: %d, baseline %d (margin %d); new ones:\n", len(now.FDs), len(base.FDs), margin)
		for _, fd := range slices.Sorted(maps.Keys(now.FDs)) {
			if target, ok := base.FDs[fd]; !ok || target != now.FDs[fd] {
				fmt.Fprintf(&b, "  fd %s -> %s\n", fd, now.FDs[fd])
			}
		}
	}
	if len(now.Children) > maxChildren {
		fmt.Fprintf(&b, "child processes: %d, at most %d expected:\n", len(now.Children), maxChildren)
		for _, pid := range slices.Sorted(maps.Keys(now.Children)) {
			fmt.Fprintf(&b, "  pid %d (%s)\n", pid, now.Children[pid])
		}
	}
	if b.Len() == 0 {
		return nil
	}
	return errors.New(b.String())
}

// Settle polls, until within has passed, for this process to be back
// within base's limits (see Exceeds), and returns the last excess
// otherwise.
func Settle(base Resources, margin, maxChildren int, within time.Duration) error {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		now, err := Take()
		if err == nil {
			err = base.Exceeds(now, margin, maxChildren)
		}
		if err == nil || time.Now().After(deadline) {
			return err
		}
		<-tick.C
	}
}

// Quiet returns this process's resources once its goroutine and descriptor
// counts have stopped falling (connections closed a moment ago end their
// goroutines asynchronously), waiting at most within, so that a baseline
// counts none of what is ending.
func Quiet(t testing.TB, within time.Duration) Resources {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	low, err := Take()
	if err != nil {
		t.Fatalf("leakcheck: %v", err)
	}
	for steady := 0; steady < 10 && time.Now().Before(deadline); {
		<-tick.C
		now, err := Take()
		if err != nil {
			t.Fatalf("leakcheck: %v", err)
		}
		if now.Goroutines < low.Goroutines || len(now.FDs) < len(low.FDs) {
			low, steady = now, 0
		} else {
			steady++
		}
	}
	return low
}
