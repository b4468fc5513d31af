// Package peakmem measures the peak memory of a command and everything it
// starts: the summed resident set size of its process tree, sampled from
// /proc (Linux only). It serves machines without a cgroup memory.peak.
package peakmem

import (
	"context"
	"fmt"
	"os/exec"
	"sync/atomic"
	"time"

	"github.com/wasmhost/wasmhost/internal/procstat"
)

// treeRSS sums the resident size of root and all its descendants in procs.
func treeRSS(procs map[int]procstat.Proc, root int) int64 {
	sum := procs[root].RSS
	for _, pid := range procstat.Descendants(procs, root) {
		sum += procs[pid].RSS
	}
	return sum
}

// TreeRSS returns the summed resident size, in bytes, of process pid and
// all its descendants.
func TreeRSS(pid int) (int64, error) {
	procs, err := procstat.Read()
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
