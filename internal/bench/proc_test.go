package bench

import (
	"syscall"
	"time"

	"github.com/wasmhost/wasmhost/internal/procstat"
)

// processes reads every process (procstat.Read); none if /proc cannot be
// listed.
func processes() map[int]procstat.Proc {
	procs, _ := procstat.Read()
	return procs
}

// A cpuUse is CPU time by who spent it: this process (the load
// generator), a gateway's process, and the processes it started (its
// upstreams, with any shell or env(1) in between).
type cpuUse struct {
	load, gateway, upstream time.Duration
}

// cpuNow reads the CPU time spent so far by this process, by g's process
// and by g's descendants.
func (g *gateway) cpuNow() cpuUse {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	procs := processes()
	pid := g.cmd.Process.Pid
	u := cpuUse{load: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), gateway: procs[pid].CPU}
	for _, d := range procstat.Descendants(procs, pid) {
		u.upstream += procs[d].CPU
	}
	return u
}

// since returns the CPU time spent between start and u. An upstream that
// started after start counts in full; one that ended is lost, which the
// loads (whose upstreams all start before the clock) do not meet.
func (u cpuUse) since(start cpuUse) cpuUse {
	return cpuUse{load: u.load - start.load, gateway: u.gateway - start.gateway, upstream: u.upstream - start.upstream}
}
