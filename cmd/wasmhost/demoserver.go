package main

import (
	"context"
	"io"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/daemon"
	"github.com/wasmhost/wasmhost/internal/demoserver"
)

// runDemoServer is `wasmhost demo-server`: the demo upstream MCP server
// (package internal/demoserver) over standard input and output, so that an
// example config can use this binary as its upstream and needs nothing
// installed.
func runDemoServer(ctx context.Context, args []string, s stdio) int {
	fs := newFlagSet("demo-server", "", s)
	rest, err := parseArgs(fs, args)
	if err != nil {
		return parseStatus(err)
	}
	if len(rest) > 0 {
		return s.usageError(fs, "demo-server", "unexpected argument %q", rest[0])
	}
	t := &mcp.IOTransport{Reader: io.NopCloser(s.in), Writer: nopWriteCloser{s.out}}
	if err := demoserver.New().MCP().Run(ctx, t); !daemon.ServedToEnd(err) {
		s.errorf("demo-server", "%v", err)
		return exitFail
	}
	return exitOK
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
