//go:build unix

package procgroup

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Detach starts cmd in a process group of its own, so a Ctrl-C meant for
// the host does not also kill its upstreams behind its back: the host
// closes them itself when it shuts down (and Kill ends what the upstream
// left behind). In a binary that called Main it also runs cmd under a
// supervisor (see the package documentation), which ends cmd's processes
// when the host dies; it gives their leftovers DefaultGrace between
// SIGTERM and SIGKILL.
func Detach(cmd *exec.Cmd) { detach(cmd, DefaultGrace) }

// detach is Detach with grace between SIGTERM and SIGKILL for the
// supervisor; it reports whether cmd runs under one.
func detach(cmd *exec.Cmd, grace time.Duration) bool {
	ok := supervised(cmd, grace)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	return ok
}

// groupPollInterval is how often Kill checks whether the group is gone.
const groupPollInterval = 20 * time.Millisecond

// Kill ends the processes left in the process group Detach made for
// cmd, once cmd's connection is closed (the go-sdk closes the leader's
// stdin and signals the leader only, so a wrapper script's children would
// outlive it): it sends SIGTERM to the group, waits up to grace for the
// group to be gone, then sends SIGKILL and waits (a moment, at most
// killWait) for the kernel to end them. It does nothing when cmd was not
// started in a group of its own, and never signals the host's own group.
func Kill(cmd *exec.Cmd, grace time.Duration) {
	if cmd.Process == nil || cmd.SysProcAttr == nil || !cmd.SysProcAttr.Setpgid || cmd.SysProcAttr.Pgid != 0 {
		return
	}
	// With Setpgid and Pgid 0 the leader's pid is the group id, and it is
	// not reused while a process of the group lives.
	pgid := cmd.Process.Pid
	if pgid <= 1 || pgid == syscall.Getpgrp() {
		return
	}
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil {
		return // ESRCH: nothing left
	}
	if waitGroup(pgid, grace) {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	waitGroup(pgid, killWait)
}

// killWait bounds the wait for a group to be gone after SIGKILL, which the
// kernel carries out at once but not synchronously.
const killWait = time.Second

// waitGroup waits up to d for group pgid to be gone and reports whether it
// is.
func waitGroup(pgid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(groupPollInterval)
	}
	return true
}

// groupAlive reports whether a process of group pgid still runs. Zombies
// do not count: an orphan that died waits for init to reap it, and some
// inits (in containers) never do. Where /proc cannot be read, any process
// of the group counts.
func groupAlive(pgid int) bool {
	if errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	seen := false
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		f, ok := procStat(e.Name())
		if !ok {
			continue // gone meanwhile
		}
		seen = true
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			return true
		}
	}
	return !seen // no stat file read: /proc is not Linux's
}

// Ended reports whether process pid has ended: it is gone, or it is a
// zombie (an orphan whose end waits for an init that may never reap it).
func Ended(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	f, ok := procStat(strconv.Itoa(pid))
	return ok && len(f) > 0 && f[0] == "Z"
}

// procStat returns the fields of /proc/PID/stat after the command name:
// state, ppid, pgrp, and so on. The name may hold spaces and parentheses,
// so the fields are counted from the last ')'. It reports false when the
// file cannot be read.
func procStat(pid string) ([]string, bool) {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return nil, true
	}
	return strings.Fields(string(stat[i+1:])), true
}
