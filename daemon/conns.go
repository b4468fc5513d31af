package daemon

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for the HTTP connection limits (Options.MaxConns,
// Options.MaxConnsPerIP, Options.IdleTimeout, Options.ReadHeaderTimeout).
const (
	// DefaultMaxConns bounds the connections open at once: each holds a
	// goroutine, buffers and a file descriptor, and 4,096 stays well
	// inside the usual open-file limits with room for the upstreams.
	DefaultMaxConns = 4096
	// DefaultMaxConnsPerIP keeps one client address (or IPv6 /64) to a
	// quarter of DefaultMaxConns, so that one host cannot take them all,
	// while the 1,024 clients a session holds (DefaultMaxClients) fit.
	DefaultMaxConnsPerIP = 1024
	// DefaultIdleTimeout closes a kept-alive connection that sends no new
	// request for this long. Without it net/http waits for the next
	// request for ever (it falls back on ReadTimeout, which the daemon
	// cannot set: event streams and long calls read nothing for long), so
	// a client of /healthz alone could hold connections without a token.
	// An event stream is a request under way, not an idle connection.
	// Two minutes outlasts the idle time of common HTTP clients (Go's 90
	// s), so they reuse connections rather than race the close.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultReadHeaderTimeout bounds the time a client takes to send a
	// request's headers: a client that sends them a byte at a time holds
	// its connection this long at most.
	DefaultReadHeaderTimeout = 10 * time.Second
)

// maxHeaderBytes bounds a request's headers (net/http's default is 1 MiB).
// Each connection holds its request's headers, so without a tighter bound
// the clients of one address could make the daemon hold a GiB without a
// token; an MCP request's headers, bearer token included, take a few KiB.
// A request with more is answered 431.
const maxHeaderBytes = 64 << 10

// lingerTime and lingerBytes bound what a connection closed for an unread
// body reads after its answer (see trackedConn.Close).
const (
	lingerTime  = 2 * time.Second // as Apache httpd's lingering close
	lingerBytes = 256 << 10
)

// errUnreadBody is what a doomed connection's reads return.
var errUnreadBody = errors.New("connection closed: the request body was not read")

// A connLimiter is a listener that refuses a connection beyond its limits:
// more than max open at once, or more than perIP from one client address.
// A refused connection is answered 503 and closed at once.
type connLimiter struct {
	net.Listener
	max, perIP int                            // <= 0: no limit
	refused    func(reason string, ip string) // called for each refusal

	mu    sync.Mutex
	open  int
	byKey map[string]int
}

func newConnLimiter(ln net.Listener, max, perIP int, refused func(reason, ip string)) *connLimiter {
	return &connLimiter{Listener: ln, max: max, perIP: perIP, refused: refused, byKey: make(map[string]int)}
}

// Reasons a connection is refused (the label of
// wasmhost_http_conns_refused_total).
const (
	connRefusedMax   = "max_conns"
	connRefusedPerIP = "max_conns_per_ip"
)

// Accept returns the next connection within the limits; those beyond them
// are refused here and never reach the server.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip, key := clientKey(c.RemoteAddr())
		if reason := l.enter(key); reason != "" {
			l.refused(reason, ip)
			refuseConn(c)
			continue
		}
		return &trackedConn{Conn: c, release: func() { l.leave(key) }}, nil
	}
}

// limitConns wraps the daemon's listener in its connection limits; a
// refusal is counted and logged (rate-limited).
func (d *Daemon) limitConns(ln net.Listener) *connLimiter {
	return newConnLimiter(ln, d.opts.MaxConns, d.opts.MaxConnsPerIP, func(reason, ip string) {
		d.metrics.connsRefused.WithLabelValues(reason).Inc()
		if !d.refusals.allow(reason) {
			return
		}
		if reason == connRefusedMax {
			d.log.Warn("refused connection: as many open as --max-conns allows", "limit", d.opts.MaxConns, "remote", ip)
		} else {
			d.log.Warn("refused connection: as many open from its address as --max-conns-per-ip allows", "limit", d.opts.MaxConnsPerIP, "remote", ip)
		}
	})
}

// enter counts one more connection from key, or says why it may not.
func (l *connLimiter) enter(key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.max > 0 && l.open >= l.max:
		return connRefusedMax
	case l.perIP > 0 && l.byKey[key] >= l.perIP:
		return connRefusedPerIP
	}
	l.open++
	l.byKey[key]++
	return ""
}

func (l *connLimiter) leave(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byKey[key]--; l.byKey[key] <= 0 {
		delete(l.byKey, key)
	}
}

