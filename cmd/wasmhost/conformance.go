package main

import (
	"context"
	"encoding/json"
	"os"
	"slices"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/conformance"
)

// runConformance implements `wasmhost conformance`: it runs the golden
// suites at the given paths against the plugin and prints one line per
// failing case (per case with -v), then "N passed, N failed" alone on the
// last line. It exits 0 when no case failed, 1 when one did, and 2 when the
// plugin cannot be loaded, a path cannot be read (or holds no suite) or the
// --json report cannot be written (the text report is printed first), with
// the reason on standard error.
func runConformance(ctx context.Context, args []string, s stdio) int {
	var pf pluginFlags
	var verbose bool
	var jsonFile string
	fs := newFlagSet("conformance", "[flags] PATH...", s)
	pf.register(fs)
	fs.BoolVar(&verbose, "v", false, "print a line for each passing case too")
	fs.StringVar(&jsonFile, "json", "", "also write the report as JSON to `FILE`")
	paths, err := parseArgs(fs, args)
	if err != nil {
		return parseStatus(err)
	}
	if len(paths) == 0 {
		return s.usageError(fs, "conformance", "no suite path given")
	}
	suites, err := conformance.Load(paths...)
	if err != nil {
		s.errorf("conformance", "%v", err)
		return exitUsage
	}
	if jsonFile != "" {
		// A report written into a suite directory by the last run is not a
		// suite of this one.
		if report, err := os.Stat(jsonFile); err == nil {
			suites = slices.DeleteFunc(suites, func(su *conformance.Suite) bool {
				fi, err := os.Stat(su.File)
				return err == nil && os.SameFile(fi, report)
			})
		}
	}
	p, err := pf.load(ctx, s.err)
	if err != nil {
		s.errorf("conformance", "load plugin: %v", err)
		return exitUsage
	}
	defer p.Close(context.WithoutCancel(ctx))
	// A plugin with direct exports must answer the same both ways.
	var extism abi.Policy
	if p.HasDirect() {
		opts := pf.options(s.err)
		opts.NoDirect = true
		ep, err := pf.loadWith(ctx, opts)
		if err != nil {
			s.errorf("conformance", "load plugin without direct calls: %v", err)
			return exitUsage
		}
		defer ep.Close(context.WithoutCancel(ctx))
		extism = ep
	}

	report := conformance.RunBothWays(ctx, p, extism, suites)
	report.Plugin, report.Digest = p.Name(), p.Digest()
	// The text report comes first, so that a JSON report that cannot be
	// written still leaves the results and the summary on stdout.
	if err := report.WriteText(s.out, verbose); err != nil {
		s.errorf("conformance", "%v", err)
		return exitUsage
	}
	if jsonFile != "" {
		b, err := json.MarshalIndent(report, "", "  ")
		if err == nil {
			err = os.WriteFile(jsonFile, append(b, '\n'), 0o644)
		}
		if err != nil {
			s.errorf("conformance", "write JSON report: %v", err)
			return exitUsage
		}
	}
	if !report.OK() {
		return exitFail
	}
	return exitOK
}
