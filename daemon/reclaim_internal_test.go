package daemon

import "testing"

// TestReclaimerAfterABurstOfCloses: the reclaimer frees memory once after
// enough client sessions ended and their closing stopped, not while they
// grow, not for a few, and not in the middle of the burst.
func TestReclaimerAfterABurstOfCloses(t *testing.T) {
	t.Parallel()
	n, freed := 0, 0
	r := &reclaimer{clients: func() int { return n }, free: func() { freed++ }}
	steps := []struct {
		clients int
		want    bool
	}{
		{100, false},  // growing
		{2000, false}, // growing: peak 2000
		{1900, false}, // 100 ended: fewer than reclaimMin
		{1000, false}, // 1000 ended, but still closing
		{400, false},  // still closing
		{400, true},   // 1600 ended, the burst is over: reclaim, peak 400
		{400, false},  // nothing more ended
		{300, false},  // 100 ended since the reclaim: too few
		{300, false},
	}
	for i, s := range steps {
		n = s.clients
		if got := r.tick(); got != s.want {
			t.Fatalf("step %d (%d clients, peak %d): reclaimed %v, want %v", i, s.clients, r.peak, got, s.want)
		}
	}
	if freed != 1 {
		t.Fatalf("freed %d times, want 1", freed)
	}
}
