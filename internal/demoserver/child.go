package demoserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// ChildEnv is the environment variable that makes RunIfChild serve the
// demo server. A test binary that calls RunIfChild at the start of its
// TestMain can start itself as a real stdio upstream: exec.Command with
// os.Args[0] and ChildEnv=1 in the environment (or a config server entry
// {"command": os.Args[0], "env": {"WASMHOST_DEMO_SERVER": "1"}}).
const ChildEnv = "WASMHOST_DEMO_SERVER"

// RunIfChild calls Main, which never returns, when the environment variable
// ChildEnv is "1"; otherwise it returns at once.
func RunIfChild() {
	if os.Getenv(ChildEnv) == "1" {
		Main()
	}
}

// Main serves the demo server over stdin/stdout until the client
// disconnects or the process gets SIGINT or SIGTERM, then exits the
// process: status 0 after a normal end, 1 (with the error on stderr)
// otherwise.
func Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := ServeStdio(ctx)
	stop()
	os.Exit(exitCode(err))
}

// exitCode maps the end of ServeStdio to a process status, reporting
// failures on stderr. A closed stdin or a signal is a normal end.
func exitCode(err error) int {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return 0
	}
	fmt.Fprintln(os.Stderr, "demoserver:", err)
	return 1
}
