package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/wasmhost/wasmhost/daemon"
	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/internal/telemetry"
)

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// parseLevel parses a --log-level value.
func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}

// runRun is `wasmhost run`: the daemon, on a config file or, with `--
// CMD ARGS...` or --url, on one server in one session.
func runRun(ctx context.Context, args []string, s stdio) int {
	fs := newFlagSet("run", "--config FILE [--listen ADDR] [--allow-remote] [--allow-host HOST]... [--print-tokens]\n   or: wasmhost run [--listen ADDR] [--name NAME] -- CMD ARGS...\n   or: wasmhost run [--listen ADDR] [--name NAME] --url URL", s)
	var (
		configPath  = fs.String("config", "", "config `FILE` (required unless a command or --url is given)")
		listen      = fs.String("listen", "", "listen `ADDR` (host:port), replacing the config's \"listen\"")
		allowRemote = fs.Bool("allow-remote", false, "allow listening on a non-loopback address")
		printTokens = fs.Bool("print-tokens", false, "print the session tokens written inline in the config (demo only)")
		cacheDir    = fs.String("cache-dir", host.DefaultCacheDir(), "compilation cache `DIR` for the policy plugin (empty: none)")
		logLevel    = fs.String("log-level", "info", "log `LEVEL`: debug, info, warn or error")
		debounce    = fs.Duration("debounce", daemon.DefaultDebounce, "how long file-watch and SIGHUP reloads wait for more changes")
		maxClients  = fs.Int("max-clients", daemon.DefaultMaxClients, "hold at most `N` MCP client sessions per session at once; more are answered 503 (0: the default; negative: no limit)")
		drain       = fs.Duration("drain-timeout", daemon.DefaultDrainTimeout, "on SIGTERM, turn /readyz to 503, refuse new MCP requests and give the calls under way this long to finish")
		perRequest  = fs.Bool("per-request-protocol", false, "serve MCP protocol 2026-07-28 requests over HTTP without a client session, so that any replica answers them (off: clients fall back to 2025-11-25 sessions)")
		replica     = fs.String("replica", defaultReplica(), "`NAME` of this replica in the metrics (wasmhost_build_info) and traces (service.instance.id); default $POD_NAME, else the host name")
		maxConns    = fs.Int("max-conns", daemon.DefaultMaxConns, "hold at most `N` HTTP connections open at once; more are answered 503 and closed (0: the default; negative: no limit)")
		maxConnsIP  = fs.Int("max-conns-per-ip", daemon.DefaultMaxConnsPerIP, "hold at most `N` HTTP connections from one client IP address (IPv6: one /64) at once; more are answered 503 and closed (0: the default; negative: no limit). Behind a reverse proxy every client has the proxy's address")
		idle        = fs.Duration("idle-timeout", daemon.DefaultIdleTimeout, "close a kept-alive HTTP connection idle between requests this long (an event stream or a call under way is not idle)")
		headerTime  = fs.Duration("read-header-timeout", daemon.DefaultReadHeaderTimeout, "close an HTTP connection whose request headers take longer than this")
		otlp        = fs.String("otlp-endpoint", "", "export traces over OTLP/HTTP to the collector at `URL` (as OTEL_EXPORTER_OTLP_ENDPOINT, e.g. http://127.0.0.1:4318; default: that variable, or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; neither: no traces)")
		allowHosts  stringList
	)
	fs.Var(&allowHosts, "allow-host", "also accept `HOST` in Host and Origin headers (repeatable; for remote clients)")
	idleTimeout := fs.Duration("client-idle-timeout", daemon.DefaultClientIdleTimeout, "close an MCP client session that sent no request for this long (0: never)")
	serverURL, serverName := fs.String("url", "", "serve the MCP server at `URL` (streamable HTTP or SSE) alone, without a config file"), fs.String("name", "", "the server's `NAME` with a command or --url (default: from the command or URL)")
	rest, err := parseArgs(fs, args)
	if err != nil {
		return parseStatus(err)
	}
	quick := len(rest) > 0 || *serverURL != ""
	switch {
	case len(rest) > 0 && *configPath != "":
		return s.usageError(fs, "run", "unexpected argument %q (--config and a command exclude each other: add the server to the config file)", rest[0])
	case *serverURL != "" && *configPath != "":
		return s.usageError(fs, "run", "--config and --url exclude each other: add the server to the config file")
	case len(rest) > 0 && *serverURL != "":
		return s.usageError(fs, "run", "a command and --url exclude each other")
	case !quick && *configPath == "":
		return s.usageError(fs, "run", "--config is required, or a server to serve: -- CMD ARGS... or --url URL")
	case !quick && *serverName != "":
		return s.usageError(fs, "run", "--name is for a command or --url")
	}
	var configData []byte
	var token string
	if quick {
		if token, err = newToken(); err != nil {
			s.errorf("run", "%v", err)
			return exitFail
		}
		if *listen == "" {
			*listen = quickListen()
		}
		if configData, err = quickConfig(rest, *serverURL, *serverName, *listen, token); err != nil {
			s.errorf("run", "%v", err)
			return exitFail
		}
		*configPath = quickConfigName
	}
	level, err := parseLevel(*logLevel)
	if err != nil {
		s.errorf("run", "--log-level: %v", err)
		return exitUsage
	}
	if *drain <= 0 {
		s.errorf("run", "--drain-timeout %v: must be more than 0 (default %v)", *drain, daemon.DefaultDrainTimeout)
		return exitUsage
	}
	if *idleTimeout < 0 {
		s.errorf("run", "--client-idle-timeout %v: must be 0 (never) or more", *idleTimeout)
		return exitUsage
	}
	if *debounce <= 0 {
		// daemon.Options would take it for the default without a word.
		s.errorf("run", "--debounce %v: must be more than 0 (default %v)", *debounce, daemon.DefaultDebounce)
		return exitUsage
	}
	for _, f := range []struct {
		name   string
		v, def time.Duration
	}{{"idle-timeout", *idle, daemon.DefaultIdleTimeout}, {"read-header-timeout", *headerTime, daemon.DefaultReadHeaderTimeout}} {
		if f.v <= 0 {
			// daemon.Options would take it for the default without a word.
			s.errorf("run", "--%s %v: must be more than 0 (default %v)", f.name, f.v, f.def)
			return exitUsage
		}
	}
	log := slog.New(slog.NewTextHandler(s.err, &slog.HandlerOptions{Level: level}))
	stopTraces, err := telemetry.Start(ctx, telemetry.Config{Endpoint: *otlp, Version: daemon.Version, Instance: *replica})
	if err != nil {
		s.errorf("run", "--otlp-endpoint: %v", err)
		return exitUsage
	}
	defer func() {
		if err := telemetry.StopWithin(stopTraces); err != nil {
			log.Warn("traces: the last spans were not exported", "err", err)
		}
	}()
	if telemetry.Enabled() {
		to := "the OTEL_EXPORTER_OTLP_* environment"
		if u, err := url.Parse(*otlp); *otlp != "" && err == nil {
			to = u.Redacted()
		}
		log.Info("traces: exporting over OTLP/HTTP", "to", to, "replica", *replica)
	}

	d, err := daemon.New(daemon.Options{
		ConfigPath:        *configPath,
		Logger:            log,
		Listen:            *listen,
		AllowRemote:       *allowRemote,
		AllowedHosts:      allowHosts,
		CacheDir:          *cacheDir,
		Debounce:          *debounce,
		MaxClients:        *maxClients,
		DrainTimeout:      *drain,
		Replica:           *replica,
		PerRequestHTTP:    *perRequest,
		MaxConns:          *maxConns,
		MaxConnsPerIP:     *maxConnsIP,
		IdleTimeout:       *idle,
		ReadHeaderTimeout: *headerTime,
		ConfigData:        configData,
		// Options take 0 for the default and a negative value for never.
		ClientIdleTimeout: cmp.Or(*idleTimeout, -1),
	})
	if err != nil {
		s.errorf("run", "%v", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop) // a second SIGTERM ends the process at once
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case err := <-done:
		if err == nil {
			return exitOK
		}
		s.errorf("run", "%v", err)
		cacheDirHint(s, "run", err)
		if errors.Is(err, syscall.EADDRINUSE) {
			s.errorf("run", "another process (a wasmhost already running?) listens there: stop it, or listen elsewhere with --listen 127.0.0.1:PORT")
		}
		return startStatus(err)
	case <-d.Ready():
	}
	if quick {
		printQuick(s, d, token)
	} else {
		printSessions(s, d, *printTokens)
	}
	if err := <-done; err != nil {
		s.errorf("run", "%v", err)
		return exitFail
	}
	return exitOK
}

