package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/internal/inflight"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/internal/procgroup"
	"github.com/wasmhost/wasmhost/internal/redact"
	"github.com/wasmhost/wasmhost/internal/stderrlog"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/session"
)

// Version is announced to clients and upstreams. The wasmhost command sets
// it, before serving anything, to the version `wasmhost version` prints.
var Version = "dev"

// Defaults for Options.
const (
	DefaultDebounce      = 200 * time.Millisecond
	DefaultCrashRestarts = 3
	DefaultRetryMin      = time.Second
	DefaultRetryMax      = 30 * time.Second
	shutdownGrace        = 5 * time.Second
	// upstreamCloseGrace bounds the wait for upstream connections to
	// close at shutdown: as long as a stubborn stdio server's close takes.
	upstreamCloseGrace = procgroup.MaxClose
)

// Errors Run returns, wrapped with the details, when it refuses to start
// (see also ErrConfigInvalid and ErrPolicyRefused).
var (
	// ErrNotLoopback: the listen address is not a loopback address and
	// Options.AllowRemote is false.
	ErrNotLoopback = errors.New("refusing to listen on a non-loopback address without AllowRemote (--allow-remote)")
	// ErrBadListen: the listen address is not host:port, its port is not
	// a port, or its host cannot be resolved.
	ErrBadListen = errors.New("bad listen address")
)

// Options configure a Daemon.
type Options struct {
	// ConfigPath is the config file. Required. With ConfigData it only
	// names the config in messages, and its directory is the base of
	// relative paths in it.
	ConfigPath string
	// ConfigData, when not nil, is the config itself (`wasmhost run --
	// CMD` builds one): it is parsed and validated as a file would be,
	// but no file is read or watched, and a reload parses it again.
	ConfigData []byte
	// Logger receives every log line; nil means slog.Default().
	Logger *slog.Logger
	// Listen, when non-empty, replaces the config's listen address (tests
	// use "127.0.0.1:0"; see Daemon.Addr).
	Listen string
	// AllowRemote allows a listen address that is not loopback.
	AllowRemote bool
	// AllowedHosts are extra host names (or IPs) accepted in Host and
	// Origin headers, for clients that reach a remote daemon by name.
	AllowedHosts []string
	// CacheDir is the policy plugin's compilation cache directory; ""
	// means no disk cache.
	CacheDir string
	// Debounce is how long watch and SIGHUP triggers wait for more before
	// reloading; 0 means DefaultDebounce.
	Debounce time.Duration
	// CrashRestarts is how many immediate restarts the pool makes after an
	// upstream ends by itself (see pool.Options); 0 means
	// DefaultCrashRestarts, negative means none.
	CrashRestarts int
	// RetryMin and RetryMax bound the backoff between retries of a binding
	// whose upstream could not be started; 0 means the defaults.
	RetryMin, RetryMax time.Duration
	// Dialer makes upstream transports; nil means pool.HidingDialer,
	// keeping the variables of every "tokenEnv" from stdio upstreams.
	Dialer pool.Dialer
	// ClientIdleTimeout closes an MCP client session that has sent no
	// request for this long (an open event stream does not count); 0 means
	// DefaultClientIdleTimeout, negative means never.
	ClientIdleTimeout time.Duration
	// ClientGoneAfter closes the client session of a client that closed
	// its event stream (GET) and sent nothing, and opened no other stream,
	// for this long: one-shot clients leave so, without a DELETE. 0 means
	// DefaultClientGoneAfter.
	ClientGoneAfter time.Duration
	// MaxClients is how many MCP client sessions one session endpoint
	// holds at once; a client starting one more is answered 503 until
	// another ends or idles out (ClientIdleTimeout). 0 means
	// DefaultMaxClients, negative means no limit.
	MaxClients int
	// DrainTimeout is how long a stop gives the calls under way to finish
	// before they are cut short; 0 means DefaultDrainTimeout. The stop
	// first turns /readyz to 503 and refuses new MCP requests (503), then
	// waits for the calls.
	DrainTimeout time.Duration
	// PerRequestHTTP serves MCP requests of protocol 2026-07-28 and later
	// that carry no Mcp-Session-Id (SEP-2575: each request says what
	// initialize used to) with go-sdk's stateless handler, so that any
	// replica answers any of them. Without it they are refused with
	// UnsupportedProtocolVersion, and go-sdk clients fall back to a
	// 2025-11-25 client session. Each such request (and each
	// subscriptions/listen stream) is one of the endpoint's MaxClients
	// while it lasts.
	PerRequestHTTP bool
	// Replica names this daemon among the replicas serving the same
	// config: the "replica" label of wasmhost_build_info. "" leaves it
	// empty.
	Replica string
	// MaxConns bounds the HTTP connections open at once, and
	// MaxConnsPerIP those from one client IP address (an IPv6 client: its
	// /64); a connection beyond either is answered 503 and closed when
	// accepted. 0 means DefaultMaxConns and DefaultMaxConnsPerIP,
	// negative means no limit. Behind a reverse proxy every client has the
	// proxy's address.
	MaxConns, MaxConnsPerIP int
	// IdleTimeout closes a kept-alive connection that sends no new request
	// for this long; ReadHeaderTimeout one whose request's headers take
	// longer. Neither bounds a request under way (an event stream, a long
	// call). 0 or less means DefaultIdleTimeout and
	// DefaultReadHeaderTimeout.
	IdleTimeout, ReadHeaderTimeout time.Duration
	// Stdio, when set, serves one session over a stream instead of HTTP
	// (`wasmhost stdio`); see Stdio.
	Stdio *Stdio
}

