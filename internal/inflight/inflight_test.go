package inflight

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGate(t *testing.T) {
	var g Gate
	require.NoError(t, g.Wait(context.Background()), "nothing under way")
	require.True(t, g.Enter())
	require.True(t, g.Enter())
	g.Close()
	assert.False(t, g.Enter(), "closed")
	assert.Equal(t, 2, g.Len())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := g.Wait(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "2 still under way")

	waited := make(chan error, 1)
	go func() { waited <- g.Wait(context.Background()) }()
	g.Leave()
	select {
	case <-waited:
		t.Fatal("Wait returned with one under way")
	case <-time.After(10 * time.Millisecond):
	}
	g.Leave()
	require.NoError(t, <-waited)
	assert.Panics(t, g.Leave)
}

// TestGateHammer: many goroutines entering and leaving while others wait;
// every Wait returns once all have left.
func TestGateHammer(t *testing.T) {
	var g Gate
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 1000 {
				if g.Enter() {
					g.Leave()
				}
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for range 100 {
				// The count comes back to zero again and again, and for good
				// once the enterers are done: a lost wake-up times out.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				assert.NoError(t, g.Wait(ctx))
				cancel()
			}
		})
	}
	wg.Wait()
	assert.Zero(t, g.Len())
	g.Close()
	require.NoError(t, g.Wait(context.Background()))
}
