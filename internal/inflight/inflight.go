// Package inflight counts operations under way, so that a shutdown can stop
// admitting new ones and wait for those already admitted to end. It
// touches nothing but its own counter.
package inflight

import (
	"context"
	"fmt"
	"sync"
)

// A Gate counts the operations under way. Once closed it admits no new
// ones; Wait returns when the last admitted one has ended. The zero Gate is
// open and ready to use.
type Gate struct {
	mu     sync.Mutex
	n      int           // admitted and not ended
	closed bool          // Close was called
	idle   chan struct{} // closed when n drops to 0; nil while nobody waits
}

// Enter admits an operation and reports true, or reports false once the
// gate is closed. Every admitted operation must call Leave once.
func (g *Gate) Enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.n++
	return true
}

// Leave ends an operation Enter admitted.
func (g *Gate) Leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.n < 0 {
		panic("inflight: Leave without Enter")
	}
	if g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// Close stops admitting operations. It does not wait; see Wait.
func (g *Gate) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// Wait waits until no admitted operation is under way, or until ctx ends;
// then it returns an error naming how many were still under way, wrapping
// the context's cause. Operations may be admitted while it waits unless the
// gate is closed.
func (g *Gate) Wait(ctx context.Context) error {
	g.mu.Lock()
	if g.n == 0 {
		g.mu.Unlock()
		return nil
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	idle := g.idle
	g.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%d still under way: %w", g.Len(), context.Cause(ctx))
	}
}

// Len returns the number of operations under way.
func (g *Gate) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}
