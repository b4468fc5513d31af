// Package procstat reads what /proc/<pid>/stat says of every process on
// the machine (Linux only): its parent, its CPU time and its resident
// size. The benchmarks and peakmem use it to follow a process's tree.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// A Proc is one process as its /proc/<pid>/stat line describes it.
type Proc struct {
	PPID int
	CPU  time.Duration // user and system time of all its threads
	RSS  int64         // resident size, bytes
}

// userHZ is the unit of the times in /proc/<pid>/stat: Linux fixes it at
// 100 for user space, whatever the kernel's own tick.
const userHZ = 100

// pageSize is the unit of the rss field.
var pageSize = int64(os.Getpagesize())

// Read returns every process, by pid. A process that ends while it is read
// is left out.
func Read() (map[int]Proc, error) {
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("procstat: list /proc: %w", err)
	}
	out := make(map[int]Proc, len(dir))
	for _, e := range dir {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone
		}
		if p, ok := Parse(b); ok {
			out[pid] = p
		}
	}
	return out, nil
}

// Parse reads the parent (field 4), user and system time (fields 14 and
// 15, in 1/100 s) and rss (field 24, in pages) of a /proc/<pid>/stat line.
// The command name (field 2) is in parentheses and may hold spaces and
// parentheses itself, so fields are counted from the last ')'.
func Parse(b []byte) (Proc, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Proc{}, false
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3 (state)
	if len(f) < 22 {
		return Proc{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	utime, err2 := strconv.ParseInt(string(f[11]), 10, 64)
	stime, err3 := strconv.ParseInt(string(f[12]), 10, 64)
	rss, err4 := strconv.ParseInt(string(f[21]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return Proc{}, false
	}
	return Proc{PPID: ppid, CPU: time.Duration(utime+stime) * time.Second / userHZ, RSS: rss * pageSize}, true
}

// Children returns the pids of the processes in procs whose parent is pid.
func Children(procs map[int]Proc, pid int) []int {
	var out []int
	for child, p := range procs {
		if p.PPID == pid {
			out = append(out, child)
		}
	}
	return out
}

// Descendants returns the pids of every process in procs below pid: its
// children, theirs, and so on.
func Descendants(procs map[int]Proc, pid int) []int {
	children := make(map[int][]int, len(procs))
	for child, p := range procs {
		children[p.PPID] = append(children[p.PPID], child)
	}
	var out []int
	seen := map[int]bool{pid: true}
	for stack := children[pid]; len(stack) > 0; {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
		stack = append(stack, children[p]...)
	}
	return out
}
