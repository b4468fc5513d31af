package session

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/wasmhost/wasmhost/internal/mcptest"
)

// A spyWriter is a ResponseWriter that logs what is done to it and sends
// each entry on seen, if it has room.
type spyWriter struct {
	header http.Header
	seen   chan string

	mu  sync.Mutex
	log []string
}

func newSpyWriter(contentType string) *spyWriter {
	w := &spyWriter{header: http.Header{}, seen: make(chan string, 16)}
	w.header.Set("Content-Type", contentType)
	return w
}

func (w *spyWriter) add(e string) {
	w.mu.Lock()
	w.log = append(w.log, e)
	w.mu.Unlock()
	select {
	case w.seen <- e:
	default:
	}
}

func (w *spyWriter) entries() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.log...)
}

func (w *spyWriter) Header() http.Header  { return w.header }
func (w *spyWriter) WriteHeader(code int) { w.add("header " + http.StatusText(code)) }
func (w *spyWriter) Write(p []byte) (int, error) {
	w.add("write " + strings.TrimSpace(string(p)))
	return len(p), nil
}
func (w *spyWriter) Flush() { w.add("flush") }

// TestStartCallWritesNothingUntilTheKeepAlive: a forwarded call's event
// stream gets no early headers or flush of its own; the answer goes out as
// the go-sdk writes it. Before, every call flushed its headers as it
// started: an extra write and packet each, about a tenth of the daemon's
// CPU at 8 clients (BenchmarkGateways). (The headers' delay is an hour
// here, not callHeadersAfter: a test goroutine held up for a second on a
// loaded machine must not see them.)
func TestStartCallWritesNothingUntilTheKeepAlive(t *testing.T) {
	w := newSpyWriter("text/event-stream")
	k := newKeepAliveWriter(w, time.Hour, "")
	k.headersAfter = time.Hour
	k.startCall()
	if got := w.entries(); len(got) != 0 {
		t.Fatalf("startCall wrote %q; want nothing until the answer or the keep-alive", got)
	}
	_, _ = k.Write([]byte("event: message\ndata: {}\n\n"))
	k.Flush()
	k.finish()
	want := []string{"header OK", "write event: message\ndata: {}", "flush"}
	if diff := cmp.Diff(want, w.entries()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
}

// TestKeepAliveSendsHeadersThenComments: a call still under way after the
// keep-alive interval (here shorter than callHeadersAfter) gets its
// headers, then a comment each interval; after finish, a tick writes
// nothing.
func TestKeepAliveSendsHeadersThenComments(t *testing.T) {
	w := newSpyWriter("text/event-stream")
	k := newKeepAliveWriter(w, 10*time.Millisecond, "")
	k.startCall()
	next := func() string {
		t.Helper()
		select {
		case e := <-w.seen:
			return e
		case <-time.After(mcptest.EventWithin):
			t.Fatalf("nothing written within %v; so far %q", mcptest.EventWithin, w.entries())
			return ""
		}
	}
	for _, want := range []string{"header OK", "flush", "write : keepalive", "flush", "write : keepalive", "flush"} {
		if got := next(); got != want {
			t.Fatalf("got %q, want %q; log %q", got, want, w.entries())
		}
	}
	k.finish()
	n := len(w.entries())
	k.tick() // as a timer that fired as finish ran would
	if got := w.entries(); len(got) != n {
		t.Errorf("after finish, a tick wrote %q", got[n:])
	}
}

// TestCallHeadersBeforeTheFirstComment: with the default interval, a call
// still under way after callHeadersAfter gets its headers then, long
// before its first comment: a client that waits a few seconds for
// response headers gets them.
func TestCallHeadersBeforeTheFirstComment(t *testing.T) {
	t.Parallel()
	w := newSpyWriter("text/event-stream")
	k := newKeepAliveWriter(w, DefaultKeepAlive, "")
	start := time.Now()
	k.startCall()
	for _, want := range []string{"header OK", "flush"} {
		select {
		case got := <-w.seen:
			if got != want {
				t.Fatalf("got %q, want %q", got, want)
			}
		case <-time.After(DefaultKeepAlive / 2):
			t.Fatalf("no %q within %v; log %q", want, DefaultKeepAlive/2, w.entries())
		}
	}
	if took := time.Since(start); took < callHeadersAfter {
		t.Errorf("headers after %v, before callHeadersAfter (%v)", took, callHeadersAfter)
	}
	k.finish()
	if got := w.entries(); len(got) != 2 {
		t.Errorf("writes %q, want the headers alone", got)
	}
}

// TestKeepAliveLeavesJSONAlone: a call answered with a JSON body, not an
// event stream, gets no keep-alive.
func TestKeepAliveLeavesJSONAlone(t *testing.T) {
	w := newSpyWriter("application/json")
	k := newKeepAliveWriter(w, time.Nanosecond, "")
	k.startCall()
	_, _ = k.Write([]byte(`{}`))
	k.finish()
	if diff := cmp.Diff([]string{"header OK", "write {}"}, w.entries()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
}
