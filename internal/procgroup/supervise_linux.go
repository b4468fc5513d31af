//go:build linux

package procgroup

import "syscall"

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER of prctl(2).
const prSetChildSubreaper = 36

// becomeSubreaper makes the supervisor the parent of every orphan among its
// descendants, those that left its program's group with setsid included,
// so that it can find and end them (descendants).
func becomeSubreaper() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// childAttr starts the program in a group of its own, killed by the
// kernel should the supervisor die first (the second line: the supervisor
// itself ends it whenever it can).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