// defaultReplica is the default of --replica: $POD_NAME (set from the
// pod's name by the Kubernetes manifests), else the host name.
func defaultReplica() string {
	if n := os.Getenv("POD_NAME"); n != "" {
		return n
	}
	n, _ := os.Hostname()
	return n
}

// startStatus is the exit status for err, the daemon refusing to start:
// exitUsage for input that cannot be read or is refused (the config file,
// the policy plugin, the listen address), as `wasmhost stdio` does;
// exitFail for anything else.
func startStatus(err error) int {
	for _, input := range []error{daemon.ErrConfigInvalid, daemon.ErrPolicyRefused, daemon.ErrBadListen, daemon.ErrNotLoopback} {
		if errors.Is(err, input) {
			return exitUsage
		}
	}
	return exitFail
}

// cacheDirHint tells how to choose another compilation cache when err is
// one that cannot be used (the default directory may be read-only where
// the daemon runs).
func cacheDirHint(s stdio, cmd string, err error) {
	if errors.Is(err, host.ErrCacheDir) {
		s.errorf(cmd, "choose another compilation cache directory with --cache-dir DIR, or none with --cache-dir=")
	}
}

// printSessions prints each session's URL (and, with printTokens, the
// tokens written inline in the config) to stdout.
func printSessions(s stdio, d *daemon.Daemon, printTokens bool) {
	fmt.Fprintf(s.out, "wasmhost listening on %s\n", d.URL())
	for _, info := range d.Sessions() {
		tok := "token from " + info.TokenSource
		switch {
		case printTokens && info.InlineToken != "":
			tok = "token " + info.InlineToken
		case info.InlineToken != "":
			tok = "token inline in the config; --print-tokens shows it"
		}
		fmt.Fprintf(s.out, "  session %-12s %s   (%s)\n", info.Name, info.URL, tok)
	}
	if d.AdminEnabled() {
		fmt.Fprintf(s.out, "  admin            %s/v1/state   /metrics   /healthz\n", d.URL())
	} else {
		fmt.Fprintf(s.out, "  health           %s/healthz   (admin API disabled: the config has no \"admin\" block)\n", d.URL())
	}
	fmt.Fprintf(s.out, "Connect an MCP client with the header \"Authorization: Bearer <token>\". Ctrl-C stops.\n")
}
