package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/sys"
)

// The sandbox of every instance (see abi/SPEC.md, "Sandbox"):
//
//   - WASI is available so that Go and other WASI guests start, but with no
//     arguments, no environment variables, no preopened directories (no
//     filesystem), stdin at end of file, stdout and stderr captured (logged
//     at debug level, never written to the host's own streams; the start of
//     a call's stderr is kept to explain a trap, see callStderr).
//   - Extism: empty config, no allowed hosts (http_request panics, which
//     the host reports as a trap), no allowed paths, vars disabled
//     (var_set panics), HTTP response size 0.
//   - Clocks are fake and per instance: the wall clock starts at
//     fakeEpoch and the monotonic clock at 0, and each reading advances the
//     clock it reads by clockStep. Readings never depend on real time, yet
//     loops that wait for time to pass (Go's scheduler) still finish. Sleep
//     and yield return at once.
//   - Randomness is a ChaCha8 stream keyed with randSeed, restarted for
//     every instance: a fresh instance always reads the same bytes.

// fakeEpoch is the first wall-clock reading of an instance:
// 2022-01-01T00:00:00Z, the same epoch wazero's own fake clock uses.
var fakeEpoch = time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC)

// clockStep is how far a fake clock advances on each reading.
const clockStep = time.Millisecond

// randSeed keys the deterministic random stream of every instance.
var randSeed = [32]byte([]byte("wasmhost-abi-v1-fixed-rand-seed."))

// envWASIOutput is the environment variable that makes extism go-sdk wire
// every instance's stdout and stderr to the host process's own.
const envWASIOutput = "EXTISM_ENABLE_WASI_OUTPUT"

// errWASIOutput refuses to create instances while envWASIOutput is set: the
// plugin could then write into the host's stdout (an MCP stdio stream).
var errWASIOutput = errors.New(envWASIOutput + " is set: extism would connect plugin stdout/stderr to the host's own streams; unset it")

// fakeClock is the per-instance wall and monotonic clock.
type fakeClock struct {
	wallReads, monoReads atomic.Int64
}

func (c *fakeClock) walltime() (sec int64, nsec int32) {
	t := fakeEpoch.Add(time.Duration(c.wallReads.Add(1)-1) * clockStep)
	return t.Unix(), int32(t.Nanosecond())
}

func (c *fakeClock) nanotime() int64 {
	return (c.monoReads.Add(1) - 1) * int64(clockStep)
}

// eofReader is the stdin of every instance.
type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// sandboxConfig returns the module configuration of one new instance.
func sandboxConfig(stdout, stderr io.Writer) wazero.ModuleConfig {
	clock := &fakeClock{}
	return wazero.NewModuleConfig().
		WithStdin(eofReader{}).
		WithStdout(stdout).
		WithStderr(stderr).
		WithWalltime(clock.walltime, sys.ClockResolution(clockStep)).
		WithNanotime(clock.nanotime, sys.ClockResolution(clockStep)).
		WithNanosleep(func(int64) {}).
		WithOsyield(func() {}).
		WithRandSource(rand.NewChaCha8(randSeed))
}

// maxLogLine caps one logged line of guest output.
const maxLogLine = 4 << 10

// lineLogger is an io.Writer that logs each complete line of a guest
// stream at debug level. It is used by one instance, so one goroutine.
type lineLogger struct {
	log    *slog.Logger
	plugin string
	stream string
	buf    []byte
}

func (w *lineLogger) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.buf = append(w.buf, p...)
			if len(w.buf) >= maxLogLine {
				w.flush()
			}
			break
		}
		w.buf = append(w.buf, p[:i]...)
		w.flush()
		p = p[i+1:]
	}
	return n, nil
}

func (w *lineLogger) flush() {
	line := w.buf
	if len(line) > maxLogLine {
		line = line[:maxLogLine]
	}
	w.log.LogAttrs(context.Background(), slog.LevelDebug, "plugin output",
		slog.String("plugin", w.plugin), slog.String("stream", w.stream), slog.String("line", string(line)))
	w.buf = w.buf[:0]
}

// maxCallStderr caps what an instance keeps of one call's standard error
// to explain a trap: enough for a Go panic's message and the first frames
// of its traceback.
const maxCallStderr = 8 << 10

// A callStderr is the standard error of one instance. It passes everything
// on to next (the debug log, or io.Discard) and keeps the first
// maxCallStderr bytes written since the last reset, the start of the
// current call, so that a trap can say what the guest reported before it
// stopped (trapReason). It is used by one call at a time.
type callStderr struct {
	next io.Writer
	buf  []byte
}

func (w *callStderr) Write(p []byte) (int, error) {
	if room := maxCallStderr - len(w.buf); room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	return w.next.Write(p)
}

// reset forgets what earlier calls wrote.
func (w *callStderr) reset() { w.buf = w.buf[:0] }

// maxTrapReason caps the guest's own words quoted in a trap's error.
const maxTrapReason = 256

// trapReason explains a trap in the guest's own words, for its one-line
// error: the Extism error message the plugin set before trapping (what
// AssemblyScript's abort handler in docs/plugins.md does), or else the
// line of its standard error that says what went wrong (a Go panic or
// fatal error, with the first frame of the plugin's own code when the
// traceback names one). It returns "" when the guest said nothing.
func trapReason(msg string, stderr []byte) string {
	if msg != "" {
		return fmt.Sprintf("the plugin set the error %q", runePrefix(msg, maxTrapReason))
	}
	var lines []string
	for _, l := range strings.Split(string(stderr), "\n") {
		if l = strings.TrimRight(l, "\r"); strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return ""
	}
	first := lines[0]
	for _, l := range lines {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			first = l
			break
		}
	}
	reason := fmt.Sprintf("the plugin wrote %q to stderr", runePrefix(first, maxTrapReason))
	if at := goFrame(lines); at != "" {
		reason += ", raised at " + at
	}
	return reason
}

// goFrame returns the file:line of the first frame of a Go traceback among
// lines that is not in the Go runtime: where a Go plugin panicked or ran
// out of memory. It returns "" when there is no such frame.
func goFrame(lines []string) string {
	inTrace := false
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "goroutine "):
			inTrace = true
			continue
		case !inTrace || i+1 == len(lines) || strings.HasPrefix(l, "\t"):
			continue
		case strings.HasPrefix(l, "runtime.") || strings.HasPrefix(l, "panic("):
			continue
		}
		next := lines[i+1]
		if !strings.HasPrefix(next, "\t") {
			continue
		}
		loc := strings.TrimSpace(next)
		if j := strings.LastIndex(loc, " +0x"); j >= 0 {
			loc = loc[:j]
		}
		return runePrefix(loc, maxTrapReason)
	}
	return ""
}

// wasiOutputSet reports whether envWASIOutput is set.
func wasiOutputSet() bool {
	_, ok := os.LookupEnv(envWASIOutput)
	return ok
}
