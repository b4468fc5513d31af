package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/wasmhost/wasmhost/daemon"
	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/session"
)

// runStdio is `wasmhost stdio`: the daemon serving one session of a config
// over standard input and output (daemon.Stdio), so that a desktop client
// can launch wasmhost as a plain stdio MCP server. Standard output carries
// only the MCP stream; logs, and the stdio upstreams' standard error, go
// to standard error. The config file is watched and reloaded as the
// daemon's is; SIGHUP stops it (see below).
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
	d, err := daemon.New(daemon.Options{
		ConfigPath:   *configPath,
		Logger:       slog.New(slog.NewTextHandler(s.err, &slog.HandlerOptions{Level: level})),
		CacheDir:     *cacheDir,
		DrainTimeout: stdioDrainGrace,
		// An upstream that ends by itself is withdrawn and retried by
		// the supervisor, with backoff, rather than restarted at once:
		// its client sees its tools go and come back.
		CrashRestarts: -1,
		Stdio:         &daemon.Stdio{Session: *sessionName, In: s.in, Out: s.out, Stderr: s.err},
	})
	if err != nil {
		s.errorf("stdio", "%v", err)
		return exitUsage
	}

	// A signal (SIGTERM or SIGHUP here, or the interrupt that ends ctx)
	// starts the drain; a second one ends the process. SIGHUP (its
	// terminal or client hung up, or an operator used to the daemon's
	// reload, which the file watch does here) stops it too: left to its
	// default action it would end the process at once, leaving the
	// upstreams' process groups behind.
	// A client that dies closes all three streams: the lines logged as
	// the stop goes on must fail (EPIPE), not end the process by SIGPIPE
	// before it has ended its upstreams. Notify, not Ignore: an ignored
	// signal would stay ignored in the upstreams it starts.
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	context.AfterFunc(ctx, stop)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case err = <-done:
		if err == nil {
			return exitOK
		}
		s.errorf("stdio", "%v", err)
		cacheDirHint(s, "stdio", err)
		return startStatus(err)
	case <-d.Ready():
	}
	if err := <-done; err != nil {
		s.errorf("stdio", "%v", err)
		return exitFail
	}
	return exitOK
}

// stdioDrainGrace is how long a stop gives the calls under way
// (daemon.Options.DrainTimeout); a variable for tests.
var stdioDrainGrace = session.DrainGrace
