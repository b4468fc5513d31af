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

// A fallbackTransport reaches a "url" server the way the MCP specification
// tells clients to support servers of either HTTP transport: it speaks
// streamable HTTP, and if the server answers the first POST with a 4xx
// status, it opens the HTTP+SSE transport of protocol 2024-11-05 on the same
// URL instead and sends that first message again over it. gemini-cli's
// "url" means an SSE endpoint and most servers now serve streamable HTTP, so
// a pasted entry works with either. ("httpUrl" is streamable HTTP only.)
type fallbackTransport struct {
	endpoint string
	client   *http.Client
}

// Connect opens the streamable HTTP connection; nothing is sent yet.
func (t *fallbackTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	probe := &firstPost{base: t.client.Transport}
	if probe.base == nil {
		probe.base = http.DefaultTransport
	}
	hc := *t.client
	hc.Transport = probe
	conn, err := (&mcp.StreamableClientTransport{Endpoint: t.endpoint, HTTPClient: &hc}).Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &fallbackConn{t: t, probe: probe, cur: conn, decided: make(chan struct{}), closed: make(chan struct{})}, nil
}

// firstPost is a RoundTripper that records the status of the first POST
// response it sees.
type firstPost struct {
	base   http.RoundTripper
	status atomic.Int32 // 0 until the first POST has an answer
}

func (p *firstPost) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := p.base.RoundTrip(req)
	if err == nil && req.Method == http.MethodPost {
		p.status.CompareAndSwap(0, int32(resp.StatusCode))
	}
	return resp, err
}

// A fallbackConn is the connection a fallbackTransport makes: streamable
// HTTP until its first write shows the server does not speak it. Reads wait
// for the first write to settle which connection answers.
type fallbackConn struct {
	t       *fallbackTransport
	probe   *firstPost
	decided chan struct{} // closed once the first write chose cur
	closed  chan struct{} // closed by Close

	mu        sync.Mutex
	cur       mcp.Connection
	stopSSE   context.CancelFunc // ends the SSE stream's context, once cur is one
	wrote     bool
	closeOnce sync.Once
}

func (c *fallbackConn) conn() mcp.Connection {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// Read reads from the chosen connection.
func (c *fallbackConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-c.decided:
	case <-c.closed:
		return nil, mcp.ErrConnectionClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return c.conn().Read(ctx)
}

// Write sends msg. The first write decides the transport: a 4xx answer to
// it over streamable HTTP switches to HTTP+SSE, and msg is sent there.
func (c *fallbackConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	c.mu.Lock()
	first := !c.wrote
	c.wrote = true
	c.mu.Unlock()
	if !first {
		select {
		case <-c.decided:
		case <-c.closed:
			return mcp.ErrConnectionClosed
		case <-ctx.Done():
			return ctx.Err()
		}
		return c.conn().Write(ctx, msg)
	}
	defer close(c.decided)
	err := c.cur.Write(ctx, msg)
	if status := c.probe.status.Load(); err == nil || status < 400 || status > 499 {
		return err
	}
	// The SSE stream is a GET that lives as long as the connection under
	// the context it was opened with, so it gets one of its own that Close
	// ends; ctx still bounds opening it.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	sse, serr := (&mcp.SSEClientTransport{Endpoint: c.t.endpoint, HTTPClient: c.t.client}).Connect(sctx)
	if !stop() && serr == nil {
		_ = sse.Close()
		serr = ctx.Err()
	}
	if serr != nil {
		cancel()
		return fmt.Errorf("%w (the HTTP+SSE transport failed too: %w)", err, serr)
	}
	c.mu.Lock()
	select {
	case <-c.closed: // Close ran meanwhile and closed the old connection
		c.mu.Unlock()
		_ = sse.Close()
		cancel()
		return mcp.ErrConnectionClosed
	default:
	}
	old := c.cur
	c.cur, c.stopSSE = sse, cancel
	c.mu.Unlock()
	_ = old.Close()
	return sse.Write(ctx, msg)
}

// Close closes the current connection.
func (c *fallbackConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.closed)
		c.mu.Lock()
		cur, stop := c.cur, c.stopSSE
		c.mu.Unlock()
		err = cur.Close()
		if stop != nil {
			stop()
		}
	})
	return err
}

// SessionID returns the current connection's session id.
func (c *fallbackConn) SessionID() string { return c.conn().SessionID() }

var _ mcp.Connection = (*fallbackConn)(nil)
