package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/internal/procgroup"
	"github.com/wasmhost/wasmhost/internal/stderrlog"
	"github.com/wasmhost/wasmhost/pool"
)

// stderrWaitDelay bounds how long closing a stdio upstream waits for its
// stderr to be drained (a grandchild process may hold it open).
const stderrWaitDelay = 2 * time.Second

// A pidTable remembers the process id of the newest stdio upstream started
// for each transport identity, for /v1/state, until its connection closes.
type pidTable struct {
	mu   sync.Mutex
	pids map[string]int
}

func newPIDTable() *pidTable { return &pidTable{pids: make(map[string]int)} }

func (t *pidTable) set(identity string, pid int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pids[identity] = pid
}

// forget drops identity's pid if it is still pid (a newer process of the
// same identity may have been recorded since).
func (t *pidTable) forget(identity string, pid int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pids[identity] == pid {
		delete(t.pids, identity)
	}
}

// get returns the pid of the server process of identity, or 0: the pid
// recorded is its supervisor's (procgroup), the server is its child.
func (t *pidTable) get(identity string) int {
	t.mu.Lock()
	pid := t.pids[identity]
	t.mu.Unlock()
	if pid == 0 {
		return 0
	}
	return procgroup.ServerPID(pid)
}

// dial wraps base: stdio upstreams get their stderr logged (bounded, see
// stderrlog: lines cut, a burst in one record, a budget of lines) and
// their pid recorded, and every transport the progress relay can wrap is
// wrapped.
func (d *Daemon) dial(base pool.Dialer) pool.Dialer {
	return func(ctx context.Context, spec pool.Spec) (mcp.Transport, error) {
		t, err := base(ctx, spec)
		if err != nil {
			return nil, err
		}
		ct, ok := t.(*mcp.CommandTransport)
		if !ok {
			return d.relay.WrapTransport(t), nil
		}
		var stderr *stderrlog.Writer
		if ct.Command.Stderr == nil {
			log := d.log.With("component", "upstream", "server", spec.Name)
			emit := func(text string) { log.Info("upstream stderr: " + text) }
			if w := d.stderrTo; w != nil {
				emit = func(text string) { fmt.Fprintln(w, text) }
			}
			stderr = stderrlog.NewShared(emit, stderrlog.Options{}, d.stderr.Of(spec.Name, emit))
			ct.Command.Stderr = stderr
			if ct.Command.WaitDelay == 0 {
				ct.Command.WaitDelay = stderrWaitDelay
			}
		}
		return &pidTransport{Transport: procgroup.Transport(d.relay.WrapTransport(ct), ct), cmd: ct, identity: spec.Fingerprint(), pids: d.pids, stderr: stderr}, nil
	}
}

// A pidTransport records the process id once the command started, and
// forgets it when the connection closes (its Transport, from
// procgroup.Transport, makes closing the connection end the upstream's
// whole process group). It is a pool.ExitReporter: the pool dials one per
// connection attempt.
type pidTransport struct {
	mcp.Transport
	cmd      *mcp.CommandTransport
	identity string
	pids     *pidTable
	stderr   *stderrlog.Writer // nil when the command's stderr was set already
}

func (t *pidTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if t.cmd.Command.Process == nil {
		return c, nil
	}
	pid := t.cmd.Command.Process.Pid
	t.pids.set(t.identity, pid)
	return &pidConn{Connection: c, forget: sync.OnceFunc(func() { t.pids.forget(t.identity, pid) }), stderr: t.stderr}, nil
}

// Exited is that of the procgroup transport beneath.
func (t *pidTransport) Exited() error {
	if x, ok := t.Transport.(pool.ExitReporter); ok {
		return x.Exited()
	}
	return nil
}

// A pidConn forgets its process's pid when it closes, and then passes on
// what is left of its stderr.
type pidConn struct {
	mcp.Connection
	forget func()
	stderr *stderrlog.Writer
}

func (c *pidConn) Close() error {
	c.forget()
	err := c.Connection.Close()
	if c.stderr != nil {
		_ = c.stderr.Close()
	}
	return err
}
