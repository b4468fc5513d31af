// Package procgroup runs a stdio MCP upstream in a process group of its own
// and ends the whole group when its connection closes, and, in a binary
// that calls [Main], when the host dies, however it dies.
//
// [Detach] gives a command its own group; a connection wrapped with [Conn]
// or made by a transport wrapped with [Transport] ends that group when it
// closes ([Kill]). In a binary whose main (and a test binary's TestMain)
// calls [Main] first, Detach runs the command under a supervisor: the same
// binary started again. The supervisor starts the command and passes its
// exit status back ([ServerPID] finds the command's pid). It ends the
// command and everything it left when the command exits, when the
// supervisor gets SIGTERM, or when the host dies (a lifeline pipe reads
// end of file).
//
// What is guaranteed: on Linux every descendant ends, setsid ones included
// (the supervisor is a child subreaper); on other Unix systems the
// command's process group ends; a binary without Main, and Windows, get no
// supervisor, so the group ends with the connection only. It touches
// processes and /proc only. Why a supervisor and a lifeline rather than
// the parent-death signal: docs/design.md.
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
