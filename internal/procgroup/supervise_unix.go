//go:build unix

package procgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// supervisorArg is the hidden first argument that makes a binary calling
// Main a supervisor.
const supervisorArg = "__wasmhost-procgroup-supervisor"

// hooked is set by Main in a process that can start supervisors: its own
// binary runs one when started with supervisorArg.
var hooked atomic.Bool

// Main makes this process a supervisor, and never returns, when it was
// started as one (see Detach); otherwise it records that the binary can
// start supervisors, and returns. A binary that runs stdio upstreams calls
// it first thing in main, and a test binary first thing in TestMain (before
// anything that looks at the environment: a supervisor has its upstream's).
// Without it Detach only starts the command in a group of its own.
func Main() {
	if len(os.Args) > 1 && os.Args[1] == supervisorArg {
		// syscall.Exit, not os.Exit: nothing is left to flush, and a
		// binary built with -race would otherwise wait a second at exit,
		// past a short grace of the go-sdk's close.
		syscall.Exit(supervise(os.Args[2:]))
	}
	hooked.Store(true)
}

// The lifeline: a pipe whose write end only this process holds (it is
// close-on-exec, so no child inherits it) and whose read end each
// supervisor gets. When this process ends, however it ends, the kernel
// closes the write end and every supervisor reads end of file.
var (
	lifelineOnce sync.Once
	lifelineR    *os.File
	lifelineW    *os.File // kept referenced: its finalizer would close it
	lifelineErr  error
)

func lifeline() (*os.File, error) {
	lifelineOnce.Do(func() {
		lifelineR, lifelineW, lifelineErr = os.Pipe()
	})
	runtime.KeepAlive(lifelineW) // never closed while this process lives
	return lifelineR, lifelineErr
}

// supervised rewrites cmd, not yet started, to run under a supervisor: this
// binary started again with supervisorArg, which starts cmd's program in
// its own place (same arguments, environment, directory and streams) and
// ends it and every process it left, once the program has exited, once the
// supervisor is sent SIGTERM, or once this process has died (the lifeline).
// It reports false, leaving cmd as it was, when the binary did not call
// Main, or cmd cannot be run so (it failed to resolve, or passes extra
// files).
func supervised(cmd *exec.Cmd, grace time.Duration) bool {
	if !hooked.Load() || cmd.Process != nil || cmd.Err != nil || cmd.Path == "" || len(cmd.ExtraFiles) > 0 {
		return false
	}
	// A program that cannot be started is left to fail Start itself, with
	// its own error ("no such file or directory"), not a supervisor's
	// "exit status 127".
	path := cmd.Path
	if !filepath.IsAbs(path) && cmd.Dir != "" {
		path = filepath.Join(cmd.Dir, path)
	}
	if _, err := exec.LookPath(path); err != nil && !errors.Is(err, exec.ErrDot) {
		return false
	}
	self, err := selfPath()
	if err != nil {
		return false
	}
	r, err := lifeline()
	if err != nil {
		return false
	}
	args := []string{self, supervisorArg, strconv.FormatInt(grace.Milliseconds(), 10), cmd.Path, "--"}
	cmd.Args = append(args, cmd.Args...)
	cmd.Path = self
	cmd.ExtraFiles = []*os.File{r} // fd 3 in the supervisor
	return true
}

// selfPath is how this binary is started again: /proc/self/exe on Linux,
// which works even when the file was replaced since (an upgrade while the
// daemon runs), else os.Executable.
func selfPath() (string, error) {
	if runtime.GOOS == "linux" {
		if _, err := os.Stat("/proc/self/exe"); err == nil {
			return "/proc/self/exe", nil
		}
	}
	return os.Executable()
}

// lifelineFD is the lifeline's descriptor in a supervisor.
const lifelineFD = 3

// supervise is a supervisor's main: args are the grace in milliseconds,
// the program's path, "--" and its argv. It returns the program's exit
// status, or ends itself with the signal that ended the program, so that
// the daemon sees what it would have seen of the program itself.
func supervise(args []string) int {
	if len(args) < 4 || args[2] != "--" {
		fmt.Fprintln(os.Stderr, "wasmhost: bad supervisor arguments")
		return 127
	}
	graceMS, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || graceMS < 0 {
		graceMS = DefaultGrace.Milliseconds()
	}
	grace := time.Duration(graceMS) * time.Millisecond
	// Children are started from this thread only, so that the parent-death
	// signal asked for them (set on the forking thread's death, on Linux)
	// fires only when the supervisor dies.
	runtime.LockOSThread()
	// A terminal's signals are not the supervisor's to act on (it is in a
	// group of its own anyway); SIGTERM is, below. They are caught, not
	// ignored: an ignored signal would stay ignored in the program.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	syscall.CloseOnExec(lifelineFD)
	life := os.NewFile(lifelineFD, "lifeline")
	becomeSubreaper()

	child := exec.Command(args[1])
	child.Args = args[3:]
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.SysProcAttr = childAttr()
	if err := child.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "wasmhost: starting %s: %v\n", args[1], err)
		return 127
	}
	// The program alone holds standard input and output now: its end
	// shows at once on the daemon's side.
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		_ = syscall.Dup2(int(null.Fd()), 0)
		_ = syscall.Dup2(int(null.Fd()), 1)
		_ = null.Close()
	}

	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	died := make(chan struct{})
	if life != nil {
		go func() {
			var b [1]byte
			for {
				if _, err := life.Read(b[:]); err != nil {
					close(died)
					return
				}
			}
		}()
	}

	var werr error
	done := false
	select {
	case werr = <-exited:
		done = true
	case <-term:
	case <-died:
	}
	endAll(child.Process.Pid, grace, term)
	if !done {
		werr = <-exited
	}
	return exitLike(werr, child.ProcessState)
}