// Open returns how many connections are open.
func (l *connLimiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// clientKey returns the client's IP address, and the key its connections
// are counted under: the address, or for IPv6 its /64 (one host commonly
// has a whole /64 to choose from).
func clientKey(a net.Addr) (ip, key string) {
	var addr net.IP
	switch a := a.(type) {
	case *net.TCPAddr:
		addr = a.IP
	default:
		host, _, err := net.SplitHostPort(a.String())
		if err != nil {
			return a.String(), a.String()
		}
		addr = net.ParseIP(host)
		if addr == nil {
			return host, host
		}
	}
	if v4 := addr.To4(); v4 != nil {
		return v4.String(), v4.String()
	}
	return addr.String(), addr.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

const refusedAnswer = "too many connections; try again later\n"

// refuseConn answers c 503 and closes it. The answer is best effort: a
// fresh connection's send buffer takes it without waiting, but a client
// that already sent its request may see the connection reset instead.
func refuseConn(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"+
		"Content-Type: text/plain; charset=utf-8\r\nContent-Length: "+strconv.Itoa(len(refusedAnswer))+"\r\n\r\n"+refusedAnswer)
	_ = c.Close()
}

// A trackedConn is a connection the limiter counts until it is closed. A
// connection whose request was answered without reading the body it
// announced is doomed (see closeUnread): its reads fail, so that net/http
// neither waits for that body (it would read up to 256 KiB of it, with no
// deadline) nor reads another request from it, and its Close sends the
// end of the stream at once.
type trackedConn struct {
	net.Conn
	release func()

	doomed atomic.Bool
	closed atomic.Bool
}

func (c *trackedConn) Read(p []byte) (int, error) {
	if c.doomed.Load() {
		return 0, errUnreadBody
	}
	return c.Conn.Read(p)
}

// CloseWrite half-closes the connection, as net/http's lingering close
// expects of a TCP connection.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// doom makes c's reads fail from now on and its Close end it at once.
func (c *trackedConn) doom() { c.doomed.Store(true) }

// Close closes the connection. A doomed one first sends the end of the
// stream (its answer is already written), then reads and drops what the
// client still sends for at most lingerTime and lingerBytes: closing with
// unread data in the socket would reset the connection, and the client
// might lose the answer. A second Close, from Server.Close at shutdown,
// cuts that short.
func (c *trackedConn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return c.Conn.Close()
	}
	defer c.release()
	if c.doomed.Load() {
		if err := c.CloseWrite(); err == nil {
			_ = c.Conn.SetReadDeadline(time.Now().Add(lingerTime))
			_, _ = io.CopyN(io.Discard, c.Conn, lingerBytes)
		}
	}
	return c.Conn.Close()
}

// connKey is the request context key of the request's trackedConn.
type connKey struct{}

// connContext puts the connection in its requests' context (for
// http.Server.ConnContext).
func connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*trackedConn); ok {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// A bodyTracker notes whether a request body was read to its end.
type bodyTracker struct {
	io.ReadCloser
	eof atomic.Bool
}

func (b *bodyTracker) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

// closeUnread closes the connection of every request answered without
// reading the whole body it announced (refused for its token, Host or
// Origin, a 404, /healthz, or any handler that does not read it), so that
// a client can hold a connection no longer than its request takes,
// whatever body it announces. As net/http does, it takes the handler to
// be done with the body once the answer's header goes out: then, if the
// body was not read to its end, the answer says "Connection: close" and
// the connection is doomed (see trackedConn), so that net/http neither
// waits for the rest of the body (it would, before the header of a large
// answer and after any answer, with no deadline) nor keeps the
// connection.
func closeUnread(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		tc, _ := r.Context().Value(connKey{}).(*trackedConn)
		body := &bodyTracker{ReadCloser: r.Body}
		uw := &unreadWriter{ResponseWriter: w, body: body, conn: tc}
		// A copy, so that net/http keeps seeing its own body.
		r2 := r.WithContext(r.Context())
		r2.Body = body
		next.ServeHTTP(uw, r2)
		uw.answering()
	})
}

// An unreadWriter is the ResponseWriter of a request that announced a
// body; see closeUnread.
type unreadWriter struct {
	http.ResponseWriter
	body *bodyTracker
	conn *trackedConn // nil when not served over the limiter

	done atomic.Bool // answering has run; an event stream's keep-alive flushes from another goroutine
}

// answering closes the connection after this answer, whose header is
// about to go out, unless the body was read to its end.
func (w *unreadWriter) answering() {
	if w.done.Swap(true) || w.body.eof.Load() {
		return
	}
	w.Header().Set("Connection", "close")
	if w.conn != nil {
		w.conn.doom()
	} else {
		// Not over a connection of the limiter (a test's server): make
		// the reads of the body fail at once.
		_ = http.NewResponseController(w.ResponseWriter).SetReadDeadline(time.Now())
	}
}

func (w *unreadWriter) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.answering()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *unreadWriter) Write(p []byte) (int, error) {
	w.answering()
	return w.ResponseWriter.Write(p)
}

// FlushError flushes the answer (for http.ResponseController).
func (w *unreadWriter) FlushError() error {
	w.answering()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush flushes the answer (for http.Flusher).
func (w *unreadWriter) Flush() { _ = w.FlushError() }

// Unwrap returns the ResponseWriter w wraps (for http.ResponseController).
func (w *unreadWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
