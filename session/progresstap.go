package session

import (
	"bytes"
	"io"
	"mime"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// maxTapEvent bounds the bytes of one server-sent event the tap keeps to
// look at. A progress notification is a few hundred bytes; a larger event
// (a big tool result) passes untouched and unbuffered.
const maxTapEvent = 64 << 10

// tap wraps an upstream HTTP client's round tripper (see WrapTransport):
// the body of every response that is a server-sent event stream is read
// through an eventTap. A round tripper r already taps is returned as it
// is, so that wrapping a transport twice delivers nothing twice.
func (r *ProgressRelay) tap(base http.RoundTripper) http.RoundTripper {
	if pt, ok := base.(*progressTap); ok && pt.relay == r {
		return base
	}
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
	if isEventStream(resp.Header) {
		resp.Body = &eventTap{ReadCloser: resp.Body, relay: t.relay}
	}
	return resp, err
}

// isEventStream reports whether h, the headers of a response, make it a
// server-sent event stream.
func isEventStream(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == "text/event-stream"
}

// An eventTap passes a server-sent event stream through unchanged and, as
// the bytes of each event go by, delivers the relay's progress
// notifications among them: before the go-sdk, which reads from the tap,
// can have seen the result that follows them. Its parsing follows the
// go-sdk's (mcp/event.go and the streamable client): lines end at '\n' (a
// '\r' before it is dropped), an empty line ends an event, an event's
// "data" fields, trimmed, are joined by '\n', only events named "message"
// or not named carry messages, and a line without a ':' ends the stream.
type eventTap struct {
	io.ReadCloser
	relay *ProgressRelay

	line     []byte // the current line, its first maxTapEvent bytes
	lineLong bool   // the current line has more bytes than line holds
	name     []byte // the current event's name
	data     []byte // the current event's data so far
	hasData  bool
	skip     bool // the current event's data outgrew maxTapEvent
	dead     bool // the go-sdk stopped reading at a malformed line
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
	for len(b) > 0 && !e.dead {
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
	if room := maxTapEvent - len(e.line); len(b) > room {
		b, e.lineLong = b[:room], true
	}
	e.line = append(e.line, b...)
}

// endLine handles the line read so far; an empty one ends the event.
func (e *eventTap) endLine() {
	line, long := bytes.TrimRight(e.line, "\r"), e.lineLong
	e.line, e.lineLong = e.line[:0], false
	if len(line) == 0 && !long {
		e.endEvent()
		return
	}
	field, value, ok := bytes.Cut(line, []byte{':'})
	switch {
	case !ok:
		e.dead = true
	case string(field) == "event":
		e.name = append(e.name[:0], bytes.TrimSpace(value)...)
	case string(field) != "data" || e.skip:
	case long:
		e.skip = true // too large to be a progress notification
	default:
		value = bytes.TrimSpace(value)
		if e.hasData {
			e.data = append(e.data, '\n')
		}
		e.data, e.hasData = append(e.data, value...), true
		e.skip = len(e.data) > maxTapEvent
	}
}

// endEvent delivers the event's data when it is one of the relay's progress
// notifications, and starts the next event.
func (e *eventTap) endEvent() {
	data, skip, name := e.data, e.skip, string(e.name)
	e.data, e.hasData, e.skip, e.name = e.data[:0], false, false, e.name[:0]
	if skip || e.dead || (name != "" && name != "message") || !bytes.Contains(data, []byte(tokenPrefix)) {
		return
	}
	if msg, err := jsonrpc.DecodeMessage(data); err == nil {
		e.relay.deliverMessage(msg)
	}
}
