package pool

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

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

// boundAnswers returns t with its connections closed once their upstream
// has more than MaxUnansweredRequests requests unanswered, or t itself
// when it is reached over HTTP: the go-sdk's HTTP connections cannot be
// wrapped (the client passes them its session state through an unexported
// method).
func boundAnswers(t mcp.Transport) mcp.Transport {
	if _, overHTTP := WithRoundTripper(t, func(rt http.RoundTripper) http.RoundTripper { return rt }); overHTTP {
		return t
	}
	return &answersTransport{Transport: t}
}

type answersTransport struct{ mcp.Transport }

func (t *answersTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &answersConn{Connection: c}, nil
}

// An answersConn counts the upstream's requests read whose answers are not
// yet written.
type answersConn struct {
	mcp.Connection
	unanswered atomic.Int64
	closeOnce  sync.Once
}

func (c *answersConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		if n := c.unanswered.Add(1); n > MaxUnansweredRequests {
			// Closed beneath the go-sdk, whose own close would wait
			// for the answers it cannot write.
			c.closeOnce.Do(func() { go c.Connection.Close() })
			return nil, fmt.Errorf("the upstream has more than %d requests of its own unanswered, their answers unread: the connection is closed", MaxUnansweredRequests)
		}
	}
	return msg, err
}

func (c *answersConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	if _, ok := msg.(*jsonrpc.Response); ok {
		c.unanswered.Add(-1)
	}
	return err
}
