package mcptest

import (
	"sync"
	"testing"
)

func lockAndUnlock(mu *sync.Mutex) {
	mu.Lock()
	defer mu.Unlock() // the wait for the lock is the point
}

// TestBlockedIn: BlockedIn sees a goroutine waiting for a mutex in the
// function named, and no longer once it got it and returned.
func TestBlockedIn(t *testing.T) {
	const fn = "github.com/wasmhost/wasmhost/internal/mcptest.lockAndUnlock"
	var mu sync.Mutex
	mu.Lock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		lockAndUnlock(&mu)
	}()
	WaitFor(t, EventWithin, func() bool { return BlockedIn("sync.Mutex.Lock", fn) }, Stacks, "the goroutine waits for the lock")
	if BlockedIn("sync.Mutex.Lock", fn+"x") || BlockedIn("chan receive", fn) {
		t.Fatalf("BlockedIn matched another function or state:\n%s", Stacks())
	}
	mu.Unlock()
	<-done
	if BlockedIn("sync.Mutex.Lock", fn) {
		t.Fatalf("BlockedIn after the goroutine ended:\n%s", Stacks())
	}
}
