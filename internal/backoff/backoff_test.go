package backoff_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/wasmhost/wasmhost/internal/backoff"
)

// TestSchedule: a key is scheduled once when it goes down, retried when
// due, backed off on each failure up to Max, and, once brought back, backed
// off further if it goes down again within Memory, and forgotten after.
func TestSchedule(t *testing.T) {
	s := backoff.Schedule[string]{Min: time.Second, Max: 4 * time.Second, Memory: time.Minute}
	now := time.Now()
	scheduled, d := s.Down("a", now)
	assert.True(t, scheduled)
	assert.Equal(t, time.Second, d)
	scheduled, _ = s.Down("a", now)
	assert.False(t, scheduled, "scheduled once")
	assert.False(t, s.Due("a", now))
	assert.True(t, s.Due("a", now.Add(time.Second)))
	assert.Equal(t, 2*time.Second, s.Failed("a"))
	assert.Equal(t, 4*time.Second, s.Failed("a"))
	assert.Equal(t, 4*time.Second, s.Failed("a"), "at most Max")

	s.Recovered("a")
	up := func(string) bool { return false }
	s.Sweep(time.Now(), up)
	assert.Equal(t, 1, s.Len(), "a recovery is remembered")
	scheduled, d = s.Down("a", time.Now())
	assert.True(t, scheduled, "down again after a recovery")
	assert.Equal(t, 4*time.Second, d, "backed off further, not from Min")

	s.Recovered("a")
	s.Sweep(time.Now().Add(2*time.Minute), up)
	assert.Zero(t, s.Len(), "forgotten after Memory")
	_, d = s.Down("a", time.Now())
	assert.Equal(t, time.Second, d, "from Min again")
	s.Forget("a")
	assert.Zero(t, s.Len())
	assert.False(t, s.Due("b", time.Now()), "an unknown key is never due")
}
