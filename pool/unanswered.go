package pool

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxUnansweredRequests bounds the requests an upstream has sent on one
// connection (pings, sampling, elicitation, roots) whose answers are not
// yet written. The go-sdk handles each on a goroutine of its own, and
// writing its answer waits for the upstream to read: an upstream that
// sends requests and stops reading would otherwise hold a goroutine and
// an answer for each, as many as it sends. Past the bound the connection
// is closed, as if the upstream had gone away.
const MaxUnansweredRequests = 1024

// errTooManyUnanswered is why a connection whose upstream has more than
// MaxUnansweredRequests requests unanswered is closed.
var errTooManyUnanswered = fmt.Errorf("the upstream has more than %d requests of its own unanswered (their answers unread, or still with the clients): the connection is closed", MaxUnansweredRequests)

// StalledWriteBound is how long a write may wait on a stdio server that
// has no call timeout ("timeout" absent or 0) before its connection is
// closed (see watchWrites). Such a server's calls may run as long as their
// clients wait, and one that works on a call without reading its input (a
// synchronous tool in a single-threaded server) leaves writes waiting
// once its pipe is full; the connect timeout (30 s by default), which
// bounded these writes at first, would end its long calls. A server with
// a call timeout has its writes bounded by that timeout.
const StalledWriteBound = 5 * time.Minute

// writeBound is how long a write to the server of spec may wait before
// its connection is closed: its call timeout, or StalledWriteBound when
// its calls are unbounded.
func writeBound(spec Spec) time.Duration {
	if spec.Timeout > 0 {
		return spec.Timeout
	}
	return StalledWriteBound
}

// readsNothing returns why a connection one of whose writes waited
// timeout is closed.
func readsNothing(timeout time.Duration) error {
	return fmt.Errorf("a write to the upstream waited %v: it reads nothing, the connection is closed", timeout)
}

// watchWrites returns t with the connections it makes closed when their
// upstream reads nothing: one of their writes waits timeout (writeBound; a write
// cannot be cut short otherwise, whatever its context says, and every
// later one waits behind it), or it has more than MaxUnansweredRequests
// requests unanswered. It returns t itself when t is reached over HTTP:
// the go-sdk's HTTP connections cannot be wrapped (the client passes
// them its session state through an unexported method).
func watchWrites(t mcp.Transport, timeout time.Duration) mcp.Transport {
	if _, overHTTP := WithRoundTripper(t, func(rt http.RoundTripper) http.RoundTripper { return rt }); overHTTP {
		return t
	}
	return &writesTransport{Transport: t, timeout: timeout}
}

type writesTransport struct {
	mcp.Transport
	timeout time.Duration
}

func (t *writesTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &writesConn{Connection: c, timeout: t.timeout}, nil
}

// A writesConn is a connection whose upstream must read what it is sent
// (see watchWrites).
type writesConn struct {
	mcp.Connection
	timeout    time.Duration
	unanswered atomic.Int64 // the upstream's requests read, less the answers written
	closing    sync.Once
	cause      atomic.Pointer[error] // why it was closed, when it was for its upstream reading nothing
}

// fail closes the connection beneath the go-sdk (whose own close would
// wait for the writes that wait) for cause, which its reads return.
func (c *writesConn) fail(cause error) {
	c.closing.Do(func() {
		c.cause.Store(&cause)
		go c.Connection.Close()
	})
}

func (c *writesConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err != nil {
		if cause := c.cause.Load(); cause != nil {
			return nil, *cause
		}
		return nil, err
	}
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() && c.unanswered.Add(1) > MaxUnansweredRequests {
		c.fail(errTooManyUnanswered)
		return nil, errTooManyUnanswered
	}
	return msg, nil
}

func (c *writesConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	stalled := time.AfterFunc(c.timeout, func() { c.fail(readsNothing(c.timeout)) })
	err := c.Connection.Write(ctx, msg)
	stalled.Stop()
	if _, ok := msg.(*jsonrpc.Response); ok {
		c.unanswered.Add(-1)
	}
	if cause := c.cause.Load(); err != nil && cause != nil {
		return errors.Join(err, *cause)
	}
	return err
}
