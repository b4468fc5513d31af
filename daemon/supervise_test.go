package daemon

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/wasmhost/wasmhost/reconcile"
)

// TestUnhealthy: the supervisor retries a binding without a connection or
// with a failed or closed entry, and leaves alone a healthy one and one a
// reload is replacing (pending), which would otherwise be torn down again
// once the reload had made it healthy.
func TestUnhealthy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		b    reconcile.BindingState
		want bool
	}{
		{"ready", reconcile.BindingState{Identity: "id", EntryState: "ready"}, false},
		{"restarting", reconcile.BindingState{Identity: "id", EntryState: "restarting"}, false},
		{"acquire failed", reconcile.BindingState{Error: "no such command"}, true},
		{"entry failed", reconcile.BindingState{Identity: "id", EntryState: "failed"}, true},
		{"entry closed", reconcile.BindingState{Identity: "id", EntryState: "closed"}, true},
		{"pending", reconcile.BindingState{Error: "reacquiring", Pending: true}, false},
		{"view failed closed", reconcile.BindingState{Identity: "id", EntryState: "ready", Error: "policy down"}, true},
	} {
		assert.Equal(t, tc.want, unhealthy(tc.b), tc.name)
	}
}

// TestMergeCountsABindingOnce: a binding that failed in the swap and again
// in the apply of one reload is one failure, with the later error.
func TestMergeCountsABindingOnce(t *testing.T) {
	t.Parallel()
	var total reconcile.Summary
	merge(&total, reconcile.Summary{Errors: []*reconcile.BindingError{
		{Session: "alice", Server: "fs", Err: errors.New("swap")},
		{Session: "bob", Server: "fs", Err: errors.New("swap")},
	}})
	merge(&total, reconcile.Summary{Errors: []*reconcile.BindingError{
		{Session: "alice", Server: "fs", Err: errors.New("apply")},
		{Session: "alice", Server: "git", Err: errors.New("apply")},
	}})
	assert.EqualError(t, total.Err(), "session \"alice\", server \"fs\": apply\nsession \"bob\", server \"fs\": swap\nsession \"alice\", server \"git\": apply")
}
