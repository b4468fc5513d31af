package demoserver

import (
	"context"
	"errors"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ErrRefused is what a Subscriptions refuses a subscribe request with
// while Refuse says to.
var ErrRefused = errors.New("subscription refused")

// A Subscriptions counts what a server's subscribe and unsubscribe handlers
// are asked, per client session and URI, and can refuse subscribe requests.
// The go-sdk keeps the subscribers and notifies them; the count is for
// seeing what an upstream was asked. The demo server has one, and tests
// give servers of their own one. Its zero value is ready to use.
type Subscriptions struct {
	mu     sync.Mutex
	n      map[*mcp.ServerSession]map[string]int
	refuse int
}

// Subscribe is a ServerOptions.SubscribeHandler.
func (c *Subscriptions) Subscribe(_ context.Context, req *mcp.SubscribeRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refuse > 0 {
		c.refuse--
		return ErrRefused
	}
	c.add(req.Session, req.Params.URI, 1)
	return nil
}

// Unsubscribe is a ServerOptions.UnsubscribeHandler.
func (c *Subscriptions) Unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.add(req.Session, req.Params.URI, -1)
	return nil
}

// add counts d subscriptions of ss to uri. c.mu is held.
func (c *Subscriptions) add(ss *mcp.ServerSession, uri string, d int) {
	if c.n == nil {
		c.n = make(map[*mcp.ServerSession]map[string]int)
	}
	if c.n[ss] == nil {
		c.n[ss] = make(map[string]int)
	}
	c.n[ss][uri] += d
}

// Refuse makes the next n subscribe requests fail.
func (c *Subscriptions) Refuse(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refuse = n
}

// Count returns how many subscriptions each URI has from the client
// sessions of srv still connected (the go-sdk forgets a session's
// subscriptions, without a call, when it ends).
func (c *Subscriptions) Count(srv *mcp.Server) map[string]int {
	// Sessions listed with mu held: one that connects meanwhile cannot
	// have counted a subscription yet.
	c.mu.Lock()
	defer c.mu.Unlock()
	live := make(map[*mcp.ServerSession]bool)
	for ss := range srv.Sessions() {
		live[ss] = true
	}
	out := make(map[string]int)
	for ss, m := range c.n {
		if !live[ss] {
			delete(c.n, ss)
			continue
		}
		for uri, n := range m {
			if n != 0 {
				out[uri] += n
			}
		}
	}
	return out
}
