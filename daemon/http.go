package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/internal/redact"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
)

// maxAdminBody bounds an admin request body.
const maxAdminBody = 1 << 20

// routes returns the daemon's HTTP handler (see the package documentation
// for the endpoints).
func (d *Daemon) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp/{session}", d.serveMCP)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", d.serveReadyz)
	mux.Handle("GET /metrics", d.adminOnly(d.metrics.handler()))
	mux.Handle("GET /v1/state", d.adminOnly(http.HandlerFunc(d.serveState)))
	mux.Handle("POST /v1/reload", d.adminOnly(http.HandlerFunc(d.serveReload)))
	mux.Handle("PUT /v1/sessions/{session}/servers/{server}", d.adminOnly(http.HandlerFunc(d.servePutOverlay)))
	mux.Handle("PATCH /v1/sessions/{session}/servers/{server}", d.adminOnly(http.HandlerFunc(d.servePatchOverlay)))
	mux.Handle("DELETE /v1/sessions/{session}/servers/{server}", d.adminOnly(http.HandlerFunc(d.serveDeleteOverlay)))
	mux.Handle("POST /v1/servers/{server}/restart", d.adminOnly(http.HandlerFunc(d.serveRestart)))
	d.uiRoutes(mux)
	return closeUnread(d.checkHostOrigin(d.refuseWhileDraining(mux)))
}

// allowedHosts is the set of host names a Host or Origin header may name:
// the loopback names, the listen host (unless it is a wildcard) and the
// extra names.
func allowedHosts(listen string, extra []string) map[string]bool {
	m := map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true}
	if host, _, err := net.SplitHostPort(listen); err == nil && host != "" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
			m[strings.ToLower(host)] = true
		}
	}
	for _, h := range extra {
		m[strings.ToLower(strings.Trim(h, "[]"))] = true
	}
	return m
}

