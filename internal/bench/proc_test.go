package bench

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A procStat is what /proc/<pid>/stat says of one process.
type procStat struct {
	ppid int
	cpu  time.Duration // user and system time of all its threads
}

// userHZ is the unit of the times in /proc/<pid>/stat: Linux fixes it at
// 100 for user space, whatever the kernel's own tick.
const userHZ = 100

// processes reads /proc/<pid>/stat of every process, by pid. A process
// that ends while it is read is left out.
func processes() map[int]procStat {
	ents, _ := os.ReadDir("/proc")
	procs := make(map[int]procStat, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
		// majflt cmajflt utime stime ...: comm may hold spaces and ")".
		i := strings.LastIndex(string(b), ") ")
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+2:]))
		if len(f) < 13 {
			continue
		}
		ppid, err1 := strconv.Atoi(f[1])
		utime, err2 := strconv.ParseInt(f[11], 10, 64)
		stime, err3 := strconv.ParseInt(f[12], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		procs[pid] = procStat{ppid: ppid, cpu: time.Duration(utime+stime) * time.Second / userHZ}
	}
	return procs
}

// children returns the pids of the processes whose parent is pid.
func children(procs map[int]procStat, pid int) []int {
	var out []int
	for child, p := range procs {
		if p.ppid == pid {
			out = append(out, child)
		}
	}
	return out
}

// descendants returns the pids of every process below pid: its children,
// theirs, and so on.
func descendants(procs map[int]procStat, pid int) []int {
	var out []int
	for next := []int{pid}; len(next) > 0; {
		kids := children(procs, next[0])
		next = append(next[1:], kids...)
		out = append(out, kids...)
	}
	return out
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
	u := cpuUse{load: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), gateway: procs[pid].cpu}
	for _, d := range descendants(procs, pid) {
		u.upstream += procs[d].cpu
	}
	return u
}

// since returns the CPU time spent between start and u. An upstream that
// started after start counts in full; one that ended is lost, which the
// loads (whose upstreams all start before the clock) do not meet.
func (u cpuUse) since(start cpuUse) cpuUse {
	return cpuUse{load: u.load - start.load, gateway: u.gateway - start.gateway, upstream: u.upstream - start.upstream}
}
