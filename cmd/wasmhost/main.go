// Command wasmhost is the wasmhost command line:
//
//	wasmhost run --config FILE              the daemon (or: run -- CMD ARGS..., run --url URL)
//	wasmhost stdio --config FILE --session S   one session over stdio
//	wasmhost check --config FILE            validate a config without serving
//	wasmhost key | project | conformance | version    run a policy plugin
//	wasmhost digest | inspect | pack | new-plugin     work on plugin files
//	wasmhost demo-server                    the demo MCP server over stdio
//
// `wasmhost help COMMAND` lists a command's flags. Flags may come before or
// after the arguments; "--" ends them. The policy commands take --plugin
// FILE (default: the embedded default policy), --pin, --memory-mib,
// --timeout and --cache-dir.
//
// Exit status: 0 on success; 1 when the command ran but its answer is
// negative (a failing golden case, refused settings, a plugin the host
// would not accept); 2 on a usage error, a plugin that cannot be loaded, or
// input that cannot be read. The package parses flags and prints; the work
// is done by daemon, host, conformance and the packages they use.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"

	"github.com/wasmhost/wasmhost/internal/procgroup"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

func main() {
	// Run as the supervisor of a stdio upstream when started as one.
	procgroup.Main()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	// The first interrupt starts an orderly stop; a second one ends the
	// process at once, as it would without wasmhost's handler.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// A command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdio stdio) int
}

// stdio carries the streams a command uses, so tests run commands in
// process.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

func (s stdio) errorf(cmd, format string, args ...any) {
	fmt.Fprintf(s.err, "wasmhost %s: %s\n", cmd, fmt.Sprintf(format, args...))
}

// usageError reports a misused command, prints its usage and returns
// exitUsage.
func (s stdio) usageError(fs *flag.FlagSet, cmd, format string, args ...any) int {
	s.errorf(cmd, format, args...)
	fs.Usage()
	return exitUsage
}

var commands []command

func init() {
	commands = []command{
		{"key", "print the canonical form and metadata key of settings", runKey},
		{"project", "print what a session with the given settings sees of a snapshot", runProject},
		{"conformance", "run golden suites against a policy plugin", runConformance},
		{"version", "print the wasmhost, ABI and policy plugin versions", runVersion},
		{"digest", "print the SHA-256 of a plugin file, as a config pins it", runDigest},
		{"inspect", "print a plugin's handshake, exports and imports, and whether the host accepts it", runInspect},
		{"pack", "join a plugin's data segments so that it loads faster (Go plugins carry thousands)", runPack},
		{"new-plugin", "create a policy plugin project (Go, a copy of the default policy, or AssemblyScript) that passes its own golden suite with make test", runNewPlugin},
		{"run", "run the daemon: serve each session of a config (or one server: -- CMD ARGS...) over streamable HTTP", runRun},
		{"check", "validate a config as the daemon would load it, without serving (for CI and editors)", runCheck},
		{"stdio", "serve one session of a config over standard input and output (the daemon without HTTP)", runStdio},
		{"demo-server", "serve the built-in demo MCP server over standard input and output", runDemoServer},
	}
}

// run is the whole command line; main only adds the process around it.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	s := stdio{in: stdin, out: stdout, err: stderr}
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[0] == "help" && !slices.Contains([]string{"help", "-h", "-help", "--help"}, args[1]) {
			args = []string{args[1], "-h"} // help COMMAND: its flags
			break
		}
		usage(stdout)
		return exitOK
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(ctx, args[1:], s)
		}
	}
	fmt.Fprintf(stderr, "wasmhost: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: wasmhost COMMAND [FLAGS] [ARGS]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'wasmhost COMMAND -h' or 'wasmhost help COMMAND' for a command's flags.")
}