// DefaultMaxClients is how many client sessions a session endpoint holds
// at once by default. Each costs a few KiB and hears every list change of
// the session until it ends or idles out, so without a limit one holder
// of a session's token could make the daemon keep any number of them.
const DefaultMaxClients = 1024

// DefaultClientIdleTimeout is how long a client session may go without a
// request before the daemon closes it. Clients that leave without ending
// their session (many do not send the DELETE) would otherwise be kept, and
// notified of every change, for the life of the daemon. A client that
// comes back later gets 404 for its session id and, as the MCP
// specification requires, starts a new session.
const DefaultClientIdleTimeout = time.Hour

// A Daemon is one running wasmhost gateway. Create it with New and run it
// with Run, once.
type Daemon struct {
	opts     Options
	file     string      // config path as given, for messages
	path     string      // absolute config path, for watching
	secrets  *redact.Set // of every config loaded; the logger redacts them
	log      *slog.Logger
	counters *opcount.Counters
	relay    *session.ProgressRelay
	metrics  *metrics
	pids     *pidTable
	stderr   *stderrlog.Budgets // of the stdio upstreams, by server
	// stderrTo, when set (stdio mode), receives the stdio upstreams'
	// standard error instead of the log (Stdio.Stderr).
	stderrTo io.Writer
	ready    chan struct{}
	trigger  chan string // debounced reload requests (source name)
	// retarget tells the file watcher that the running config changed,
	// so that it watches the files the new one depends on.
	retarget chan struct{}
	// requests counts the MCP requests under way other than GET streams,
	// so that a shutdown waits until their answers are written; it is
	// safe for concurrent use.
	requests inflight.Gate
	// draining is set when Run begins to stop: /readyz answers 503 and
	// new MCP requests are refused from then on.
	draining atomic.Bool
	// listens are the subscriptions/listen streams of per-request
	// protocol clients under way, which a stop ends at once.
	listens listenStreams
	// refusals rate-limits the log lines of refused requests and
	// connections.
	refusals *refusalLog

	// hideMu guards hideEnv: the environment variables any config loaded
	// so far read a token from ("tokenEnv"), kept from stdio upstreams.
	hideMu  sync.Mutex
	hideEnv []string

	// reloadMu serialises reloads, policy swaps and admin mutations.
	reloadMu sync.Mutex
	// policy is the running plugin: written with reloadMu held, read
	// anywhere.
	policy atomic.Pointer[loadedPolicy]
	// warned holds the warnings of the last config load (logWarnings);
	// reloadMu guards it.
	warned map[string]bool
	// overlays holds the runtime overlays in force, by session and
	// server, as the entries an overlay PATCH applies to; reloadMu
	// guards it.
	overlays map[string]map[string]*config.Server

	// Set once in Run before ready is closed, then read-only.
	//
	// life is cancelled when Run begins to stop. Admin changes (reloads,
	// overlays, restarts) run under it rather than under their request's
	// context: a client that gives up (a timeout, Ctrl-C) while its change
	// is being applied would otherwise cancel the policy calls under way,
	// and the views they were for would fail closed, half applied.
	life     context.Context
	pool     *pool.Pool
	rec      *reconcile.Reconciler
	addr     net.Addr
	conns    *connLimiter
	allowed  map[string]bool
	listenAt string

	mu sync.Mutex
	// admin is nil when the admin API is disabled, which is decided at
	// start-up; a reload may replace the token.
	admin *config.Admin
	cfg   *config.Config
	// refusedFiles are the files the last reload read or tried to read
	// (token files, the policy) when it was refused, by what they are;
	// nil after a reload that applied. The watcher watches them too, so
	// that the file the refusal was waiting for retries it.
	refusedFiles map[string]string
	endpoints    map[string]*endpoint
	lastReload   *ReloadResult
	running      bool

	// reloads are the latest reloads, oldest first, at most maxReloads
	// (State.Reloads); guarded by mu.
	reloads []*ReloadResult
}

