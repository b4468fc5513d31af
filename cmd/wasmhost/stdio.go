package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/daemon"
	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/internal/backoff"
	"github.com/wasmhost/wasmhost/internal/procgroup"
	"github.com/wasmhost/wasmhost/internal/redact"
	"github.com/wasmhost/wasmhost/internal/stderrlog"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/session"
)

// Backoff bounds for reconnecting a lost upstream in stdio mode.
const (
	stdioRetryMin = time.Second
	stdioRetryMax = 30 * time.Second
	// stdioBackoffMemory is how long a server must stay up after a retry
	// brought it back before its backoff starts from stdioRetryMin again
	// (the daemon's backoffMemory).
	stdioBackoffMemory = time.Minute
)

// runStdio is `wasmhost stdio`: one session served over standard input and
// output with no pool (the legacy single-session mode), so a desktop client
// can launch wasmhost as a plain stdio MCP server. Standard output carries
// only the MCP stream; logs go to standard error.
func runStdio(ctx context.Context, args []string, s stdio) int {
	fs := newFlagSet("stdio", "--config FILE --session NAME", s)
	var (
		configPath  = fs.String("config", "", "config `FILE` (required)")
		sessionName = fs.String("session", "", "the session `NAME` to serve (required)")
		cacheDir    = fs.String("cache-dir", host.DefaultCacheDir(), "compilation cache `DIR` for the policy plugin (empty: none)")
		logLevel    = fs.String("log-level", "warn", "log `LEVEL` (to standard error): debug, info, warn or error")
	)
	rest, err := parseArgs(fs, args)
	if err != nil {
		return parseStatus(err)
	}
	switch {
	case *configPath == "":
		return s.usageError(fs, "stdio", "--config is required")
	case *sessionName == "":
		return s.usageError(fs, "stdio", "--session is required")
	case len(rest) > 0:
		return s.usageError(fs, "stdio", "unexpected argument %q", rest[0])
	}
	level, err := parseLevel(*logLevel)
	if err != nil {
		s.errorf("stdio", "--log-level: %v", err)
		return exitUsage
	}
	secrets := &redact.Set{}
	log := slog.New(secrets.Handler(slog.NewTextHandler(s.err, &slog.HandlerOptions{Level: level})))

	// The policy block first: the plugin it names declares the settings
	// keys the rest of the file may hold (abi/SPEC.md section 3).
	data, err := os.ReadFile(*configPath)
	if err != nil {
		s.errorf("stdio", "config: %v", err)
		return exitUsage
	}
	pol, err := config.PeekPolicy(*configPath, data)
	if err != nil {
		s.errorf("stdio", "%v", err)
		return exitUsage
	}
	opts := host.Options{
		MemoryLimitBytes: pol.MemoryLimitBytes(),
		CallTimeout:      pol.Timeout,
		CompileTimeout:   pol.CompileTimeout,
		PinSHA256:        pol.SHA256,
		CacheDir:         *cacheDir,
		Logger:           log.With("component", "plugin"),
		Config:           string(pol.Config),
	}
	var plugin *host.Plugin
	if pol.Path == "" {
		plugin, err = loadDefault(ctx, opts)
	} else {
		plugin, err = host.LoadFile(ctx, pol.Path, opts)
	}
	if err != nil {
		s.errorf("stdio", "%v", daemon.PolicyError(*configPath, pol, err))
		cacheDirHint(s, "stdio", err)
		return exitUsage
	}
	defer plugin.Close(context.Background())

	hs := plugin.Handshake()
	cfg, warnings, err := config.ParseWith(*configPath, data, config.Options{
		ServerKeys: hs.SettingsKeys, ServerKeysOwner: fmt.Sprintf("policy plugin %q", hs.Name)})
	if err != nil {
		s.errorf("stdio", "%v", err)
		return exitUsage
	}
	secrets.AddConfig(cfg)
	if cfg.Sessions[*sessionName] == nil {
		s.errorf("stdio", "%s: no session named %q (sessions: %v)", *configPath, *sessionName, cfg.SessionNames())
		return exitUsage
	}
	for _, w := range warnings {
		if w.Session == "" || w.Session == *sessionName {
			log.Warn("config: " + w.String())
		}
	}
	// A command that cannot start is retried with backoff, as by the
	// daemon; its warning is located like the config's own, as the
	// connection's error names neither the file nor the setting.
	for _, name := range cfg.ServerNames() {
		if _, enabled := cfg.Sessions[*sessionName].EffectiveSettings(name); !enabled {
			continue
		}
		if err := pool.FromConfig(cfg.Servers[name]).CheckCommand(); err != nil {
			log.Warn(fmt.Sprintf("config: %s: %s: server %q cannot start; retried with backoff: %v", *configPath, config.JoinPath("mcpServers", name, pool.CommandField(err)), name, err))
		}
	}

	// A signal (SIGTERM or SIGHUP here, or the interrupt that ends ctx)
	// starts the drain; serving goes on, under its own context, until the
	// calls under way have their answers written. A second signal ends the
	// process. stdio mode has no reload, so SIGHUP (its terminal or client
	// hung up, or an operator used to the daemon's reload) stops it too:
	// left to its default action it would end the process at once, leaving
	// the upstreams' process groups behind.
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	context.AfterFunc(ctx, stop)

	relay := session.NewProgressRelay()
	var leg *reconcile.Legacy
	naming, instructed := daemon.SessionNaming(cfg, *sessionName)
	ep := session.New(session.Options{
		Naming:         naming,
		Name:           *sessionName,
		Progress:       relay,
		Implementation: &mcp.Implementation{Name: "wasmhost", Title: "wasmhost session " + *sessionName, Version: daemon.Version},
		Logger:         log.With("component", "session"),
		Redact:         secrets.Error,
		Upstream: func(server string) session.Target {
			cs, timeout, subs := leg.Upstream(server)
			return session.Target{Session: cs, Timeout: timeout, Subscriptions: subs}
		},
	})
	ep.SetInstructions(instructed)
	leg = reconcile.NewLegacy(reconcile.LegacyOptions{
		Client:     &mcp.Implementation{Name: "wasmhost", Version: daemon.Version},
		Dialer:     stdioDialer(relay, s.err, cfg.TokenEnvs()),
		OnProgress: relay.Handle,
		Policy:     plugin,
		Registry:   ep,
		Logger:     log.With("component", "reconcile"),
	})
	sum, err := leg.Apply(ctx, cfg, *sessionName)
	log.Info("started: " + sum.String())
	if err != nil {
		log.Warn("some bindings failed: servers that could not start are retried with backoff; views whose settings the policy refused or failed on stay closed", "err", err)
	}

	bg, stopBG := context.WithCancel(ctx)
	supervised := make(chan struct{})
	go func() {
		defer close(supervised)
		superviseLegacy(bg, leg, log)
	}()

	// The go-sdk's own connection serves the client, unwrapped (it passes
	// that connection the session's protocol version through an unexported
	// method); the drain follows the bytes beneath it instead.
	answers := newAnswerLedger()
	transport := &mcp.IOTransport{Reader: io.NopCloser(answers.Reader(s.in)), Writer: nopWriteCloser{answers.Writer(s.out)}}
	served := make(chan error, 1)
	go func() { served <- ep.Server().Run(serveCtx, transport) }()
	select {
	case err = <-served: // the client closed the stream
	case <-ctx.Done():
		log.Info("stopping: answering the calls under way", "grace", stdioDrainGrace)
		drainStdio(ep, answers, log)
		stopServing()
		select {
		case err = <-served:
		case <-time.After(stdioStopGrace):
			// Closing waits for a write the client does not read.
			log.Warn("shutdown: the client is not reading standard output; stopping anyway")
			err = nil
		}
	}
	stopBG()
	<-supervised
	cctx, cancel := context.WithTimeout(context.Background(), procgroup.MaxClose)
	defer cancel()
	if cerr := leg.Close(cctx); cerr != nil {
		log.Warn("closing upstream connections", "err", cerr)
	}
	if !servedToEnd(err) {
		s.errorf("stdio", "%v", err)
		return exitFail
	}
	return exitOK
}

