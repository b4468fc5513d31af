package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/view"
)

// runDigest implements `wasmhost digest FILE`: it prints the file's SHA-256
// in lower-case hex, alone on its line, which is the value a config pins (and
// what --pin takes).
func runDigest(_ context.Context, args []string, s stdio) int {
	file, status, ok := parseOneArg("digest", "file", newFlagSet("digest", "FILE", s), args, s)
	if !ok {
		return status
	}
	b, err := os.ReadFile(file)
	if err != nil {
		s.errorf("digest", "%v", err)
		return exitUsage
	}
	sum := sha256.Sum256(b)
	fmt.Fprintln(s.out, hex.EncodeToString(sum[:]))
	return exitOK
}

// runInspect implements `wasmhost inspect FILE`: it runs the host's load
// checks on the file with default limits and the daemon's trial calls
// (view.CheckPolicy) on the plugin they load, and prints
//
//	file: FILE
//	sha256: HEX
//	size: N bytes
//	data segments: N [(wasmhost pack would leave M, for faster loads)]
//	metered: yes   or   metered: no (the host refuses it: see the error below)
//	handshake: NAME VERSION (abi N)[, wants W,...][, renames]   or   handshake: none
//	optional exports: NAME,...   or   optional exports: none
//	exports:
//	  KIND NAME [SIGNATURE]
//	imports:
//	  KIND "MODULE" "NAME" [SIGNATURE]
//	accepted: yes   or   accepted: no: REASON
//
// (without the data segments and metered lines for bytes that are not a
// WebAssembly module), or, with --json, the host's Inspection as JSON. It
// exits 0 when the host would accept the plugin, 1 when it would not, 2
// when the file cannot be read or the compilation cache (--cache-dir, as
// the other commands take it) cannot be used.
func runInspect(ctx context.Context, args []string, s stdio) int {
	var asJSON bool
	var cacheDir string
	fs := newFlagSet("inspect", "[--json] [--cache-dir DIR] FILE", s)
	fs.BoolVar(&asJSON, "json", false, "print the inspection as JSON")
	registerCacheDir(fs, &cacheDir)
	file, status, ok := parseOneArg("inspect", "file", fs, args, s)
	if !ok {
		return status
	}
	wasm, err := os.ReadFile(file)
	if err != nil {
		s.errorf("inspect", "%v", err)
		return exitUsage
	}
	// The daemon also makes trial calls before it serves with a plugin:
	// accepted means that wasmhost run would take it.
	// The limits are the defaults; the cache only spares a later inspect
	// (or run) compiling the plugin again.
	insp, err := host.InspectCached(ctx, file, wasm, cacheDir, func(ctx context.Context, p *host.Plugin) error {
		if err := view.CheckPolicy(ctx, p); err != nil {
			return fmt.Errorf("plugin %q: %w", file, err)
		}
		return nil
	})
	if err == nil && errors.Is(insp.Err, host.ErrCacheDir) {
		err = insp.Err // the cache is at fault, not the plugin
	}
	if err != nil {
		s.errorf("inspect", "%v", err)
		cacheDirHint(s, "inspect", err)
		return exitUsage
	}
	if asJSON {
		b, err := json.MarshalIndent(insp, "", "  ")
		if err != nil {
			s.errorf("inspect", "%v", err)
			return exitUsage
		}
		fmt.Fprintln(s.out, string(b))
	} else {
		writeInspection(s, file, insp)
	}
	if !insp.Accepted {
		return exitFail
	}
	return exitOK
}

func writeInspection(s stdio, file string, insp *host.Inspection) {
	var b strings.Builder
	fmt.Fprintf(&b, "file: %s\nsha256: %s\nsize: %d bytes\n", file, insp.SHA256, insp.Size)
	// Bytes that are not a module have no data segments to count and
	// nothing to meter: the last line says what they are.
	if !errors.Is(insp.Err, host.ErrNotWasm) {
		fmt.Fprintf(&b, "data segments: %d", insp.DataSegments)
		if insp.Packed < insp.DataSegments {
			fmt.Fprintf(&b, " (wasmhost pack would leave %d, for faster loads)", insp.Packed)
		}
		b.WriteByte('\n')
		if insp.Metered {
			b.WriteString("metered: yes\n")
		} else {
			b.WriteString("metered: no (the host refuses it: see the error below)\n")
		}
	}
	if h := insp.Handshake; h != nil {
		fmt.Fprintf(&b, "handshake: %s %s (abi %d)", h.Name, h.Version, h.ABI)
		if len(h.Wants) > 0 {
			fmt.Fprintf(&b, ", wants %s", strings.Join(h.Wants, ","))
		}
		if h.Renames {
			b.WriteString(", renames")
		}
		b.WriteByte('\n')
	} else {
		b.WriteString("handshake: none\n")
	}
	if len(insp.OptionalExports) > 0 {
		fmt.Fprintf(&b, "optional exports: %s\n", strings.Join(insp.OptionalExports, ","))
	} else {
		b.WriteString("optional exports: none\n")
	}
	b.WriteString("exports:\n")
	for _, e := range insp.Exports {
		fmt.Fprintf(&b, "  %s %s", e.Kind, e.Name)
		if e.Signature != "" {
			fmt.Fprintf(&b, " %s", e.Signature)
		}
		b.WriteByte('\n')
	}
	b.WriteString("imports:\n")
	for _, i := range insp.Imports {
		fmt.Fprintf(&b, "  %s\n", i)
	}
	if insp.Accepted {
		b.WriteString("accepted: yes\n")
	} else {
		fmt.Fprintf(&b, "accepted: no: %s\n", oneLineText(insp.Reason))
	}
	fmt.Fprint(s.out, b.String())
}

// oneLineText folds a multi-line message onto one line.
func oneLineText(msg string) string {
	return strings.ReplaceAll(strings.TrimRight(msg, "\n"), "\n", " | ")
}
