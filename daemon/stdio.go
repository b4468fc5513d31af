package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/session"
)

// Stdio makes Run serve one session of the config to one client over a
// stream (`wasmhost stdio`: standard input and output) instead of HTTP.
// Everything else is the daemon's own: the config and its reloads (the
// file is watched; SIGHUP is left to the caller), the pool, the session
// endpoint, supervision. The config must have Session, at start-up and at
// every reload (one without it is refused); its other sessions are not
// served, and their warnings are not logged. The session's token, the
// listen address and the admin block are not used. Run returns when ctx
// ends (after the calls under way are answered, as at any stop) or when
// the client closes the stream.
type Stdio struct {
	// Session is the session served. Required.
	Session string
	// In and Out carry the MCP stream. Required.
	In  io.Reader
	Out io.Writer
	// Stderr, when set, receives the standard error of stdio upstreams,
	// line by line, instead of the log.
	Stderr io.Writer
}

// scope keeps, of ld's config, only the session stdio mode serves (see
// Stdio), and of its warnings only those about that session or the rest
// of the file; ld.full keeps the whole config. Without stdio mode, ld.full
// is ld.cfg.
func (d *Daemon) scope(ld *configLoad) error {
	ld.full = ld.cfg
	if d.opts.Stdio == nil {
		return nil
	}
	name := d.opts.Stdio.Session
	ld.warnings = slices.DeleteFunc(ld.warnings, func(w config.Warning) bool { return w.Session != "" && w.Session != name })
	if ld.cfg == nil {
		return nil
	}
	s := ld.cfg.Sessions[name]
	if s == nil {
		return fmt.Errorf("%s: no session named %q (sessions: %v)", d.file, name, ld.cfg.SessionNames())
	}
	scoped := *ld.cfg
	scoped.Sessions = map[string]*config.Session{name: s}
	ld.cfg = &scoped
	return nil
}

// stdioServer serves stdio mode's one session over the stream.
type stdioServer struct {
	d       *Daemon
	ep      *session.Endpoint
	answers *answerLedger
	stop    context.CancelFunc // ends serving
	served  chan error
}

// serveStdio starts serving the endpoint of the session stdio mode serves
// over its stream. The go-sdk's own connection serves the client,
// unwrapped (it passes that connection the session's protocol version
// through an unexported method); the drain follows the bytes beneath it
// instead (answerLedger).
func (d *Daemon) serveStdio() (*stdioServer, error) {
	d.mu.Lock()
	e := d.endpoints[d.opts.Stdio.Session]
	d.mu.Unlock()
	if e == nil {
		return nil, fmt.Errorf("daemon: stdio: session %q has no endpoint", d.opts.Stdio.Session)
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &stdioServer{d: d, ep: e.ep, answers: newAnswerLedger(), stop: stop, served: make(chan error, 1)}
	transport := &mcp.IOTransport{
		Reader: io.NopCloser(s.answers.Reader(d.opts.Stdio.In)),
		Writer: nopWriteCloser{s.answers.Writer(d.opts.Stdio.Out)},
	}
	go func() { s.served <- e.ep.Server().Run(ctx, transport) }()
	return s, nil
}

// shutdown, at a stop, makes the endpoint refuse new calls and waits, at
// most the drain timeout, for the calls under way to return (Drain cuts
// those still running then short, which answers them too), then, for what
// is left of the drain timeout but session.AnswerGrace at least, until
// every call read has its answer written; then it stops serving. It returns what serving returned.
func (s *stdioServer) shutdown() error {
	log := s.d.log
	log.Info("stopping: answering the calls under way; new calls refused", "drain_timeout", s.d.drainTimeout())
	ctx, cancel := context.WithTimeout(context.Background(), s.d.drainTimeout())
	defer cancel()
	if err := s.ep.Drain(ctx); err != nil {
		log.Warn("shutdown: calls cut short", "err", err)
	}
	// The answers may use what is left of the drain timeout (a large one
	// takes a while to write), and get session.AnswerGrace at least.
	left := session.AnswerGrace
	if dl, ok := ctx.Deadline(); ok {
		left = max(left, time.Until(dl))
	}
	wctx, wcancel := context.WithTimeout(context.Background(), left)
	defer wcancel()
	if err := s.answers.wait(wctx); err != nil {
		log.Warn("shutdown: answers cut short", "err", err)
	}
	s.stop()
	select {
	case err := <-s.served:
		return err
	case <-time.After(session.AnswerGrace):
		// Closing waits for a write the client does not read.
		log.Warn("shutdown: the client is not reading its stream; stopping anyway")
		return nil
	}
}

// ServedToEnd reports whether err, what serving MCP over a stream
// returned, is a normal end: the client closed either direction, or
// serving was stopped.
func ServedToEnd(err error) bool {
	return err == nil || errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed) ||
		errors.Is(err, io.ErrClosedPipe) // the client stopped reading: gone too
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
