package stderrlog

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// records collects what a Writer emits.
type records struct {
	mu  sync.Mutex
	all []string
}

func (r *records) emit(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, s)
}

func (r *records) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.all...)
}

// Before the fix, each line an upstream wrote was logged, however many:
// 216 MiB of log in 10 s from one chatty upstream. Now an interval passes
// on at most Lines lines, each cut at MaxLine bytes, and one summary says
// how much was left out.
func TestChattyUpstreamIsBounded(t *testing.T) {
	var r records
	w := New(r.emit, Options{Server: "chatty", Lines: 20, Interval: time.Hour, MaxLine: 100})
	line := strings.Repeat("spam ", 1000) + "\n" // 5,000 bytes and a newline
	for range 10_000 {                           // 50 MB
		_, err := w.Write([]byte(line))
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	got := r.get()
	lines, bytes := 0, 0
	for _, rec := range got {
		lines += strings.Count(rec, "\n") + 1
		bytes += len(rec)
	}
	require.LessOrEqual(t, lines, 21, "records: %d", len(got))
	require.Less(t, bytes, 20*200+500)
	last := got[len(got)-1]
	require.Equal(t, `[wasmhost: 9980 more lines (49900000 bytes) of server "chatty"'s standard error left out: over 20 lines in 1h0m0s]`, last)
	require.Contains(t, got[0], "[4900 bytes cut]")
}

// The summary comes when the interval ends, without waiting for another
// line, and the next interval passes lines on again.
func TestSummaryAtIntervalEnd(t *testing.T) {
	var r records
	w := New(r.emit, Options{Lines: 2, Interval: 300 * time.Millisecond, Burst: 10 * time.Millisecond})
	_, _ = w.Write([]byte("one\ntwo\nthree\nfour\n"))
	require.Eventually(t, func() bool {
		got := r.get()
		return len(got) == 2 && strings.HasPrefix(got[1], "[wasmhost: 2 more lines (9 bytes) of the upstream's")
	}, 30*time.Second, 5*time.Millisecond, "%q", r.get())
	require.Equal(t, "one\ntwo", r.get()[0])
	_, _ = w.Write([]byte("five\n"))
	require.Eventually(t, func() bool { return len(r.get()) == 3 }, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, "five", r.get()[2])
}

// A failing Node upstream's stack trace, 15 lines, was 15 log records on
// each retry: the lines of one burst are one record now, whether they
// come in one write or in several close together.
func TestStackTraceIsOneRecord(t *testing.T) {
	trace := "Error: connect ECONNREFUSED 127.0.0.1:5432\n"
	for i := range 14 {
		trace += fmt.Sprintf("    at frame%d (/app/node_modules/pg/lib/client.js:%d:17)\n", i, 100+i)
	}
	t.Run("one write", func(t *testing.T) {
		var r records
		w := New(r.emit, Options{})
		_, _ = w.Write([]byte(trace))
		require.Eventually(t, func() bool { return len(r.get()) == 1 }, 30*time.Second, 5*time.Millisecond)
		require.Equal(t, strings.TrimSuffix(trace, "\n"), r.get()[0])
	})
	t.Run("line by line, split mid-line", func(t *testing.T) {
		var r records
		// A burst no pause can end, however loaded the machine: the
		// pieces make no record until Close ends the burst, then one.
		w := New(r.emit, Options{Burst: time.Hour})
		for i := 0; i < len(trace); i += 7 {
			_, _ = w.Write([]byte(trace[i:min(i+7, len(trace))]))
		}
		require.Empty(t, r.get(), "a record before the burst ended")
		require.NoError(t, w.Close())
		require.Equal(t, []string{strings.TrimSuffix(trace, "\n")}, r.get())
	})
	t.Run("bursts apart", func(t *testing.T) {
		var r records
		w := New(r.emit, Options{Burst: 10 * time.Millisecond})
		_, _ = w.Write([]byte("first failure\n"))
		require.Eventually(t, func() bool { return len(r.get()) == 1 }, 30*time.Second, 5*time.Millisecond)
		_, _ = w.Write([]byte("second failure\n"))
		require.Eventually(t, func() bool { return len(r.get()) == 2 }, 30*time.Second, 5*time.Millisecond)
		require.Equal(t, []string{"first failure", "second failure"}, r.get())
	})
}

// A record holds at most MaxRecordLines lines; a line without its newline
// is passed on after a pause; blank lines are dropped; a cut keeps UTF-8
// whole.
func TestRecordShapes(t *testing.T) {
	var r records
	w := New(r.emit, Options{MaxRecordLines: 3, Burst: time.Hour, MaxLine: 5})
	_, _ = w.Write([]byte("a\n\n  \nb\r\nc\nd\n"))
	require.Equal(t, []string{"a\nb\nc"}, r.get())
	require.NoError(t, w.Close())
	require.Equal(t, []string{"a\nb\nc", "d"}, r.get())

	var r2 records
	w = New(r2.emit, Options{Burst: 10 * time.Millisecond, MaxLine: 5})
	_, _ = w.Write([]byte("abcdé!")) // é is 2 bytes at 5..6
	require.Eventually(t, func() bool { return len(r2.get()) == 1 }, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, "abcd [3 bytes cut]", r2.get()[0])
}

// The processes of one server share its budget: one that fails at once,
// after a burst of lines, and is restarted does not get a fresh budget
// each time.
func TestBudgetSharedByProcesses(t *testing.T) {
	var r records
	b := NewBudget(r.emit, Options{Server: "crasher", Lines: 5, Interval: time.Hour})
	for range 4 {
		w := NewShared(r.emit, Options{}, b)
		_, _ = w.Write([]byte("starting\nfailed: no database\n"))
		require.NoError(t, w.Close())
	}
	b.Flush()
	got := r.get()
	require.Equal(t, 5, strings.Count(strings.Join(got[:len(got)-1], "\n"), "\n")+1, "%q", got)
	require.Equal(t, `[wasmhost: 3 more lines (46 bytes) of server "crasher"'s standard error left out: over 5 lines in 1h0m0s]`, got[len(got)-1])
}
