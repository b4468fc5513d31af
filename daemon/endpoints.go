package daemon

import (
	"cmp"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/session"
	"github.com/wasmhost/wasmhost/view"
)

// An endpoint is one session's MCP endpoint and its HTTP handler.
type endpoint struct {
	ep    *session.Endpoint
	http  http.Handler
	token string // the token it was created with, to notice a change
}

// registry is the reconciler's Registry callback: it creates the session's
// endpoint.
func (d *Daemon) registry(name string) view.Registry {
	d.mu.Lock()
	naming, instructed := SessionNaming(d.cfg, name)
	d.mu.Unlock()
	ep := session.New(session.Options{
		Naming:         naming,
		Name:           name,
		Upstream:       d.upstreamFor(name),
		Progress:       d.relay,
		Implementation: &mcp.Implementation{Name: "wasmhost", Title: "wasmhost session " + name, Version: Version},
		Logger:         d.log.With("component", "session"),
		Redact:         d.secrets.Error,
		OnCall:         d.metrics.observeCall,
		Unavailable:    func(server string) string { return d.rec.Unavailable(name, server) },
	})
	var handler http.Handler
	if d.opts.Stdio == nil {
		handler = d.sessionHandler(name, ep)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var token string
	if s := d.cfg.Sessions[name]; s != nil {
		token = s.Token
	}
	ep.SetInstructions(instructed)
	d.endpoints[name] = &endpoint{ep: ep, http: handler, token: token}
	return ep
}

// sessionHandler returns the HTTP handler of session name's endpoint ep.
func (d *Daemon) sessionHandler(name string, ep *session.Endpoint) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ep.Server() }, &mcp.StreamableHTTPOptions{
		Logger: d.log.With("component", "http", "session", name),
		// checkHostOrigin already applies the same rule (and the operator's
		// AllowedHosts, which the go-sdk's own check would refuse behind a
		// local reverse proxy).
		DisableLocalhostProtection: true,
		SessionTimeout:             d.clientIdleTimeout(),
	})
	// One-shot clients (each MCP Inspector CLI call) close their event
	// stream without a DELETE: their client sessions end soon after.
	gone := newGoneClients(h, ep.Server(), cmp.Or(d.opts.ClientGoneAfter, DefaultClientGoneAfter), d.log.With("component", "http", "session", name))
	handler := ep.HTTPHandler(gone)
	if d.opts.PerRequestHTTP {
		// Requests of the per-request protocol (2026-07-28) carry no
		// client session: go-sdk v1.8.0 serves them only on a stateless
		// handler, which answers each with a temporary session of its
		// own on the same server.
		hs := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ep.Server() }, &mcp.StreamableHTTPOptions{
			Logger:                     d.log.With("component", "http", "session", name),
			DisableLocalhostProtection: true,
			Stateless:                  true,
		})
		handler = d.byProtocol(handler, ep.HTTPHandler(hs))
	}
	return handler
}

// SessionNaming returns how cfg's session name names its tools and prompts
// (its "names" and its servers' "prefix" settings), and the servers whose
// instructions its clients get ("instructions"), for session.Endpoint's
// SetNaming and SetInstructions. An unknown session gets the default
// naming and no instructions.
func SessionNaming(cfg *config.Config, name string) (session.Naming, []string) {
	return sessionNaming(cfg, serverNames(cfg), name)
}

// serverNames is cfg's server names, sorted; none for no config.
func serverNames(cfg *config.Config) []string {
	if cfg == nil {
		return nil
	}
	return cfg.ServerNames()
}

// sessionNaming is SessionNaming given serverNames(cfg).
func sessionNaming(cfg *config.Config, servers []string, name string) (session.Naming, []string) {
	n := session.Naming{Mode: session.NamesAuto}
	var s *config.Session
	if cfg != nil {
		s = cfg.Sessions[name]
	}
	if s == nil {
		return n, nil
	}
	if s.Names != "" {
		n.Mode = session.NameMode(s.Names)
	}
	var instructed []string
	for _, server := range servers {
		if !s.Uses(server) {
			continue
		}
		if p, ok := s.Prefix(server); ok {
			if n.Prefix == nil {
				n.Prefix = make(map[string]string)
			}
			n.Prefix[server] = p
		}
		if s.Instructions(server) {
			instructed = append(instructed, server)
		}
	}
	return n, instructed
}

// applyNaming gives each endpoint its session's naming and instructions
// settings from cfg; an endpoint whose names change tells its clients.
func (d *Daemon) applyNaming(cfg *config.Config) {
	d.mu.Lock()
	eps := make(map[string]*session.Endpoint, len(d.endpoints))
	for name, e := range d.endpoints {
		eps[name] = e.ep
	}
	d.mu.Unlock()
	servers := serverNames(cfg) // sorted once, not once a session
	for name, ep := range eps {
		naming, instructed := sessionNaming(cfg, servers, name)
		ep.SetNaming(naming)
		ep.SetInstructions(instructed)
	}
}

// upstreamFor resolves a session's calls through its own handles, looked
// up at call time.
func (d *Daemon) upstreamFor(name string) func(string) session.Target {
	return func(server string) session.Target {
		h := d.rec.Handle(name, server)
		if h == nil {
			return session.Target{}
		}
		return session.Target{Conn: h.Conn(), Timeout: h.CallTimeout(), Subscriptions: h}
	}
}

// syncEndpoints drops the endpoints of sessions cfg no longer has, and
// disconnects the clients of sessions whose token changed (they must
// reconnect with the new one).
func (d *Daemon) syncEndpoints(cfg *config.Config) {
	type dropped struct {
		e          *endpoint
		name, what string
	}
	d.mu.Lock()
	var drop []dropped
	for name, e := range d.endpoints {
		s := cfg.Sessions[name]
		switch {
		case s == nil:
			delete(d.endpoints, name)
			drop = append(drop, dropped{e, name, "session removed"})
		case s.Token != e.token && d.opts.Stdio == nil: // stdio mode has no token
			e.token = s.Token
			drop = append(drop, dropped{e, name, "session token changed"})
		}
	}
	d.mu.Unlock()
	for _, x := range drop {
		// Their clients are cut off without an answer: say why.
		d.log.Info(x.what+"; its clients are disconnected", "session", x.name, "clients", x.e.ep.Clients())
		x.e.ep.Close()
	}
}

// clientsNotified counts the clients connected to the sessions sum reports
// changed: each got (or is about to get) a list_changed.
func (d *Daemon) clientsNotified(sum reconcile.Summary) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, name := range sum.Changed {
		if e := d.endpoints[name]; e != nil {
			n += e.ep.Clients()
		}
	}
	return n
}

// clientIdleTimeout is Options.ClientIdleTimeout with its default, as the
// go-sdk's SessionTimeout (0: never).
func (d *Daemon) clientIdleTimeout() time.Duration {
	switch t := d.opts.ClientIdleTimeout; {
	case t < 0:
		return 0
	case t == 0:
		return DefaultClientIdleTimeout
	default:
		return t
	}
}
