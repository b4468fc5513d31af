package daemon

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/wasmhost/wasmhost/reconcile"
)

// TestMergeSummaries: merging a reload's second summary unions the changed
// sessions (sorted, each once) and keeps one error per binding, the later
// one in the earlier one's place, new ones after.
func TestMergeSummaries(t *testing.T) {
	t.Parallel()
	e := func(session, server, msg string) *reconcile.BindingError {
		return &reconcile.BindingError{Session: session, Server: server, Err: errors.New(msg)}
	}
	a := reconcile.Summary{Changed: []string{"b", "d"}, Acquired: 1, Errors: []*reconcile.BindingError{e("s1", "x", "old"), e("s2", "y", "kept")}}
	b := reconcile.Summary{Changed: []string{"a", "b", "c"}, Acquired: 2, TransportsReused: 7,
		Errors: []*reconcile.BindingError{e("s3", "z", "added"), e("s1", "x", "new")}}
	merge(&a, b)
	assert.Equal(t, []string{"a", "b", "c", "d"}, a.Changed)
	assert.Equal(t, 3, a.Acquired)
	assert.Equal(t, 7, a.TransportsReused)
	var got []string
	for _, x := range a.Errors {
		got = append(got, x.Session+"/"+x.Server+": "+x.Err.Error())
	}
	assert.Equal(t, []string{"s1/x: new", "s2/y: kept", "s3/z: added"}, got)
}

// BenchmarkMergeSummaries merges the summaries of a policy swap and an
// apply in which every one of 20,000 bindings (1,000 sessions x 20
// servers) changed and failed: what a reload does when the servers every
// session uses are down.
func BenchmarkMergeSummaries(b *testing.B) {
	const sessions, servers = 1000, 20
	var sum reconcile.Summary
	for s := range sessions {
		name := fmt.Sprintf("s%05d", s)
		sum.Changed = append(sum.Changed, name)
		for v := range servers {
			sum.Errors = append(sum.Errors, &reconcile.BindingError{Session: name, Server: fmt.Sprintf("srv%03d", v), Err: errors.New("down")})
		}
	}
	for b.Loop() {
		var total reconcile.Summary
		merge(&total, sum)
		merge(&total, sum)
		if len(total.Errors) != sessions*servers || len(total.Changed) != sessions {
			b.Fatalf("%d errors, %d changed", len(total.Errors), len(total.Changed))
		}
	}
}
