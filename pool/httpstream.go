package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxAnswerBytes bounds an HTTP upstream's answer that is not an event
// stream (a JSON-RPC message, or an error page), which the go-sdk reads
// whole: the same 16 MiB as one message on a stdio connection and one
// server-sent event.
const maxAnswerBytes = 16 << 20

// errAnswerTooLarge is the read error of an answer over maxAnswerBytes.
var errAnswerTooLarge = fmt.Errorf("upstream answer over %d MiB", maxAnswerBytes>>20)

// watchStreams returns t with its HTTP requests made through a streamWatch
// (below) with timeout, stop, reopened and ended, or t itself when it is
// not reached over HTTP (see WithRoundTripper). The pool's entries use it.
func watchStreams(t mcp.Transport, timeout time.Duration, stop context.Context, reopened, ended func()) mcp.Transport {
	t, _ = WithRoundTripper(t, func(rt http.RoundTripper) http.RoundTripper {
		return &streamWatch{base: rt, timeout: timeout, stop: stop, reopened: reopened, ended: ended}
	})
	return t
}

// A streamWatch is the round tripper beneath each HTTP connection an entry
// makes (see establish), watching the requests that open the event stream
// list_changed notifications come on: the standalone GET before protocol
// 2026-07-28, a subscriptions/listen POST from it on. It
//
//   - bounds the wait for such a request's answer by the entry's timeout
//     and its end: the go-sdk sends the first one within Connect, under a
//     context of the connection's own that the attempt's deadline does not
//     reach, so an upstream that never answers it would hold the entry
//     connecting for ever;
//   - calls reopened when a standalone stream is opened again: the go-sdk
//     reopens a dropped one, but what the upstream sent meanwhile is lost;
//   - calls ended when a subscriptions/listen stream ends though its caller
//     still wants it: the go-sdk does not open it again, and the connection
//     would hear of no change again;
//   - bounds every other answer to maxAnswerBytes.
type streamWatch struct {
	base     http.RoundTripper
	timeout  time.Duration
	stop     context.Context
	reopened func()
	ended    func()
	opened   atomic.Bool // a standalone stream was opened
}

func (w *streamWatch) RoundTrip(req *http.Request) (*http.Response, error) {
	listen := req.Method == http.MethodPost && req.Header.Get("Mcp-Method") == "subscriptions/listen"
	if req.Method != http.MethodGet && !listen {
		resp, err := w.base.RoundTrip(req)
		if err == nil && !isEventStream(resp) {
			resp.Body = &limitedBody{ReadCloser: resp.Body, left: maxAnswerBytes}
		}
		return resp, err
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	timeout := fmt.Errorf("the upstream did not answer the request opening its event stream within %v", w.timeout)
	timer := time.AfterFunc(w.timeout, func() { cancel(timeout) })
	stop := context.AfterFunc(w.stop, func() { cancel(errors.New("connection closed")) })
	resp, err := w.base.RoundTrip(req.WithContext(ctx))
	fired := !timer.Stop()
	stop()
	if err == nil && fired {
		_ = resp.Body.Close()
		err = context.Cause(ctx)
	}
	if err != nil {
		if req.Context().Err() == nil && context.Cause(ctx) != nil {
			err = context.Cause(ctx)
		}
		cancel(nil)
		return nil, err
	}
	body := &watchedBody{ReadCloser: resp.Body, cancel: cancel}
	switch {
	case !isEventStream(resp) || resp.StatusCode/100 != 2:
		resp.Body = &limitedBody{ReadCloser: body, left: maxAnswerBytes}
		return resp, nil
	case listen:
		body.ended = func() {
			if req.Context().Err() == nil {
				w.ended()
			}
		}
	case w.opened.Swap(true):
		w.reopened()
	}
	resp.Body = body
	return resp, nil
}

func isEventStream(resp *http.Response) bool {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == "text/event-stream"
}

// A watchedBody ends its request's context when closed, and calls ended
// (when set) once, when a read finds the stream over.
type watchedBody struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
	ended  func()
	once   sync.Once
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && b.ended != nil {
		b.once.Do(b.ended)
	}
	return n, err
}

func (b *watchedBody) Close() error {
	b.once.Do(func() {}) // closed by its reader: not an end to report
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}

// A limitedBody fails a read that would go past left more bytes.
type limitedBody struct {
	io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errAnswerTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n - 1, errAnswerTooLarge
	}
	return n, err
}
