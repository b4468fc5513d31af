package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/daemon"
)

// version is wasmhost's version; release builds set it with
// -ldflags "-X main.version=v1.2.3". Otherwise the module version from the
// build information is used, or "devel".
var version = ""

// MCP clients and upstreams are told the version `wasmhost version` prints.
func init() { daemon.Version = wasmhostVersion() }

func wasmhostVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// runVersion implements `wasmhost version`. It prints
//
//	wasmhost VERSION (GO VERSION)
//	abi: v1
//	plugin: SOURCE
//	plugin handshake: NAME VERSION (abi N)
//	plugin sha256: HEX
//
// where the plugin is the embedded default unless --plugin names another.
func runVersion(ctx context.Context, args []string, s stdio) int {
	var pf pluginFlags
	fs := newFlagSet("version", "[flags]", s)
	pf.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return parseStatus(err)
	}
	if len(pos) > 0 {
		s.errorf("version", "unexpected argument %q", pos[0])
		return exitUsage
	}
	fmt.Fprintf(s.out, "wasmhost %s (%s)\nabi: v%d\n", wasmhostVersion(), runtime.Version(), abi.Version)
	p, err := pf.load(ctx, s.err)
	if err != nil {
		s.errorf("version", "load plugin: %v", err)
		return exitUsage
	}
	defer p.Close(context.WithoutCancel(ctx))
	h := p.Handshake()
	fmt.Fprintf(s.out, "plugin: %s\nplugin handshake: %s %s (abi %d)\nplugin sha256: %s\n",
		p.Name(), h.Name, h.Version, h.ABI, p.Digest())
	return exitOK
}
