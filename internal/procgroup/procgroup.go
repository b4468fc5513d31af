// Package procgroup runs a stdio MCP upstream in a process group of its own
// and ends the whole group when its connection closes, and, in a binary
// that calls [Main], when the host dies, however it dies.
//
// The go-sdk's CommandTransport closes a server's stdin and then signals the
// server process alone, so whatever the server started (the real server
// behind a wrapper script, a helper) would outlive it. A command given to
// [Detach] gets a group of its own, which also keeps a Ctrl-C meant for the
// host from reaching it behind the host's back; a connection wrapped with
// [Conn] or made by a transport wrapped with [Transport] ends that group
// when it closes ([Kill]). On systems without process groups both do
// nothing.
//
// # The supervisor
//
// A host that dies by SIGKILL (or a crash, or the OOM killer) closes
// nothing: its upstreams would run on, orphans. So in a binary whose main
// (and a test binary's TestMain) calls [Main] first, Detach runs the command
// under a supervisor: the same binary started again with a hidden first
// argument, which starts the command in its own place (same arguments,
// environment, directory; standard streams passed on, not copied) and
// exits with the command's exit status, or by the signal that ended it, so
// the host still sees "exit status 3" or "signal: killed" (the pid the host
// knows is the supervisor's; [ServerPID] finds the command's). The supervisor ends the command and every
// process it left (SIGTERM, the transport's grace, then SIGKILL) when
// the command has exited, when it is sent SIGTERM (the go-sdk's close), and
// when the host has died. It learns of the host's death from a lifeline: a
// pipe whose write end only the host holds (close-on-exec, so no other
// child has it) and whose read end every supervisor reads; the kernel
// closes the write end when the host ends, by any signal, and the read
// gives end of file. That works on every Unix, and unlike the parent-death
// signal (prctl PR_SET_PDEATHSIG) it is not set off when the host thread
// that started the supervisor exits while the host lives on.
//
// What is guaranteed:
//
//   - On Linux, every descendant of the command ends, including those that
//     left its group with setsid or double-forked: the supervisor is a
//     child subreaper (PR_SET_CHILD_SUBREAPER), so orphans among them
//     become its children instead of init's, and it finds them by the
//     parent links of /proc. The command itself also gets the parent-death
//     signal SIGKILL, relative to the supervisor (which starts it from a
//     thread it never leaves), as a second line should the supervisor
//     itself be killed; what the command started is then left to the
//     kernel's orphan rules.
//   - On other Unix systems, the command's process group ends; a process
//     that left it (setsid) is not found.
//   - A binary that does not call Main (and Windows) gets no supervisor:
//     the group ends when the connection closes, not when the host dies.
package procgroup

import (
	"context"
	"errors"
	"os/exec"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultGrace is how long Kill waits after SIGTERM before SIGKILL when the
// transport sets no TerminateDuration: the go-sdk's own default for the
// server process.
const DefaultGrace = 5 * time.Second

// supervisorMargin is what a supervisor may take beyond its grace to end
// what is left of a server: a second after SIGKILL (killWait), and one more
// for a loaded machine.
const supervisorMargin = 2 * time.Second

// MaxClose is about the longest the Close of a connection from Conn takes
// with the default graces, for a server that ignores both stdin's end and
// SIGTERM: the go-sdk waits DefaultGrace after closing stdin and
// DefaultGrace after SIGTERM, then Kill waits DefaultGrace more for the
// rest of the group, plus a margin. Under a supervisor the go-sdk waits
// DefaultGrace+supervisorMargin twice, 14 s, and the supervisor has ended
// the rest. A host that waits this long at shutdown leaves no such process
// behind.
const MaxClose = 3*DefaultGrace + 2*time.Second

// Transport returns t, a transport that runs ct (t may be ct itself or a
// wrapper of it), with ct's command detached into a group of its own and
// every connection wrapped with Conn. When the command runs under a
// supervisor, ct.TerminateDuration (the grace) is raised by
// supervisorMargin, the time the supervisor may need beyond the grace.
func Transport(t mcp.Transport, ct *mcp.CommandTransport) mcp.Transport {
	grace := ct.TerminateDuration
	if grace <= 0 {
		grace = DefaultGrace
	}
	if detach(ct.Command, grace) {
		// The supervisor needs up to grace and killWait to end what is
		// left once the server has exited, and as long after the go-sdk's
		// SIGTERM: waiting that much (and a margin) before each of the
		// go-sdk's next steps keeps its SIGKILL from cutting that short.
		ct.TerminateDuration = grace + supervisorMargin
	}
	return &transport{Transport: t, ct: ct}
}

type transport struct {
	mcp.Transport
	ct *mcp.CommandTransport

	mu     sync.Mutex
	exited error
}

func (t *transport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return newConn(c, t.ct, func(err error) {
		t.mu.Lock()
		t.exited = err
		t.mu.Unlock()
	}), nil
}

// Exited returns how the command's process ended (the *exec.ExitError of
// its wait: "exit status 3", "signal: killed") once a connection the
// transport made has closed; nil before, or after a clean exit. It makes
// the transport a pool.ExitReporter.
func (t *transport) Exited() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.exited
}

// Conn wraps c, a connection to the command of ct (detached with Detach),
// so that closing it, after the go-sdk's own close, ends what is left of
// the command's process group.
func Conn(c mcp.Connection, ct *mcp.CommandTransport) mcp.Connection { return newConn(c, ct, nil) }

// newConn is Conn, telling exited (when not nil) how the process ended.
func newConn(c mcp.Connection, ct *mcp.CommandTransport, exited func(error)) *conn {
	grace := ct.TerminateDuration
	if grace <= 0 {
		grace = DefaultGrace
	}
	return &conn{Connection: c, ct: ct, grace: grace, exited: exited}
}

type conn struct {
	mcp.Connection
	ct    *mcp.CommandTransport
	grace time.Duration

	exited func(error) // told how the process ended, if set (see transport)

	once sync.Once
	err  error
}

// Close closes the connection the go-sdk way (the server has exited or been
// killed when it returns), then ends the rest of its process group.
func (c *conn) Close() error {
	c.once.Do(func() {
		c.err = c.Connection.Close()
		Kill(c.ct.Command, c.grace)
		if exit := (*exec.ExitError)(nil); c.exited != nil && errors.As(c.err, &exit) {
			c.exited(exit)
		}
	})
	return c.err
}
