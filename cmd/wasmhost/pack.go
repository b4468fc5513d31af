package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

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
	if err := writeFileAtomic(out, packed); err != nil {
		s.errorf("pack", "%v", err)
		return exitUsage
	}
	fmt.Fprintf(s.out, "%s: %d data segments -> %d (%d zero bytes written), %d -> %d bytes\n",
		out, st.SegmentsBefore, st.SegmentsAfter, st.ZerosWritten, len(wasm), len(packed))
	return exitOK
}

// writeFileAtomic writes data to path through a temporary file in the same
// directory and a rename, so that a failed write leaves path as it was (pack
// usually writes over its input). An existing file keeps its permissions.
func writeFileAtomic(path string, data []byte) (err error) {
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