// New checks opts and returns a daemon ready to Run.
func New(opts Options) (*Daemon, error) {
	if opts.ConfigPath == "" {
		return nil, errors.New("daemon: no config path")
	}
	path, err := filepath.Abs(opts.ConfigPath)
	if err != nil {
		return nil, fmt.Errorf("daemon: config path %q: %w", opts.ConfigPath, err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.CrashRestarts == 0 {
		opts.CrashRestarts = DefaultCrashRestarts
	}
	if opts.RetryMin <= 0 {
		opts.RetryMin = DefaultRetryMin
	}
	if opts.RetryMax < opts.RetryMin {
		opts.RetryMax = max(DefaultRetryMax, opts.RetryMin)
	}
	if opts.MaxConns == 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.MaxConnsPerIP == 0 {
		opts.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.ReadHeaderTimeout <= 0 {
		opts.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	secrets := &redact.Set{}
	d := &Daemon{
		opts:      opts,
		file:      opts.ConfigPath,
		path:      path,
		secrets:   secrets,
		log:       slog.New(secrets.Handler(opts.Logger.Handler())),
		counters:  &opcount.Counters{},
		relay:     session.NewProgressRelay(),
		pids:      newPIDTable(),
		stderr:    &stderrlog.Budgets{},
		ready:     make(chan struct{}),
		trigger:   make(chan string, 1),
		retarget:  make(chan struct{}, 1),
		endpoints: make(map[string]*endpoint),
	}
	d.refusals = newRefusalLog(d.log)
	d.metrics = newMetrics(d)
	return d, nil
}

// Ready is closed once Run serves: the listener is bound, the config is
// applied, and Addr and Sessions answer.
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

// Addr returns the address the daemon listens on (host:port, the bound
// port when the config asked for port 0). It is "" before Ready.
func (d *Daemon) Addr() string {
	select {
	case <-d.ready:
		if d.addr == nil {
			return "" // stdio mode
		}
		return d.addr.String()
	default:
		return ""
	}
}

// URL returns the base URL, e.g. "http://127.0.0.1:8750". It is "" before
// Ready.
func (d *Daemon) URL() string {
	if a := d.Addr(); a != "" {
		return "http://" + a
	}
	return ""
}

// AdminEnabled reports whether the admin API is served: the config has an
// "admin" block (read at start-up only).
func (d *Daemon) AdminEnabled() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.admin != nil
}

// SessionInfo describes one session's endpoint for the operator.
type SessionInfo struct {
	Name string
	// URL is the session's MCP endpoint.
	URL string
	// TokenSource says where the token comes from, without its value.
	TokenSource string
	// InlineToken is the token itself, set only when it is written inline
	// in the config file (demo setups): a token from a file or the
	// environment is never handed out.
	InlineToken string
}

// runningConfig returns the config in force (nil before Run has loaded
// one).
func (d *Daemon) runningConfig() *config.Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg
}

// Sessions describes the configured sessions, sorted by name.
func (d *Daemon) Sessions() []SessionInfo {
	cfg := d.runningConfig()
	if cfg == nil {
		return nil
	}
	var out []SessionInfo
	base := d.URL()
	for _, name := range cfg.SessionNames() {
		s := cfg.Sessions[name]
		info := SessionInfo{Name: name, URL: base + "/mcp/" + name, TokenSource: s.TokenSource}
		if s.TokenSource == "token" {
			info.InlineToken = s.Token
		}
		out = append(out, info)
	}
	return out
}

// Run loads the config and the policy plugin, starts the pool, the
// sessions and the HTTP server, and serves until ctx is done; then it shuts
// everything down (clients, HTTP server, upstream connections, plugin) and
// returns nil. It returns an error, without serving, when the config
// cannot be read or is invalid (ErrConfigInvalid; the error names the file
// and JSON path), the policy plugin cannot be loaded or is refused
// (ErrPolicyRefused, likewise located), the listen address is malformed
// (ErrBadListen) or not loopback (ErrNotLoopback), or the address cannot
// be bound (the config's "listen" is located likewise; Options.Listen is
// named as "listen").
func (d *Daemon) Run(ctx context.Context) error {
	d.mu.Lock()
	if d.running {
		d.mu.Unlock()
		return errors.New("daemon: Run called twice")
	}
	d.running = true
	d.mu.Unlock()

	// SIGHUP is caught from the start: its default action would end a
	// daemon still starting and leave its upstreams behind. One that comes
	// before the daemon is ready waits in the channel and reloads after.
	// In stdio mode it is the caller's (a hung-up terminal stops
	// `wasmhost stdio`).
	var hup chan os.Signal
	if d.opts.Stdio == nil {
		hup = make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}

	// Warnings are logged even when the config is refused: an unknown key
	// may be the typo behind the error.
	// The policy block is read, and its plugin loaded, before the rest of
	// the file: the plugin decides which settings keys it may hold.
	ld, kind, err := d.loadConfigPolicy(ctx, nil, nil)
	d.logWarnings(ld.warnings)
	if err != nil {
		return fmt.Errorf("daemon: %w: %w", kind, err)
	}
	cfg, pol := ld.cfg, ld.next
	d.secrets.AddConfig(ld.full)
	d.hideTokenEnvs(ld.full)
	cmdWarnings, _ := d.checkCommands(cfg) // nothing runs yet: warnings only
	for _, w := range cmdWarnings {
		d.log.Warn("config: " + w)
	}

	var ln net.Listener
	if d.opts.Stdio == nil {
		if ln, err = d.listen(cfg); err != nil {
			_ = pol.close(context.Background())
			return err
		}
	}
	d.policy.Store(pol)

	dialer := d.opts.Dialer
	if dialer == nil {
		dialer = pool.HidingDialer(d.hiddenEnv)
	}
	if d.opts.Stdio != nil && d.opts.Stdio.Stderr != nil {
		d.stderrTo = d.opts.Stdio.Stderr
	}
	crashes := d.opts.CrashRestarts
	if crashes < 0 {
		crashes = 0
	}
	d.pool = pool.New(pool.Options{
		Dialer:        d.dial(dialer),
		Counters:      d.counters,
		Logger:        d.log.With("component", "pool"),
		Client:        &mcp.Implementation{Name: "wasmhost", Version: Version},
		CrashRestarts: crashes,
		OnProgress:    d.relay.Handle,
		Bridge:        d.relay,
	})
	d.rec = reconcile.New(reconcile.Options{
		Pool:     d.pool,
		Policy:   pol.policy,
		Registry: d.registry,
		Counters: d.counters,
		Logger:   d.log.With("component", "reconcile"),
	})
	d.mu.Lock()
	d.cfg = cfg
	d.admin = cfg.Admin
	d.mu.Unlock()
	bg, stopBG := context.WithCancel(context.Background())
	defer stopBG()
	d.life = bg
	// The watcher starts before the first Apply, so that a file changed
	// while the upstreams start is reloaded once they have. Its requests
	// wait for the debounce loop, started below.
	var wg sync.WaitGroup
	if d.opts.ConfigData == nil {
		if err := d.startWatcher(bg, &wg); err != nil {
			d.log.Warn("config file watching disabled", "err", err)
		}
	}

	var srv *http.Server
	serveErr := make(chan error, 1)
	if ln != nil {
		d.conns = d.limitConns(ln)
		srv = d.httpServer()
		go func() { serveErr <- srv.Serve(d.conns) }()
	}

	sum, applyErr := d.rec.Apply(ctx, cfg)
	where := []any{"config", d.file}
	if d.addr != nil {
		where = append(where, "listen", d.addr.String())
	}
	d.log.Info("started: "+describeSummary(sum, d.clientsNotified(sum), "policy "+pol.describe()), where...)
	if applyErr != nil {
		d.log.Warn("some bindings failed: servers that could not start, and views the policy refused or failed on, are retried with backoff", "err", applyErr)
	}
	var stdio *stdioServer
	if d.opts.Stdio != nil {
		if stdio, err = d.serveStdio(); err != nil {
			stopBG()
			wg.Wait()
			d.closeUpstreams()
			return err
		}
		serveErr = stdio.served
	}
	close(d.ready)

	if d.opts.Stdio == nil { // one client: nothing to reclaim
		wg.Go(func() { d.reclaim(bg) })
	}
	wg.Go(func() {
		for {
			select {
			case <-hup:
				d.requestReload("SIGHUP")
			case <-bg.Done():
				return
			}
		}
	})
	wg.Go(func() { d.debounceLoop(bg) })
	wg.Go(func() { d.supervise(bg) })

	var runErr error
	select {
	case <-ctx.Done():
		d.draining.Store(true)
		if stdio != nil {
			runErr = stdio.shutdown()
			break
		}
		d.listens.endAll() // they carry no call: nothing to wait for
		d.log.Info("stopping: answering the calls under way; not ready (/readyz 503), new MCP requests refused", "drain_timeout", d.drainTimeout())
	case err := <-serveErr:
		runErr = err
		if stdio != nil {
			stdio.stop() // the client closed its stream
		}
	}
	if runErr != nil && !(stdio != nil && ServedToEnd(runErr)) {
		runErr = fmt.Errorf("daemon: serve: %w", runErr)
	} else {
		runErr = nil
	}

	// Shutdown: stop triggers, let the calls under way be answered,
	// disconnect clients, stop HTTP, release upstreams, close the plugin.
	// SIGHUP stays caught (the deferred Stop) until Run returns: its
	// default action would end the daemon during the shutdown and leave
	// its upstreams behind.
	stopBG()
	wg.Wait()
	d.mu.Lock()
	eps := slices.Collect(maps.Values(d.endpoints))
	d.mu.Unlock()
	if srv != nil {
		d.drain(eps)
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	for _, e := range eps {
		e.ep.Close()
	}
	if srv != nil {
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
		if runErr == nil {
			<-serveErr
		}
	}
	d.closeUpstreams()
	d.log.Info("stopped")
	return runErr
}

// closeUpstreams, last at a stop, releases the sessions, closes the
// upstream connections and the policy plugin.
func (d *Daemon) closeUpstreams() {
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := d.rec.Close(sctx); err != nil {
		d.log.Warn("releasing sessions", "err", err)
	}
	pctx, pcancel := context.WithTimeout(context.Background(), upstreamCloseGrace)
	defer pcancel()
	if err := d.pool.Close(pctx); err != nil {
		d.log.Warn("closing upstream connections", "err", err)
	}
	d.reloadMu.Lock()
	if err := d.policy.Load().close(sctx); err != nil {
		d.log.Warn("closing policy plugin", "err", err)
	}
	d.reloadMu.Unlock()
}

// drain, at shutdown, makes every endpoint refuse new calls and waits, at
// most the drain timeout (Options.DrainTimeout), until the calls under way have returned (calls still
// running then are cut short with an answer saying so) and the MCP requests
// that carried them have written their answers.
func (d *Daemon) drain(eps []*endpoint) {
	ctx, cancel := context.WithTimeout(context.Background(), d.drainTimeout())
	defer cancel()
	var wg sync.WaitGroup
	for _, e := range eps {
		wg.Go(func() {
			if err := e.ep.Drain(ctx); err != nil {
				d.log.Warn("shutdown: calls cut short", "err", err)
			}
		})
	}
	wg.Wait()
	d.requests.Close() // requests that come now are refused calls, not waited for
	if ctx.Err() != nil {
		// Calls were cut short (Drain answers them): give the requests
		// carrying those answers a moment to write them.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), session.AnswerGrace)
		defer cancel()
	}
	if err := d.requests.Wait(ctx); err != nil {
		d.log.Warn("shutdown: MCP requests cut short", "err", err)
	}
}

// logWarnings logs a config load's warnings: at warn level those the last
// load did not give, at debug level the others, so that every reload does
// not repeat what the operator has already been told. Start-up and reloads
// call it with reloadMu held, or before anything else can reload.
func (d *Daemon) logWarnings(ws []config.Warning) {
	seen := make(map[string]bool, len(ws))
	for _, w := range ws {
		s := w.String()
		seen[s] = true
		if d.warned[s] {
			d.log.Debug("config (warned before): " + s)
		} else {
			d.log.Warn("config: " + s)
		}
	}
	d.warned = seen
}

// hideTokenEnvs adds the environment variables cfg reads tokens from to
// those stdio upstreams do not inherit: an upstream (often a third-party
// package) must not be handed the admin token or another session's.
func (d *Daemon) hideTokenEnvs(cfg *config.Config) {
	d.hideMu.Lock()
	defer d.hideMu.Unlock()
	for _, n := range cfg.TokenEnvs() {
		if !slices.Contains(d.hideEnv, n) {
			d.hideEnv = append(d.hideEnv, n)
		}
	}
}

// hiddenEnv returns the variables hideTokenEnvs collected.
func (d *Daemon) hiddenEnv() []string {
	d.hideMu.Lock()
	defer d.hideMu.Unlock()
	return slices.Clone(d.hideEnv)
}