// hostAllowed reports whether hostname (no port) may be named by a request
// that arrived on local address local.
func (d *Daemon) hostAllowed(hostname string, local net.Addr) bool {
	hostname = strings.ToLower(strings.Trim(hostname, "[]"))
	if d.allowed[hostname] {
		return true
	}
	// The IP address the request arrived on: a DNS rebinding request
	// always names the attacker's domain, never a bare IP.
	if ip := net.ParseIP(hostname); ip != nil && local != nil {
		if la, ok := local.(*net.TCPAddr); ok && la.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// checkHostOrigin refuses requests whose Host, or Origin when present,
// names a host other than the daemon (DNS rebinding protection).
func (d *Daemon) checkHostOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if !d.hostAllowed(host, local) {
			if d.refuse(refusedHost) {
				d.log.Info("refused request: Host not allowed", "host", clip(r.Host), "path", clip(r.URL.Path), "remote", r.RemoteAddr)
			}
			http.Error(w, fmt.Sprintf("Forbidden: Host %q is not allowed", clip(r.Host)), http.StatusForbidden)
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			u, err := url.Parse(origin)
			if err != nil || u.Host == "" || !d.hostAllowed(u.Hostname(), local) {
				if d.refuse(refusedOrigin) {
					d.log.Info("refused request: Origin not allowed", "origin", clip(origin), "path", clip(r.URL.Path), "remote", r.RemoteAddr)
				}
				http.Error(w, fmt.Sprintf("Forbidden: Origin %q is not allowed", clip(origin)), http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// refuse counts a refused request (wasmhost_http_requests_refused_total)
// and reports whether its log line may be written (see refusalLog).
func (d *Daemon) refuse(reason string) bool {
	d.metrics.requestsRefused.WithLabelValues(reason).Inc()
	return d.refusals.allow(reason)
}

// Why a request carries no bearer token (see bearer).
const (
	noCredentials = "no Authorization header"
	notBearer     = "Authorization is not a Bearer token"
)

// bearer returns the request's bearer token, or "" and why there is none
// (noCredentials, notBearer). Nothing of the header's value is in why.
func bearer(r *http.Request) (token, why string) {
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	switch {
	case h == "":
		return "", noCredentials
	case len(h) > len(prefix) && strings.EqualFold(h[:len(prefix)], prefix):
		if token = strings.TrimSpace(h[len(prefix):]); token != "" {
			return token, ""
		}
	}
	return "", notBearer
}

// tokenRefusal counts a refused bearer token (missing, not a bearer token,
// or a wrong one) and reports whether to log it, and in what words. Of a wrong
// one it tells, when the line will be logged, whose token it is (another
// session's, the admin's) if anyone's: the client learns nothing of it.
// The token itself is never logged.
func (d *Daemon) tokenRefusal(token, why string, admin bool) (logged bool, words string) {
	var reason string
	switch {
	case why == noCredentials && admin:
		reason = refusedAdminNoCredentials
	case why == noCredentials:
		reason = refusedNoCredentials
	case why == notBearer && admin:
		reason = refusedAdminNotBearer
	case why == notBearer:
		reason = refusedNotBearer
	case admin:
		reason, why = refusedAdminBadToken, "wrong token"
	default:
		reason, why = refusedBadToken, "wrong token"
	}
	if !d.refuse(reason) {
		return false, ""
	}
	if token != "" {
		if owner := d.tokenOwner(token); owner != "" {
			why = "wrong token: " + owner
		}
	}
	return true, why
}

// tokenOwner says whose token tok is in the running config ("the token of
// session NAME", "the admin token"), or "". Every token is compared, in
// constant time.
func (d *Daemon) tokenOwner(tok string) string {
	d.mu.Lock()
	cfg, admin := d.cfg, d.admin
	d.mu.Unlock()
	owner := ""
	if admin != nil && admin.TokenMatches(tok) {
		owner = "the admin token"
	}
	if cfg != nil {
		for _, name := range slices.Sorted(maps.Keys(cfg.Sessions)) {
			if cfg.Sessions[name].TokenMatches(tok) && owner == "" {
				owner = "the token of session " + name
			}
		}
	}
	return owner
}

func unauthorized(w http.ResponseWriter, realm string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
	http.Error(w, "Unauthorized", http.StatusUnauthorized)
}

// serveMCP serves /mcp/{session} behind the session's token.
func (d *Daemon) serveMCP(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("session")
	d.mu.Lock()
	var sess *config.Session
	if d.cfg != nil {
		sess = d.cfg.Sessions[name]
	}
	e := d.endpoints[name]
	d.mu.Unlock()
	// One answer for an unknown session and a wrong token: the response
	// does not tell which session names exist. The log, rate-limited,
	// tells the operator which.
	if sess == nil || e == nil {
		if d.refuse(refusedNoSession) {
			d.log.Info("refused MCP request: no such session", "session", clip(name), "remote", r.RemoteAddr)
		}
		unauthorized(w, "wasmhost")
		return
	}
	if token, why := bearer(r); why != "" || !sess.TokenMatches(token) {
		if logged, words := d.tokenRefusal(token, why, false); logged {
			d.log.Info("refused MCP request: "+words, "session", name, "remote", r.RemoteAddr)
		}
		unauthorized(w, "wasmhost")
		return
	}
	if limit := d.maxClients(); limit > 0 && r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
		// A request without a session id starts a client session (or, at
		// protocol 2026-07-28, is one request without any).
		if n := e.ep.Clients(); n >= limit {
			if d.refuse(refusedMaxClients) {
				d.log.Warn("refused MCP client: the session has as many clients as it takes", "session", name, "clients", n, "limit", limit, "remote", r.RemoteAddr)
			}
			w.Header().Set("Retry-After", "60")
			http.Error(w, fmt.Sprintf("Service Unavailable: session %q has %d clients, the most it takes; end idle ones (DELETE their session) or try again later", name, n), http.StatusServiceUnavailable)
			return
		}
	}
	if r.Method != http.MethodGet && d.requests.Enter() {
		defer d.requests.Leave()
	}
	e.http.ServeHTTP(w, r)
}

// adminOnly guards an admin endpoint with the admin token.
func (d *Daemon) adminOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		admin := d.admin
		d.mu.Unlock()
		if admin == nil {
			if d.refuse(refusedAdminOff) {
				d.log.Info("refused admin request: the admin API is disabled (the config has no admin block)", "path", clip(r.URL.Path), "remote", r.RemoteAddr)
			}
			http.Error(w, "admin API disabled: the config has no admin block", http.StatusNotFound)
			return
		}
		if token, why := bearer(r); why != "" || !admin.TokenMatches(token) {
			if logged, words := d.tokenRefusal(token, why, true); logged {
				d.log.Info("refused admin request: "+words, "path", clip(r.URL.Path), "remote", r.RemoteAddr)
			}
			unauthorized(w, "wasmhost-admin")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writeJSON writes v as the answer, with every secret of the configs the
// daemon has loaded replaced (errors from below quote upstream URLs whole).
func (d *Daemon) writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		b = []byte(`{"error": "encoding the answer failed"}`)
	}
	// Redacted on the way out: /v1/state of a thousand sessions is
	// megabytes, and a redacted copy of it would be one more.
	_, _ = d.secrets.Write(w, b)
	_, _ = io.WriteString(w, "\n")
}

type errorBody struct {
	Error   string `json:"error"`
	Summary any    `json:"summary,omitempty"`
}

func (d *Daemon) serveState(w http.ResponseWriter, _ *http.Request) {
	d.writeJSON(w, http.StatusOK, d.State())
}

func (d *Daemon) serveReload(w http.ResponseWriter, _ *http.Request) {
	res, err := d.Reload(d.life, "admin")
	switch {
	case errors.Is(err, ErrNotReady):
		d.writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
	case err == nil:
		d.writeJSON(w, http.StatusOK, res)
	case !res.Applied:
		d.writeJSON(w, http.StatusUnprocessableEntity, res)
	default:
		d.writeJSON(w, http.StatusBadGateway, res)
	}
}

// An overlayResult is the answer to an overlay PUT, PATCH or DELETE.
type overlayResult struct {
	Session string `json:"session"`
	Server  string `json:"server"`
	Summary string `json:"summary"`
	Error   string `json:"error,omitempty"`
	// Warnings are the config loader's warnings about the entry (an
	// unknown key, say), as a file entry would get them.
	Warnings []string `json:"warnings,omitempty"`
}

// parseServerEntry parses body as one "mcpServers" entry named name, with
// the config loader's rules and messages; relative paths resolve against
// the config file's directory.
func (d *Daemon) parseServerEntry(name string, body []byte) (*config.Server, []string, error) {
	file := filepath.Join(filepath.Dir(d.path), "request body")
	if !json.Valid(body) {
		// The loader's syntax error gives the line and column.
		if _, _, err := config.Parse(file, body, nil, nil); err != nil {
			return nil, nil, errors.New(strings.ReplaceAll(err.Error(), file, "request body"))
		}
		return nil, nil, errors.New("request body: not a JSON value")
	}
	key, _ := json.Marshal(name)
	doc := append(append(append([]byte(`{"mcpServers":{`), key...), ':'), body...)
	doc = append(doc, "}}"...)
	// The running plugin's own settings keys are accepted, as in the file.
	var opts config.Options
	if pol := d.policy.Load(); pol != nil {
		hs := pol.policy.Handshake()
		opts.ServerKeys, opts.ServerKeysOwner = hs.SettingsKeys, fmt.Sprintf("policy plugin %q", hs.Name)
	}
	cfg, ws, err := config.ParseWith(file, doc, opts)
	// Paths are given in the body, not in the document wrapped around it:
	// "trust", not "mcpServers.NAME.trust".
	entry := config.JoinPath("mcpServers", name)
	inBody := strings.NewReplacer(file+": "+entry+".", "request body: ", file+": "+entry+": ", "request body: ", file+": ", "request body: ")
	if err != nil {
		return nil, nil, errors.New(inBody.Replace(err.Error()))
	}
	var warnings []string
	for _, w := range ws {
		if strings.HasPrefix(w.Path, "mcpServers") { // not the document's own, such as "no sessions"
			warnings = append(warnings, inBody.Replace(w.String()))
		}
	}
	d.secrets.Add(redact.ServerSecrets(cfg.Servers[name])...)
	return cfg.Servers[name], warnings, nil
}

func (d *Daemon) servePutOverlay(w http.ResponseWriter, r *http.Request) {
	sessionName, server := r.PathValue("session"), r.PathValue("server")
	body, ok := d.readAdminBody(w, r)
	if !ok {
		return
	}
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	if !d.overlayTarget(w, sessionName, server) {
		return
	}
	d.putOverlay(w, "put", sessionName, server, body)
}

// putOverlay validates entry, the whole "mcpServers" entry an overlay PUT
// or PATCH brings for server, as the config loader does (an unknown key
// is refused), asks the running policy about its settings and puts it.
// d.reloadMu is held.
func (d *Daemon) putOverlay(w http.ResponseWriter, verb, sessionName, server string, entry []byte) {
	srv, warnings, err := d.parseServerEntry(server, entry)
	if err != nil {
		d.writeJSON(w, http.StatusBadRequest, errorBody{Error: err.Error()})
		return
	}
	if msg := d.overlayNamingChange(sessionName, server, srv); msg != "" {
		d.writeJSON(w, http.StatusBadRequest, errorBody{Error: "request body: " + msg})
		return
	}
	for _, msg := range warnings {
		d.log.Warn("overlay "+verb+": "+msg, "session", sessionName, "server", server)
	}
	if !srv.Disabled {
		if err := reconcile.SpecOf(srv).CheckCommand(); err != nil {
			d.writeJSON(w, http.StatusBadRequest, errorBody{Error: "request body: " + pool.CommandField(err) + ": server " + strconv.Quote(server) + " cannot start: " + err.Error()})
			return
		}
	}
	var sum reconcile.Summary
	err = d.rec.CheckOverlay(d.life, sessionName, srv)
	if !errors.Is(err, reconcile.ErrSettingsRefused) {
		// A policy call failing as a whole is the views' to report, as
		// without the check.
		sum, err = d.rec.PutOverlay(d.life, sessionName, srv)
		d.keepOverlay(sessionName, srv, err)
	}
	d.answerOverlay(w, verb, sessionName, server, sum, err, warnings)
}

// overlayNamingChange says why srv, an overlay for server in sessionName,
// is refused when it changes "prefix" or "instructions": a session's naming
// and instructions come from the config file, and an overlay that set them
// would be accepted and ignored. "" when it changes neither. d.reloadMu is
// held.
func (d *Daemon) overlayNamingChange(sessionName, server string, srv *config.Server) string {
	cur, _, _ := d.runningConfig().Sessions[sessionName].Effective(server)
	if cur == nil {
		return ""
	}
	if (cur.Prefix == nil) != (srv.Prefix == nil) || (cur.Prefix != nil && *cur.Prefix != *srv.Prefix) {
		return `"prefix" cannot be changed by an overlay; set it in the config file`
	}
	if cur.Instructions != srv.Instructions {
		return `"instructions" cannot be changed by an overlay; set it in the config file`
	}
	return ""
}

func (d *Daemon) serveDeleteOverlay(w http.ResponseWriter, r *http.Request) {
	sessionName, server := r.PathValue("session"), r.PathValue("server")
	d.reloadMu.Lock()
	var sum reconcile.Summary
	// The file's settings come back: settings the policy refuses are
	// refused as a reload bringing them is, and the overlay stays.
	err := d.rec.CheckDeleteOverlay(d.life, sessionName, server)
	if errors.Is(err, reconcile.ErrSettingsRefused) {
		err = fmt.Errorf("%s: %w", d.file, err)
	} else {
		// A policy call failing as a whole is the views' to report, as
		// without the check.
		sum, err = d.rec.DeleteOverlay(d.life, sessionName, server)
	}
	if err == nil {
		d.dropOverlay(sessionName, server)
	}
	d.reloadMu.Unlock()
	d.answerOverlay(w, "delete", sessionName, server, sum, err, nil)
}

func (d *Daemon) answerOverlay(w http.ResponseWriter, verb, sessionName, server string, sum reconcile.Summary, err error, warnings []string) {
	res := overlayResult{Session: sessionName, Server: server, Summary: describeSummary(sum, d.clientsNotified(sum), "policy unchanged"), Warnings: warnings}
	status := http.StatusOK
	if err != nil {
		res.Error = err.Error()
		switch {
		case errors.Is(err, reconcile.ErrUnknownSession), errors.Is(err, reconcile.ErrNoOverlay):
			status = http.StatusNotFound
		case errors.Is(err, pool.ErrInvalidSpec):
			status = http.StatusBadRequest
		case errors.Is(err, reconcile.ErrSettingsRefused):
			status = http.StatusUnprocessableEntity
		default:
			status = http.StatusBadGateway
		}
	}
	if err != nil {
		d.log.Warn("overlay "+verb+" failed: "+res.Summary, "session", sessionName, "server", server, "err", res.Error)
	} else {
		d.log.Info("overlay "+verb+": "+res.Summary, "session", sessionName, "server", server)
	}
	d.writeJSON(w, status, res)
}

func (d *Daemon) serveRestart(w http.ResponseWriter, r *http.Request) {
	server := r.PathValue("server")
	err := d.rec.Restart(d.life, server)
	switch {
	case err == nil:
		d.log.Info("restarted by admin request", "server", server)
		d.writeJSON(w, http.StatusOK, map[string]string{"server": server, "result": "restarted"})
	case errors.Is(err, reconcile.ErrNotBound):
		d.writeJSON(w, http.StatusNotFound, errorBody{Error: err.Error()})
	default:
		d.writeJSON(w, http.StatusBadGateway, errorBody{Error: err.Error()})
	}
}