// Bounds of stdio mode's stop at a signal, the daemon's (session.DrainGrace
// for the calls under way; stdioStopGrace for each later step: the
// answers' writes, the end of serving).
var stdioDrainGrace = session.DrainGrace // a variable for tests

const stdioStopGrace = session.AnswerGrace

// drainStdio makes ep refuse new calls and waits, at most stdioDrainGrace,
// for the calls under way to return; Drain cuts those still running then
// short, which answers them too. Last it waits, at most stdioStopGrace,
// until every call read has its answer written, so that serving stops only
// then.
func drainStdio(ep *session.Endpoint, answers *answerLedger, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), stdioDrainGrace)
	defer cancel()
	if err := ep.Drain(ctx); err != nil {
		log.Warn("shutdown: calls cut short", "err", err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), stdioStopGrace)
	defer wcancel()
	if err := answers.wait(wctx); err != nil {
		log.Warn("shutdown: answers cut short", "err", err)
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// servedToEnd reports whether err, what serving MCP over standard input and
// output returned, is a normal end: the client closed either stream or ctx
// ended.
func servedToEnd(err error) bool {
	return err == nil || errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed) ||
		errors.Is(err, io.ErrClosedPipe) // the client stopped reading: gone too
}

// stdioDialer is pool.HidingDialer(hide) for stdio mode: each stdio upstream's
// standard error goes to w (never to standard output, which is the MCP
// stream), bounded as the daemon bounds it (stderrlog), it runs in a process group of its own that its close ends
// (procgroup), and relay sees its progress notifications.
func stdioDialer(relay *session.ProgressRelay, w io.Writer, hide []string) pool.Dialer {
	base := pool.HidingDialer(func() []string { return hide })
	budgets := &stderrlog.Budgets{}
	return func(ctx context.Context, spec pool.Spec) (mcp.Transport, error) {
		t, err := base(ctx, spec)
		if err != nil {
			return nil, err
		}
		ct, ok := t.(*mcp.CommandTransport)
		if !ok {
			return relay.WrapTransport(t), nil
		}
		if ct.Command.Stderr == nil {
			emit := func(text string) { fmt.Fprintln(w, text) }
			ct.Command.Stderr = stderrlog.NewShared(emit, stderrlog.Options{}, budgets.Of(spec.Name, emit))
			ct.Command.WaitDelay = 2 * time.Second
		}
		return procgroup.Transport(relay.WrapTransport(ct), ct), nil
	}
}

