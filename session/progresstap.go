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
// (a big tool result) passes untouched and unbuffered, unless it may be a
// request or log message to mark (maxMarkedEvent).
const maxTapEvent = 64 << 10

// maxMarkedEvent bounds the bytes of an event on a call's stream that the
// tap holds back to mark it (eventTap), when its first maxTapEvent bytes
// name a method it marks: a sampling request may carry an image. It is the
// go-sdk's own bound on an event (mcp.DefaultMaxEventSize).
const maxMarkedEvent = 16 << 20

// markedMethods are what an event's first bytes must hold for the tap to
// hold it back past maxTapEvent: the methods of the large messages it
// marks.
var markedMethods = [][]byte{[]byte(`"sampling/createMessage"`), []byte(`"elicitation/create"`), []byte(`"notifications/message"`)}

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
		// The stream answering a forwarded call: what the upstream asks or
		// logs on it came during that call (bridge.go).
		resp.Body = &eventTap{ReadCloser: resp.Body, relay: t.relay, call: callOf(req.Context())}
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
//
// On the stream answering a forwarded call (call set), the tap holds each
// event back until it ends (or outgrows maxTapEvent, then it passes
// unchanged), so that it can mark the requests a pool.Bridge answers as
// the call's and pass the log messages to the call's client, marking them
// delivered (ProgressRelay.markMessage).
type eventTap struct {
	io.ReadCloser
	relay *ProgressRelay
	call  *bridgeCall

	// With call set: the bytes ready for the go-sdk, the current event's
	// bytes held back, whether the current event passes unheld, its lines
	// other than data, and the error to return once out is read.
	out     []byte
	evt     []byte
	passing bool
	other   []byte
	err     error
	buf     []byte

	limit    int    // what the current event may hold: maxTapEvent, or maxMarkedEvent
	line     []byte // the current line, its first limit bytes
	lineLong bool   // the current line has more bytes than line holds
	name     []byte // the current event's name
	data     []byte // the current event's data so far
	hasData  bool
	skip     bool // the current event's data outgrew maxTapEvent
	dead     bool // the go-sdk stopped reading at a malformed line
}

func (e *eventTap) Read(p []byte) (int, error) {
	if e.call == nil {
		n, err := e.ReadCloser.Read(p)
		e.scan(p[:n])
		if err == io.EOF {
			e.endLine() // the go-sdk ends an event at the end of the stream too
			e.endEvent()
		}
		return n, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	for len(e.out) == 0 && e.err == nil {
		if len(e.buf) < len(p) {
			e.buf = make([]byte, max(len(p), 4096))
		}
		n, err := e.ReadCloser.Read(e.buf[:len(p)])
		e.scan(e.buf[:n])
		if err != nil {
			if err == io.EOF {
				e.endLine()
				e.endEvent()
			}
			e.relay.answered(e.call) // the stream that carries its answer ended
			e.out, e.evt = append(e.out, e.evt...), e.evt[:0]
			e.err = err
		}
	}
	n := copy(p, e.out)
	e.out = e.out[n:]
	if len(e.out) == 0 && e.err != nil {
		return n, e.err
	}
	return n, nil
}

func (e *eventTap) scan(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		seg := b
		if i >= 0 {
			seg = b[:i+1]
		}
		e.raw(seg)
		switch {
		case e.dead:
		case i < 0:
			e.addToLine(b)
		default:
			e.addToLine(b[:i])
			e.endLine()
		}
		if i < 0 {
			return
		}
		b = b[i+1:]
	}
}

// raw takes the bytes of seg, part of the stream, when the tap holds
// events back: into the current event's, or on to the go-sdk once the
// event passes unheld.
func (e *eventTap) raw(seg []byte) {
	switch {
	case e.call == nil:
	case e.passing || e.dead:
		e.out = append(append(e.out, e.evt...), seg...)
		e.evt = e.evt[:0]
	default:
		e.evt = append(e.evt, seg...)
		if len(e.evt) > e.max() && (e.limit != 0 || !mayMark(e.evt[:maxTapEvent])) {
			e.out, e.evt, e.passing = append(e.out, e.evt...), e.evt[:0], true
		} else if len(e.evt) > maxTapEvent {
			e.limit = maxMarkedEvent
		}
	}
}

// max is what the current event may hold.
func (e *eventTap) max() int {
	if e.limit == 0 {
		return maxTapEvent
	}
	return e.limit
}

// mayMark reports whether an event that starts with b may be a message
// the tap marks that is too large for maxTapEvent.
func mayMark(b []byte) bool {
	for _, m := range markedMethods {
		if bytes.Contains(b, m) {
			return true
		}
	}
	return false
}

func (e *eventTap) addToLine(b []byte) {
	if room := e.max() - len(e.line); len(b) > room {
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
	if ok && string(field) != "data" && e.call != nil {
		e.other = append(append(e.other, line...), '\n')
	}
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
		e.skip = len(e.data) > e.max()
	}
}

// endEvent delivers the event's data when it is one of the relay's progress
// notifications, and starts the next event.
//
// On a call's stream it passes the held event on, or the event marked
// (markMessage) in its place: its lines other than data, then the marked
// message as its one data line.
func (e *eventTap) endEvent() {
	data, skip, name, other := e.data, e.skip, string(e.name), e.other
	e.data, e.hasData, e.skip, e.name, e.other = e.data[:0], false, false, e.name[:0], e.other[:0]
	e.limit = 0
	var marked []byte
	switch {
	case skip || e.dead || (name != "" && name != "message"):
	case bytes.Contains(data, []byte(tokenPrefix)):
		if msg, err := jsonrpc.DecodeMessage(data); err == nil {
			e.relay.deliverMessage(msg)
		}
	case e.call != nil && !e.passing && len(data) > 0:
		marked = e.relay.markMessage(e.call, data)
	}
	if e.call == nil {
		return
	}
	if marked != nil {
		e.out = append(e.out, other...)
		e.out = append(e.out, "data: "...)
		e.out = append(append(e.out, marked...), '\n', '\n')
	} else {
		e.out = append(e.out, e.evt...)
	}
	e.evt, e.passing = e.evt[:0], false
}
