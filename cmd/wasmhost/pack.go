package main

import (
	"context"
	"fmt"
	"os"

	"github.com/wasmhost/wasmhost/internal/wasmpack"
)

// runPack implements `wasmhost pack [--gap N] [-o OUT] FILE`: it joins the
// data segments of a plugin built with Go (wasmpack.Pack) so that every
// load, warm cache or not, decodes and copies a few segments instead of
// tens of thousands, and writes the result over FILE (or to OUT). The
// module's behaviour is unchanged, and the output depends only on the
// input, so a byte-reproducible build stays so. It prints what it did.
func runPack(_ context.Context, args []string, s stdio) int {
	gap := wasmpack.DefaultGap
	var out string
	fs := newFlagSet("pack", "[--gap N] [-o OUT] FILE", s)
	fs.IntVar(&gap, "gap", gap, "the longest run of zero bytes written out to join two segments")
	fs.StringVar(&out, "o", "", "write the packed module to `OUT` instead of over FILE")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return parseStatus(err)
	}
	if len(pos) != 1 {
		s.errorf("pack", "one file argument expected, got %d", len(pos))
		return exitUsage
	}
	if gap < 0 {
		s.errorf("pack", "--gap %d: must not be negative", gap)
		return exitUsage
	}
	in := pos[0]
	if out == "" {
		out = in
	}
	wasm, err := os.ReadFile(in)
	if err != nil {
		s.errorf("pack", "%v", err)
		return exitUsage
	}
	packed, st, err := wasmpack.Pack(wasm, gap)
	if err != nil {
		s.errorf("pack", "%s: %v", in, err)
		return exitUsage
	}
	if err := os.WriteFile(out, packed, 0o644); err != nil {
		s.errorf("pack", "%v", err)
		return exitUsage
	}
	fmt.Fprintf(s.out, "%s: %d data segments -> %d (%d zero bytes written), %d -> %d bytes\n",
		out, st.SegmentsBefore, st.SegmentsAfter, st.ZerosWritten, len(wasm), len(packed))
	return exitOK
}
