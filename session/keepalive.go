package session

import (
	"net/http"
	"sync"
	"time"
)

// DefaultKeepAlive is how often HTTPHandler writes a comment on an event
// stream that has carried nothing for that long, as the TypeScript SDK's
// servers do (every 15 s). The go-sdk's server writes nothing on a stream
// until it has a message, not even the response headers of a call under
// way, and clients give up on a silent stream: those built on Node's fetch
// after 300 s without headers or bytes (undici's headersTimeout and
// bodyTimeout), the Python SDK's after 300 s of silence (its
// sse_read_timeout), and reverse proxies often sooner. A tool that works
// for minutes without progress notifications would otherwise fail through
// wasmhost while it succeeds against its server directly.
const DefaultKeepAlive = 15 * time.Second

// callHeadersAfter is how long a forwarded call's event stream may go
// without its response headers (at most the keep-alive interval): long
// enough that a call answered sooner sends them with its answer, short
// enough for any client's wait for response headers.
const callHeadersAfter = time.Second

// keepAliveComment is what a silent event stream gets: an SSE comment,
// which every SSE parser skips.
var keepAliveComment = []byte(": keepalive\n\n")

// A keepAliveWriter is the ResponseWriter HTTPHandler gives the go-sdk's
// handler for a POST or GET: once the response is an event stream, it
// writes keepAliveComment whenever the stream has carried nothing for
// every. Its writes are serialised with the handler's, each of which is a
// whole event (the go-sdk writes one event per Write), so a comment never
// lands inside an event.
//
// The go-sdk does not write the response headers of a POST until its first
// message. When a forwarded call is under way (startCall), the keep-alive
// starts without them: a call answered within callHeadersAfter (nearly
// all) goes out as the go-sdk writes it, headers and answer in one write,
// and one still under way by then gets its headers, then a comment
// whenever it has been silent for every. Sending them as each call starts
// instead cost every call an extra flush, a write system call and a
// packet: about a tenth of the daemon's CPU under load (BenchmarkGateways).
type keepAliveWriter struct {
	http.ResponseWriter
	every time.Duration
	// headersAfter is how long a forwarded call's stream waits for its
	// headers: callHeadersAfter, or every if shorter.
	headersAfter time.Duration

	mu      sync.Mutex
	sent    bool        // the status line has been written
	last    time.Time   // when the response last carried something, or the keep-alive started
	timer   *time.Timer // the keep-alive's, once it started
	stopped bool        // the handler has returned: nothing more is written
}

// newKeepAliveWriter wraps w for a request of protocol version version
// (its Mcp-Protocol-Version header, "" before initialize); every <= 0
// means no keep-alive. From protocol 2026-07-28 on, the go-sdk may answer
// a call with an HTTP error status after the stream began (SEP-2575), so
// such a response is left alone.
func newKeepAliveWriter(w http.ResponseWriter, every time.Duration, version string) *keepAliveWriter {
	if version >= perRequestProtocol {
		every = 0
	}
	return &keepAliveWriter{ResponseWriter: w, every: every, headersAfter: min(callHeadersAfter, every)}
}

// isEventStream reports whether the response's headers make it an event
// stream. Only the handler's goroutine, or one that a call it dispatched
// started, may call it: the go-sdk sets the headers before it dispatches.
func (k *keepAliveWriter) isEventStream() bool {
	return isEventStream(k.ResponseWriter.Header())
}

// WriteHeader writes the status line and, for a successful event stream,
// starts the keep-alive.
func (k *keepAliveWriter) WriteHeader(code int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.writeHeaderLocked(code)
}

func (k *keepAliveWriter) writeHeaderLocked(code int) {
	if k.sent {
		k.ResponseWriter.WriteHeader(code) // net/http reports the superfluous call
		return
	}
	k.sent = true
	k.last = time.Now()
	k.ResponseWriter.WriteHeader(code)
	if code == http.StatusOK && k.isEventStream() {
		k.startLocked(k.every)
	}
}

// Write writes p (one event, or a whole JSON answer).
func (k *keepAliveWriter) Write(p []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.sent {
		k.writeHeaderLocked(http.StatusOK)
	}
	k.last = time.Now()
	return k.ResponseWriter.Write(p)
}

// Flush flushes the response (sending the headers, as net/http does, if
// nothing was written yet); the go-sdk flushes after each event.
func (k *keepAliveWriter) Flush() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.sent {
		k.writeHeaderLocked(http.StatusOK)
	}
	_ = http.NewResponseController(k.ResponseWriter).Flush()
}

// Unwrap returns the underlying ResponseWriter, for http.ResponseController.
func (k *keepAliveWriter) Unwrap() http.ResponseWriter { return k.ResponseWriter }

// startCall is called when a call the request carries is forwarded
// upstream: if the response is an event stream whose headers are not sent
// yet, it starts the keep-alive, which sends them if the call is still
// under way after callHeadersAfter. It runs on the call's goroutine, which
// the go-sdk started after setting the headers.
func (k *keepAliveWriter) startCall() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.sent || k.timer != nil || !k.isEventStream() {
		return
	}
	k.last = time.Now()
	k.startLocked(k.headersAfter)
}

// startLocked starts the keep-alive once, its first tick after after.
// k.mu is held.
func (k *keepAliveWriter) startLocked(after time.Duration) {
	if k.timer != nil || k.stopped || k.every <= 0 {
		return
	}
	k.timer = time.AfterFunc(after, k.tick)
}

// tick sends the status line if it is not sent yet, and keepAliveComment
// when the stream has carried nothing for k.every, and sets the timer for
// the next; it stops after finish or a failed write.
func (k *keepAliveWriter) tick() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	rc := http.NewResponseController(k.ResponseWriter)
	if !k.sent {
		k.sent = true
		k.ResponseWriter.WriteHeader(http.StatusOK)
		if rc.Flush() != nil { // the client is gone: the handler finds out itself
			return
		}
	}
	wait := k.every - time.Since(k.last)
	if wait <= 0 {
		_, err := k.ResponseWriter.Write(keepAliveComment)
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			return
		}
		k.last = time.Now()
		wait = k.every
	}
	k.timer.Reset(wait)
}

// finish stops the keep-alive once the handler has returned, before the
// ResponseWriter goes back to net/http: a tick that holds k.mu finishes
// its write first, and any later one writes nothing.
func (k *keepAliveWriter) finish() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	if k.timer != nil {
		k.timer.Stop()
	}
}
