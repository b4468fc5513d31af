package main

import (
	"context"
	"fmt"

	"github.com/wasmhost/wasmhost/internal/wasmpack"
)

// runPack implements `wasmhost pack [--gap N] [-o OUT] FILE`: it joins the
// data segments of a plugin built with Go (wasmpack.Pack) so that every
// load, warm cache or not, decodes and copies a few segments instead of
// tens of thousands, and writes the result over FILE (or to OUT). The
// module's behaviour is unchanged, and the output depends only on the
// input, so a byte-reproducible build stays so. A failed write leaves the
// file as it was (wasmpack.PackFile). It prints what it did.
func runPack(_ context.Context, args []string, s stdio) int {
	gap := wasmpack.DefaultGap
	var out string
	fs := newFlagSet("pack", "[--gap N] [-o OUT] FILE", s)
	fs.IntVar(&gap, "gap", gap, "the longest run of zero bytes written out to join two segments")
	fs.StringVar(&out, "o", "", "write the packed module to `OUT` instead of over FILE")
	in, status, ok := parseOneArg("pack", "file", fs, args, s)
	if !ok {
		return status
	}
	if gap < 0 {
		s.errorf("pack", "--gap %d: must not be negative", gap)
		return exitUsage
	}
	if out == "" {
		out = in
	}
	r, err := wasmpack.PackFile(in, out, gap)
	if err != nil {
		s.errorf("pack", "%v", err)
		return exitUsage
	}
	fmt.Fprintln(s.out, r)
	return exitOK
}
