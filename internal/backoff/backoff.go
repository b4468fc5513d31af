// Package backoff is the retry schedule the daemon's and stdio mode's
// supervisors share: exponential backoff per key, and a memory of recent
// recoveries, so that a key that goes down again soon after a retry brought
// it back is retried less and less often instead of from the start. It
// only computes delays: the supervisors wait and retry.
package backoff

import "time"

// A Schedule is the backoff state of every key currently down, or recently
// brought back. Its zero value is not usable: set Min, Max and Memory. It is
// not safe for concurrent use.
type Schedule[K comparable] struct {
	// Min is the first delay, Max the longest; each failure doubles it.
	Min, Max time.Duration
	// Memory is how long a key must stay up after a retry brought it back
	// before its delay starts from Min again.
	Memory time.Duration

	m map[K]*state
}

type state struct {
	next      time.Time
	delay     time.Duration
	recovered time.Time // when a retry last brought it back; zero while down
}

// ScheduleRetry records that k is down at now and schedules its retry,
// unless one is already scheduled. It reports whether it scheduled one just
// now (k was not down before, or went down again since a retry brought it
// back), with the delay until the retry; a caller says so once.
func (s *Schedule[K]) ScheduleRetry(k K, now time.Time) (scheduled bool, delay time.Duration) {
	if s.m == nil {
		s.m = make(map[K]*state)
	}
	st := s.m[k]
	switch {
	case st == nil || !st.recovered.IsZero() && now.Sub(st.recovered) > s.Memory:
		// New, or back for longer than Memory (not swept yet): from Min.
		st = &state{next: now.Add(s.Min), delay: s.Min}
		s.m[k] = st
	case !st.recovered.IsZero():
		st.recovered = time.Time{}
		st.delay = min(2*st.delay, s.Max)
		st.next = now.Add(st.delay)
	default:
		return false, st.delay
	}
	return true, st.delay
}

// Due reports whether k's retry is due at now.
func (s *Schedule[K]) Due(k K, now time.Time) bool {
	st := s.m[k]
	return st != nil && !now.Before(st.next)
}

// Failed records that a retry of k failed (or was put off) and returns the
// delay until the next one.
func (s *Schedule[K]) Failed(k K) time.Duration {
	st := s.m[k]
	if st == nil {
		return s.Min
	}
	st.delay = min(2*st.delay, s.Max)
	st.next = time.Now().Add(st.delay)
	return st.delay
}

// Recovered records that a retry brought k back.
func (s *Schedule[K]) Recovered(k K) {
	if st := s.m[k]; st != nil {
		st.recovered = time.Now()
	}
}

// Forget drops k's state.
func (s *Schedule[K]) Forget(k K) { delete(s.m, k) }

// Quiet reports whether a look at the schedule at now can change nothing:
// no down key's retry is due and no recovered key's Memory has run out
// (so Sweep would drop nothing that is not down). A supervisor that knows
// no new key went down since its last look may then skip the look.
func (s *Schedule[K]) Quiet(now time.Time) bool {
	for _, st := range s.m {
		wake := st.next
		if !st.recovered.IsZero() {
			wake = st.recovered.Add(s.Memory)
		}
		if !now.Before(wake) {
			return false
		}
	}
	return true
}

// Len is the number of keys the schedule holds.
func (s *Schedule[K]) Len() int { return len(s.m) }

// Sweep drops every key not down (per down) that has no recovery within
// Memory of now to remember.
func (s *Schedule[K]) Sweep(now time.Time, down func(K) bool) {
	for k, st := range s.m {
		if !down(k) && (st.recovered.IsZero() || now.Sub(st.recovered) > s.Memory) {
			delete(s.m, k)
		}
	}
}
