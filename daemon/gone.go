package daemon

import (
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultClientGoneAfter is how long a client that closed its event stream
// (GET) has to open another or send a request before its client session is
// closed (Options.ClientGoneAfter). It covers the reconnection the go-sdk
// and TypeScript SDK clients make a second after a stream breaks, and the
// pauses of a client that closes its stream between requests (the MCP
// conformance suite's clients do, and five seconds failed them on a loaded
// machine), while one-shot clients still go within a minute, not at the
// hour of the idle timeout.
const DefaultClientGoneAfter = time.Minute

// goneClients ends the client sessions of clients that left without a
// DELETE: a client that held an event stream (a GET) and closed it, with
// no request under way and none and no new stream within Options.ClientGoneAfter, is
// gone, and its client session is closed then, not at the idle timeout.
// One-shot clients such as the MCP Inspector CLI leave this way; before,
// each was kept, counted and notified of every change for an hour. A
// client that never opens a stream is only closed by the idle timeout (or
// its DELETE, which the go-sdk handler serves at once).
type goneClients struct {
	next  http.Handler
	srv   *mcp.Server
	grace time.Duration
	log   *slog.Logger

	mu   sync.Mutex
	seen map[string]*clientSeen // by Mcp-Session-Id, while requests run or a close is pending
}

// clientSeen is what goneClients knows of one client session.
type clientSeen struct {
	active  int    // requests under way (streams included)
	streams int    // GET streams open
	gen     uint64 // requests started so far
	pending bool   // a close is scheduled
}

func newGoneClients(next http.Handler, srv *mcp.Server, grace time.Duration, log *slog.Logger) *goneClients {
	return &goneClients{next: next, srv: srv, grace: grace, log: log, seen: make(map[string]*clientSeen)}
}

func (g *goneClients) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("Mcp-Session-Id")
	if id == "" {
		g.next.ServeHTTP(w, r)
		return
	}
	stream := r.Method == http.MethodGet
	g.mu.Lock()
	s := g.seen[id]
	if s == nil {
		s = &clientSeen{}
		g.seen[id] = s
	}
	s.active++
	s.gen++
	if stream {
		s.streams++
	}
	g.mu.Unlock()

	g.next.ServeHTTP(w, r)

	// The server's context is cancelled when the client's connection
	// closes, not when the handler ends the stream itself.
	left := stream && r.Context().Err() != nil
	g.mu.Lock()
	defer g.mu.Unlock()
	s.active--
	if stream {
		s.streams--
	}
	if left && s.active == 0 && !s.pending {
		s.pending = true
		gen := s.gen
		time.AfterFunc(g.grace, func() { g.expire(id, gen) })
	}
	if s.active == 0 && !s.pending {
		delete(g.seen, id)
	}
}

// expire closes client session id unless it made a request since the
// close was scheduled (its generation was gen) or has one under way.
func (g *goneClients) expire(id string, gen uint64) {
	g.mu.Lock()
	s := g.seen[id]
	if s == nil {
		g.mu.Unlock()
		return
	}
	s.pending = false
	gone := s.gen == gen && s.active == 0
	if s.active == 0 {
		delete(g.seen, id)
	}
	g.mu.Unlock()
	if !gone {
		return
	}
	for ss := range g.srv.Sessions() {
		if ss.ID() == id {
			g.log.Debug("client closed its event stream and sent nothing since: its client session ends", "after", g.grace)
			_ = ss.Close()
		}
	}
}
