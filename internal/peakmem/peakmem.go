// Package peakmem measures the peak memory of a command and everything it
// starts: the summed resident set size of its process tree, sampled from
// /proc (Linux only). It serves machines without a cgroup memory.peak.
package peakmem

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"time"
)

// pageSize is the unit of /proc/<pid>/stat's rss field.
var pageSize = int64(os.Getpagesize())

// A proc is one line of /proc/<pid>/stat: its parent and resident size.
type proc struct {
	ppid int
	rss  int64 // bytes
}

// readProcs reads every process's parent and resident size. A process that
// ends while it is read is left out.
func readProcs() (map[int]proc, error) {
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("peakmem: list /proc: %w", err)
	}
	out := make(map[int]proc, len(dir))
	for _, e := range dir {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone
		}
		if p, ok := parseStat(b); ok {
			out[pid] = p
		}
	}
	return out, nil
}

// parseStat reads the parent (field 4) and rss (field 24, in pages) of a
// /proc/<pid>/stat line. The command name (field 2) is in parentheses and
// may hold spaces and parentheses itself, so fields are counted from the
// last ')'.
func parseStat(b []byte) (proc, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return proc{}, false
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3 (state)
	if len(f) < 22 {
		return proc{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	rss, err2 := strconv.ParseInt(string(f[21]), 10, 64)
	if err1 != nil || err2 != nil {
		return proc{}, false
	}
	return proc{ppid: ppid, rss: rss * pageSize}, true
}

// treeRSS sums the resident size of root and all its descendants in procs.
func treeRSS(procs map[int]proc, root int) int64 {
	children := make(map[int][]int, len(procs))
	for pid, p := range procs {
		children[p.ppid] = append(children[p.ppid], pid)
	}
	var sum int64
	seen := map[int]bool{}
	stack := []int{root}
	for len(stack) > 0 {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		sum += procs[pid].rss
		stack = append(stack, children[pid]...)
	}
	return sum
}

// TreeRSS returns the summed resident size, in bytes, of process pid and
// all its descendants.
func TreeRSS(pid int) (int64, error) {
	procs, err := readProcs()
	if err != nil {
		return 0, err
	}
	return treeRSS(procs, pid), nil
}

// sampled, when set (by tests), is called after each sample with the
// peak so far.
var sampled func(peak int64)

// Run starts cmd, samples its process tree's resident size every interval
// until it ends, and returns the highest sum seen with cmd's Wait error.
// Processes that leave the tree (a daemon that re-parents itself) are no
// longer counted.
func Run(ctx context.Context, cmd *exec.Cmd, interval time.Duration) (peak int64, err error) {
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("peakmem: start %s: %w", cmd.Path, err)
	}
	var max atomic.Int64
	sample := func() {
		if n, err := TreeRSS(cmd.Process.Pid); err == nil && n > max.Load() {
			max.Store(n)
		}
		if sampled != nil {
			sampled(max.Load())
		}
	}
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			sample()
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	<-sampled
	return max.Load(), err
}

// Format writes n bytes as MiB or GiB.
func Format(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%d MiB", n>>20)
}