// endAll ends what is left of the program: its process group (pgid, which
// the program led) and every descendant of the supervisor, those that
// left the group with setsid included (on Linux, where /proc tells them
// and the supervisor, a subreaper, inherits them when orphaned). It sends
// SIGTERM, waits up to grace for them to be gone, then sends SIGKILL until
// they are (at most killWait). A SIGTERM meanwhile (hurry: the go-sdk's
// close, which SIGKILLs the supervisor a grace later) cuts the grace
// short.
func endAll(pgid int, grace time.Duration, hurry <-chan os.Signal) {
	self := os.Getpid()
	send := func(sig syscall.Signal) {
		_ = syscall.Kill(-pgid, sig)
		for _, pid := range descendants(self) {
			_ = syscall.Kill(pid, sig)
		}
	}
	left := func() bool { return groupAlive(pgid) || len(descendants(self)) > 0 }
	if !left() {
		return
	}
	send(syscall.SIGTERM)
	timeout := time.After(grace)
	tick := time.NewTicker(groupPollInterval)
	defer tick.Stop()
wait:
	for {
		select {
		case <-tick.C:
			if !left() {
				return
			}
			continue
		case <-timeout:
		case <-hurry:
		}
		break wait
	}
	for deadline := time.Now().Add(killWait); ; {
		send(syscall.SIGKILL)
		if !left() || time.Now().After(deadline) {
			return
		}
		time.Sleep(groupPollInterval)
	}
}

// exitLike returns the exit status of the program's wait, which returned
// err with state, or ends this process with the signal that ended the
// program (one whose default action is to end the process, as the Go
// runtime does it; another gives 128 plus its number, as a shell does).
func exitLike(err error, state *os.ProcessState) int {
	if state == nil {
		fmt.Fprintf(os.Stderr, "wasmhost: waiting for the server: %v\n", err)
		return 127
	}
	ws, ok := state.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return state.ExitCode()
	}
	sig := ws.Signal()
	switch sig {
	case syscall.SIGKILL, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGALRM, syscall.SIGUSR1, syscall.SIGUSR2:
		signal.Reset(sig)
		_ = syscall.Kill(os.Getpid(), sig)
		time.Sleep(time.Second) // the signal ends the process meanwhile
	}
	return 128 + int(sig)
}

// descendants returns the live (not zombie) descendants of pid, by the
// parent links of /proc; nil where /proc cannot be read.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := make(map[int][]int)
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, ok := procStat(e.Name())
		if !ok || len(f) < 2 || f[0] == "Z" {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := children[pid]
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, p)
		queue = append(queue, children[p]...)
	}
	return out
}

// ServerPID returns the pid of the program a supervisor started, when pid
// is a supervisor's (Detach) and /proc tells, or 0 when that program has
// ended (the supervisor is finishing); pid itself otherwise. Of the
// supervisor's children it is the one started first: the program's
// orphans, which the supervisor inherits, came after it.
func ServerPID(pid int) int {
	entries, err := os.ReadDir("/proc")
	if err != nil || pid <= 0 {
		return pid
	}
	parent := strconv.Itoa(pid)
	best, bestStart := pid, uint64(0)
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, ok := procStat(e.Name())
		// f[19] is starttime, the 22nd field of /proc/PID/stat.
		if !ok || len(f) < 20 || f[1] != parent || f[0] == "Z" {
			continue
		}
		start, err := strconv.ParseUint(f[19], 10, 64)
		if err == nil && (best == pid || start < bestStart) {
			best, bestStart = p, start
		}
	}
	switch {
	case best == pid && isSupervisor(pid):
		return 0 // the program has ended; the supervisor is finishing
	case best != pid && !isSupervisor(pid):
		return pid
	}
	return best
}

// isSupervisor reports whether process pid runs as a supervisor, by its
// command line.
func isSupervisor(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	return len(args) > 1 && args[1] == supervisorArg
}
