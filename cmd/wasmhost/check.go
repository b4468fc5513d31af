package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/wasmhost/wasmhost/daemon"
	"github.com/wasmhost/wasmhost/host"
)

// checkHelp ends `wasmhost help check`.
const checkHelp = `
Check validates a config file as 'wasmhost run' does before it serves, and
as a reload does, without serving or starting any server: every key and
value (an unknown key is an error, with the key it likely misspells), the
listen address, the policy plugin (its pin, its load checks and the
daemon's trial calls) and the settings of every session's servers, which
the plugin must accept. It prints one line per problem, naming the file
and the JSON path:

  wasmhost.json: mcpServers.fs.includeTool: unknown key; did you mean "includeTools"?

then "FILE: ok" when there is none. Warnings (keys wasmhost ignores, a
server command not found here) are printed with "warning: " before them
and do not fail the check. Exit status: 0 when the config would load, 1
when it would be refused, 2 on a usage error. For CI and editors.
`

// runCheck is `wasmhost check`: it validates a config without serving.
func runCheck(ctx context.Context, args []string, s stdio) int {
	fs := newFlagSet("check", "--config FILE [--allow-remote] [--cache-dir DIR]", s)
	var (
		configPath  = fs.String("config", "", "config `FILE` (required)")
		allowRemote = fs.Bool("allow-remote", false, "accept a non-loopback listen address, as 'wasmhost run --allow-remote' does")
		cacheDir    = fs.String("cache-dir", host.DefaultCacheDir(), "compilation cache `DIR` for the policy plugin (empty: none)")
	)
	usage := fs.Usage
	fs.Usage = func() {
		usage()
		fmt.Fprint(s.err, checkHelp)
	}
	rest, err := parseArgs(fs, args)
	if err != nil {
		return parseStatus(err)
	}
	switch {
	case *configPath == "":
		return s.usageError(fs, "check", "--config is required")
	case len(rest) > 0:
		return s.usageError(fs, "check", "unexpected argument %q", rest[0])
	}
	d, err := daemon.New(daemon.Options{
		ConfigPath:  *configPath,
		Logger:      slog.New(slog.NewTextHandler(s.err, &slog.HandlerOptions{Level: slog.LevelWarn})),
		AllowRemote: *allowRemote,
		CacheDir:    *cacheDir,
	})
	if err != nil {
		s.errorf("check", "%v", err)
		return exitUsage
	}
	res, err := d.Check(ctx)
	if err != nil {
		s.errorf("check", "%v", err)
		return exitFail
	}
	for _, w := range res.Warnings {
		fmt.Fprintln(s.out, "warning: "+w)
	}
	for _, e := range res.Errors {
		fmt.Fprintln(s.out, e)
	}
	if !res.OK() {
		return exitFail
	}
	fmt.Fprintln(s.out, *configPath+": ok")
	return exitOK
}
