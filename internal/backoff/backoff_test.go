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
	scheduled, d := s.ScheduleRetry("a", now)
	assert.True(t, scheduled)
	assert.Equal(t, time.Second, d)
	scheduled, _ = s.ScheduleRetry("a", now)
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
	scheduled, d = s.ScheduleRetry("a", time.Now())
	assert.True(t, scheduled, "down again after a recovery")
	assert.Equal(t, 4*time.Second, d, "backed off further, not from Min")

	s.Recovered("a")
	s.Sweep(time.Now().Add(2*time.Minute), up)
	assert.Zero(t, s.Len(), "forgotten after Memory")
	_, d = s.ScheduleRetry("a", time.Now())
	assert.Equal(t, time.Second, d, "from Min again")
	s.Forget("a")
	assert.Zero(t, s.Len())
	assert.False(t, s.Due("b", time.Now()), "an unknown key is never due")
}

// TestQuiet: a schedule is quiet until a down key's retry is due or a
// recovered key's Memory runs out, and never once either has come, so a
// supervisor that skips its look while quiet neither misses a retry nor
// keeps a recovery past Memory.
func TestQuiet(t *testing.T) {
	s := backoff.Schedule[string]{Min: time.Second, Max: 4 * time.Second, Memory: time.Minute}
	now := time.Now()
	assert.True(t, s.Quiet(now), "empty")
	s.ScheduleRetry("a", now)
	assert.True(t, s.Quiet(now.Add(999*time.Millisecond)), "a's retry not due yet")
	assert.False(t, s.Quiet(now.Add(time.Second)), "a's retry due")
	assert.False(t, s.Quiet(now.Add(time.Hour)), "still due until retried")

	s.Recovered("a") // a retry brought it back: only its memory is left
	back := time.Now()
	assert.True(t, s.Quiet(back.Add(59*time.Second)), "remembered, nothing due")
	assert.False(t, s.Quiet(back.Add(61*time.Second)), "memory ran out: a sweep would drop it")

	s.ScheduleRetry("b", now)
	s.Failed("b") // next retry in 2s from the call
	assert.True(t, s.Quiet(now.Add(1500*time.Millisecond)), "b's retry put off")
}

// TestDownAfterMemory: a key that comes back and goes down again after
// Memory starts from Min even if no Sweep dropped it in between (a
// supervisor that skipped its looks while quiet).
func TestDownAfterMemory(t *testing.T) {
	s := backoff.Schedule[string]{Min: time.Second, Max: 8 * time.Second, Memory: time.Minute}
	s.ScheduleRetry("a", time.Now())
	s.Failed("a")
	s.Recovered("a")
	scheduled, d := s.ScheduleRetry("a", time.Now().Add(2*time.Minute))
	assert.True(t, scheduled)
	assert.Equal(t, time.Second, d, "from Min again")
}
