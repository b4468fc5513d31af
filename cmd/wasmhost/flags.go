package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/host"
)

// pluginFlags are the flags every command that runs a policy takes.
type pluginFlags struct {
	plugin    string
	pin       string
	memoryMiB uint64
	timeout   time.Duration
	compile   time.Duration
	cacheDir  string
	logLevel  slog.Level
	config    string
}

func (pf *pluginFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&pf.plugin, "plugin", "", "policy plugin `FILE` (.wasm); default: the embedded default policy")
	fs.Uint64Var(&pf.memoryMiB, "memory-mib", 0, "memory cap per plugin instance in `MiB` (0: the host default)")
	fs.DurationVar(&pf.timeout, "timeout", 0, "time limit per plugin call, e.g. 500ms (0: the host default)")
	fs.DurationVar(&pf.compile, "compile-timeout", 0, "time limit for compiling the plugin at load, e.g. 30s (0: the host default, "+host.DefaultCompileTimeout.String()+")")
	fs.StringVar(&pf.pin, "pin", "", "refuse the plugin unless its SHA-256 is this hex `DIGEST`")
	registerCacheDir(fs, &pf.cacheDir)
	fs.StringVar(&pf.config, "plugin-config", "", "the plugin's own configuration, a `JSON` value or @FILE, as policy.config in a config file: the input of its handshake")
	fs.TextVar(&pf.logLevel, "log-level", slog.LevelWarn, "log `LEVEL` (to standard error): debug, info, warn or error; debug shows what the plugin writes to standard output and error")
}

// registerCacheDir registers --cache-dir, the compilation cache every
// command that loads a plugin takes, into dir.
func registerCacheDir(fs *flag.FlagSet, dir *string) {
	fs.StringVar(dir, "cache-dir", host.DefaultCacheDir(), "compilation cache `DIR`, so a later run does not recompile the plugin (empty: none)")
}

func (pf *pluginFlags) options(stderr io.Writer) host.Options {
	return host.Options{
		MemoryLimitBytes: min(pf.memoryMiB, 1<<40) << 20, // the host refuses more than 4 GiB; never wrap
		CallTimeout:      pf.timeout,
		CompileTimeout:   pf.compile,
		PinSHA256:        pf.pin,
		CacheDir:         pf.cacheDir,
		Config:           pf.config,
		Logger:           slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: pf.logLevel})),
	}
}

// load loads the plugin the flags name, or the embedded default.
func (pf *pluginFlags) load(ctx context.Context, stderr io.Writer) (*host.Plugin, error) {
	return pf.loadWith(ctx, pf.options(stderr))
}

// maxTimeout bounds --timeout, as config.MaxPolicyTimeoutMs bounds a
// config's policy.timeoutMs.
const maxTimeout = config.MaxPolicyTimeoutMs * time.Millisecond

// loadWith loads the plugin the flags name with opts.
func (pf *pluginFlags) loadWith(ctx context.Context, opts host.Options) (*host.Plugin, error) {
	if pf.timeout < 0 || (pf.timeout > 0 && pf.timeout < time.Millisecond) || pf.timeout > maxTimeout {
		return nil, fmt.Errorf("--timeout %v: must be from 1ms to %v (0: the host default)", pf.timeout, maxTimeout)
	}
	if pf.compile < 0 || pf.compile > config.MaxPolicyCompileTimeoutMs*time.Millisecond {
		return nil, fmt.Errorf("--compile-timeout %v: must be from 0 (the host default) to %v", pf.compile, config.MaxPolicyCompileTimeoutMs*time.Millisecond)
	}
	if name, ok := strings.CutPrefix(opts.Config, "@"); ok {
		// No JSON value starts with '@': this names a file.
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("--plugin-config: %w", err)
		}
		opts.Config = string(b)
	}
	if pf.plugin == "" {
		return loadDefault(ctx, opts)
	}
	return host.LoadFile(ctx, pf.plugin, opts)
}

// newFlagSet returns a flag set for a command whose errors and -h output go
// to s.err.
func newFlagSet(name, synopsis string, s stdio) *flag.FlagSet {
	fs := flag.NewFlagSet("wasmhost "+name, flag.ContinueOnError)
	fs.SetOutput(s.err)
	fs.Usage = func() {
		fmt.Fprintf(s.err, "usage: %s\n", strings.TrimSpace("wasmhost "+name+" "+synopsis))
		flags := 0
		fs.VisitAll(func(*flag.Flag) { flags++ })
		if flags > 0 { // a command without flags gets no empty "flags:" section
			fmt.Fprint(s.err, "\nflags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseArgs parses flags wherever they appear among args (the standard flag
// package stops at the first argument) and returns the arguments. "--" ends
// the flags. The error is flag.ErrHelp for -h, or a usage error already
// printed to the flag set's output.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseStatus turns a parseArgs error into an exit status.
func parseStatus(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

// parseOneArg parses args with fs, which newFlagSet made for command cmd,
// and returns the one argument (a what: "file", "directory") they must
// hold. When ok is false it has reported why, and status is the exit
// status.
func parseOneArg(cmd, what string, fs *flag.FlagSet, args []string, s stdio) (arg string, status int, ok bool) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return "", parseStatus(err), false
	}
	if len(pos) != 1 {
		s.errorf(cmd, "one %s argument expected, got %d", what, len(pos))
		return "", exitUsage, false
	}
	return pos[0], exitOK, true
}

// readInput reads a command-line value that may be given inline, as @FILE,
// or as "-" for standard input.
func readInput(arg string, stdin io.Reader) ([]byte, error) {
	switch {
	case arg == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("read standard input: %w", err)
		}
		return b, nil
	case strings.HasPrefix(arg, "@"):
		b, err := os.ReadFile(arg[1:])
		if err != nil {
			return nil, err
		}
		return b, nil
	default:
		return []byte(arg), nil
	}
}

// loadDefault loads the default policy embedded in the binary.
func loadDefault(ctx context.Context, opts host.Options) (*host.Plugin, error) {
	return host.LoadEmbedded(ctx, policydefault.Name, policydefault.Wasm, policydefault.SHA256, opts)
}