// superviseLegacy reconnects servers whose connection failed or was lost,
// or whose view failed closed (a policy failure: stdio mode has no reload
// to repair it), with exponential backoff, until ctx ends. As in the
// daemon's supervisor, a server a retry brought back must stay up for
// stdioBackoffMemory before its backoff starts over, so one that crashes
// soon after each reconnect is retried less and less often. Standard error
// (warn, stdio mode's default level) says when a server goes down and when
// it is back.
func superviseLegacy(ctx context.Context, leg *reconcile.Legacy, log *slog.Logger) {
	retries := backoff.Schedule[string]{Min: stdioRetryMin, Max: stdioRetryMax, Memory: stdioBackoffMemory}
	t := time.NewTicker(stdioRetryMin / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		down := make(map[string]bool)
		for _, ss := range leg.State().Sessions {
			for _, b := range ss.Servers {
				if b.EntryState == "ready" && b.Error == "" {
					continue
				}
				down[b.Server] = true
				if scheduled, delay := retries.Down(b.Server, now); scheduled {
					log.Warn("upstream down; retrying with backoff", "server", b.Server, "in", delay, "err", b.Error)
					continue
				}
				if !retries.Due(b.Server, now) {
					continue
				}
				if err := leg.Repair(ctx, b.Server); err != nil {
					if ctx.Err() != nil {
						return // stopping: not a failure to report
					}
					log.Warn("upstream retry failed", "server", b.Server, "next in", retries.Failed(b.Server), "err", err)
					continue
				}
				// Warn, as its going down was: the default level shows both.
				log.Warn("upstream reconnected", "server", b.Server)
				retries.Recovered(b.Server)
			}
		}
		retries.Sweep(now, func(server string) bool { return down[server] })
	}
}
