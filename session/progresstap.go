package session

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxTapEvent bounds the bytes of one server-sent event the tap keeps to
// look at. A progress notification is a few hundred bytes; a larger event
// (a big tool result) passes untouched and unbuffered.
const maxTapEvent = 64 << 10

// tap wraps an upstream HTTP client's round tripper (see WrapTransport):
// the body of every response that is a server-sent event stream is read
// through an eventTap.
func (r *ProgressRelay) tap(base http.RoundTripper) http.RoundTripper {
	return &progressTap{base: base, relay: r}
}

type progressTap struct {
	base  http.RoundTripper
	relay *ProgressRelay
}

func (t *progressTap) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	if mt, _, perr := mime.ParseMediaType(resp.Header.Get("Content-Type")); perr == nil && mt == "text/event-stream" {
		resp.Body = &eventTap{ReadCloser: resp.Body, relay: t.relay}
	}
	return resp, err
}

// An eventTap passes a server-sent event stream through unchanged and, as
// the bytes of each event go by, delivers the relay's progress
// notifications among them: before the go-sdk, which reads from the tap,
// can have seen the result that follows them. Its parsing follows the
// go-sdk's: lines end at '\n' (a '\r' before it is dropped), an empty line
// ends an event, and an event's "data" fields, trimmed, are joined by '\n'.
type eventTap struct {
	io.ReadCloser
	relay *ProgressRelay

	line    []byte // the current line so far (nothing while skip)
	long    bool   // the current line is not empty but is not kept
	data    []byte // the current event's data so far
	hasData bool
	skip    bool // the current event outgrew maxTapEvent
}

func (e *eventTap) Read(p []byte) (int, error) {
	n, err := e.ReadCloser.Read(p)
	e.scan(p[:n])
	if err == io.EOF {
		e.endLine() // the go-sdk ends an event at the end of the stream too
		e.endEvent()
	}
	return n, err
}

func (e *eventTap) scan(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			e.addToLine(b)
			return
		}
		e.addToLine(b[:i])
		e.endLine()
		b = b[i+1:]
	}
}

func (e *eventTap) addToLine(b []byte) {
	switch {
	case e.long:
	case e.skip: // only whether the line is empty matters
		e.long = len(bytes.Trim(b, "\r")) > 0
	case len(e.line)+len(b) > maxTapEvent:
		e.long, e.skip = true, true
		e.line = e.line[:0]
	default:
		e.line = append(e.line, b...)
	}
}

// endLine handles the line read so far; an empty one ends the event.
func (e *eventTap) endLine() {
	line := bytes.TrimRight(e.line, "\r")
	long := e.long
	e.line, e.long = e.line[:0], false
	switch {
	case long:
	case len(line) == 0:
		e.endEvent()
	case !e.skip:
		field, value, _ := bytes.Cut(line, []byte{':'})
		if string(field) != "data" {
			return
		}
		value = bytes.TrimSpace(value)
		if e.hasData {
			e.data = append(e.data, '\n')
		}
		e.data, e.hasData = append(e.data, value...), true
		if len(e.data) > maxTapEvent {
			e.skip = true
		}
	}
}

// endEvent delivers the event's data when it is one of the relay's progress
// notifications, and starts the next event.
func (e *eventTap) endEvent() {
	data, skip := e.data, e.skip
	e.data, e.hasData, e.skip = e.data[:0], false, false
	if skip || !bytes.Contains(data, []byte(tokenPrefix)) {
		return
	}
	msg, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		return
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok || req.IsCall() || req.Method != "notifications/progress" {
		return
	}
	var p mcp.ProgressNotificationParams
	if json.Unmarshal(req.Params, &p) == nil {
		e.relay.deliver(&p, true)
	}
}
