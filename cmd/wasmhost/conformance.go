package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/conformance"
	"github.com/wasmhost/wasmhost/host"
)

// Defaults of wasmhost conformance's --timeout and --progress.
const (
	// conformanceTimeout is the time limit per plugin call: the daemon's
	// default (abi.DefaultCallTimeoutMillis), so that a suite passes only
	// with a plugin that answers in time where it will run.
	conformanceTimeout = abi.DefaultCallTimeoutMillis * time.Millisecond
	// conformanceProgress is how long a run goes before it shows its
	// progress on standard error, and how often it does then.
	conformanceProgress = 3 * time.Second
)

// runConformance implements `wasmhost conformance`: it runs the golden
// suites at the given paths against the plugin and prints one line per
// failing case (per case with -v), then "N passed, N failed" alone on the
// last line. It exits 0 when no case failed, 1 when one did, and 2 when the
// plugin cannot be loaded, a path cannot be read (or holds no suite) or the
// --json report cannot be written (the text report is printed first), with
// the reason on standard error.
//
// Each plugin call has a time limit, conformanceTimeout unless --timeout
// says otherwise; a case whose call runs past it fails, and its line says
// how to raise it. A run that takes longer than --progress (default
// conformanceProgress) shows on standard error how far it has got, every
// --progress, and how it ended; standard output is unchanged.
func runConformance(ctx context.Context, args []string, s stdio) int {
	var pf pluginFlags
	var verbose bool
	var jsonFile string
	var every time.Duration
	fs := newFlagSet("conformance", "[flags] PATH...", s)
	pf.register(fs)
	pf.timeout = conformanceTimeout
	if f := fs.Lookup("timeout"); f != nil {
		f.DefValue = conformanceTimeout.String()
		f.Usage = "time limit per plugin call, e.g. 500ms; a case whose call runs longer fails"
	}
	fs.BoolVar(&verbose, "v", false, "print a line for each passing case too")
	fs.StringVar(&jsonFile, "json", "", "also write the report as JSON to `FILE`")
	fs.DurationVar(&every, "progress", conformanceProgress, "show progress on standard error once the run has taken `D`, then every D (0: never)")
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

	var opts conformance.Options
	var pp *progressPrinter
	if every > 0 {
		pp = startProgress(s.err, every)
		opts.Progress = pp.update
	}
	report := conformance.RunWith(ctx, p, extism, suites, opts)
	if pp != nil {
		pp.stop()
	}
	report.Plugin, report.Digest = p.Name(), p.Digest()
	hintTimeouts(report, pf.timeout)
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

// hintTimeouts adds to the message of each case that failed by a call
// timeout the flag that sets the limit.
func hintTimeouts(r *conformance.Report, limit time.Duration) {
	for i, res := range r.Results {
		if !res.Passed && strings.Contains(res.Message, host.ErrPluginTimeout.Error()) {
			r.Results[i].Message += fmt.Sprintf(" (each call may take %v: raise it with --timeout)", limit)
		}
	}
}

// A progressPrinter shows a long conformance run's progress on w: from
// every after the start, every every, the cases done and the one
// running; and when the run ends, if it showed anything, the total.
type progressPrinter struct {
	w     io.Writer
	every time.Duration
	begin time.Time
	done  chan struct{}
	wg    sync.WaitGroup

	mu    sync.Mutex
	last  conformance.Progress
	shown bool
}

func startProgress(w io.Writer, every time.Duration) *progressPrinter {
	pp := &progressPrinter{w: w, every: every, begin: time.Now(), done: make(chan struct{})}
	pp.wg.Add(1)
	go pp.loop()
	return pp
}

// update records p as the run's progress.
func (pp *progressPrinter) update(p conformance.Progress) {
	pp.mu.Lock()
	pp.last = p
	pp.mu.Unlock()
}

func (pp *progressPrinter) loop() {
	defer pp.wg.Done()
	t := time.NewTicker(pp.every)
	defer t.Stop()
	for {
		select {
		case <-pp.done:
			return
		case <-t.C:
			pp.mu.Lock()
			p := pp.last
			line := fmt.Sprintf("conformance: %d/%d cases done (%d failed) after %s", p.Done, p.Total, p.Failed, pp.elapsed())
			if p.File != "" {
				line += fmt.Sprintf(", running %s: %s", p.File, p.Case)
			}
			fmt.Fprintln(pp.w, line)
			pp.shown = true
			pp.mu.Unlock()
		}
	}
}

// stop ends the printing; a run that took every or longer gets a last line.
func (pp *progressPrinter) stop() {
	close(pp.done)
	pp.wg.Wait()
	if pp.shown || time.Since(pp.begin) >= pp.every {
		p := pp.last
		fmt.Fprintf(pp.w, "conformance: %d/%d cases done (%d failed) in %s\n", p.Done, p.Total, p.Failed, pp.elapsed())
	}
}

// elapsed is the run's time so far, to a tenth of a second.
func (pp *progressPrinter) elapsed() time.Duration {
	return time.Since(pp.begin).Round(100 * time.Millisecond)
}
