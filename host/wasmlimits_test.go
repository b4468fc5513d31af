package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/wasmbin"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The sandbox escapes of issue 25, each a hostile module: test-generated
// bytes where the text format cannot say it, testplugins/wat otherwise.
// Each runs in a child process of the test (the module could otherwise
// take the test down with it), which reports its peak RSS.

// containCap is the memory limit the hostile modules load under, and
// containTimeout their call timeout: those of the reproducers
// (--memory-mib 16 --timeout 500ms).
const (
	containCap     = 16 << 20
	containTimeout = 500 * time.Millisecond
)

// containRSSMargin is how far above containCap the child's peak RSS may
// go: the test binary, wazero and the Go runtime (about 60 MiB before any
// plugin), the Extism kernel's memory (a cap of its own), and compiled
// code. The reproducers reached 2 GiB and more, or died.
const containRSSMargin = 192 << 20

// containEnv names the case a child process runs.
const containEnv = "WASMHOST_CONTAIN_CASE"

// wasmSection appends section id with content c to b.
func wasmSection(b []byte, id byte, c []byte) []byte {
	b = append(b, id)
	b = binary.AppendUvarint(b, uint64(len(c)))
	return append(b, c...)
}

// wasmVec returns a vector of n items, the concatenated items.
func wasmVec(n int, items []byte) []byte {
	return append(binary.AppendUvarint(nil, uint64(n)), items...)
}

// tableInitModule is issue 25's reproducer 1: a table in the form with an
// initialiser expression (0x40 0x00), which the rewriter cannot meter, and
// an element segment that claims 4,294,967,295 entries. wazero allocates
// for all of them.
func tableInitModule() []byte {
	b := append([]byte(nil), wasmbin.Header...)
	b = wasmSection(b, 1, wasmVec(1, []byte{0x60, 0, 1, 0x7f}))
	b = wasmSection(b, 3, wasmVec(1, []byte{0}))
	// table: 0x40 0x00, reftype funcref, limits min 1, init ref.null func
	b = wasmSection(b, 4, wasmVec(1, []byte{0x40, 0x00, 0x70, 0x00, 0x01, 0xd0, 0x70, 0x0b}))
	// element segment 0: active, table 0, offset 0, 2^32-1 function indices
	elem := append([]byte{0x00, 0x41, 0x00, 0x0b}, binary.AppendUvarint(nil, 1<<32-1)...)
	b = wasmSection(b, 9, wasmVec(1, append(elem, 0)))
	b = wasmSection(b, 10, wasmVec(1, []byte{4, 0, 0x41, 0, 0x0b}))
	return b
}

// elemCountModule is reproducer 1 without the table form the rewriter
// refuses: a plain table and the element segment of 2^32-1 entries.
func elemCountModule() []byte {
	b := append([]byte(nil), wasmbin.Header...)
	b = wasmSection(b, 1, wasmVec(1, []byte{0x60, 0, 1, 0x7f}))
	b = wasmSection(b, 3, wasmVec(1, []byte{0}))
	b = wasmSection(b, 4, wasmVec(1, []byte{0x70, 0x01, 0x01, 0x01}))
	elem := append([]byte{0x00, 0x41, 0x00, 0x0b}, binary.AppendUvarint(nil, 1<<32-1)...)
	b = wasmSection(b, 9, wasmVec(1, append(elem, 0)))
	b = wasmSection(b, 10, wasmVec(1, []byte{4, 0, 0x41, 0, 0x0b}))
	return b
}

// nestedModule is reproducer 3: one function of depth nested blocks,
// repeated funcs times (4.5 MB for 750,000 and 1).
func nestedModule(depth, funcs int) []byte {
	body := []byte{0}
	for range depth {
		body = append(body, 0x02, 0x40)
	}
	body = append(body, bytes.Repeat([]byte{0x0b}, depth+1)...)
	b := append([]byte(nil), wasmbin.Header...)
	b = wasmSection(b, 1, wasmVec(1, []byte{0x60, 0, 0}))
	b = wasmSection(b, 3, wasmVec(funcs, bytes.Repeat([]byte{0}, funcs)))
	var code []byte
	for range funcs {
		code = binary.AppendUvarint(code, uint64(len(body)))
		code = append(code, body...)
	}
	return wasmSection(b, 10, wasmVec(funcs, code))
}

// siblingModule is a function of n blocks side by side, each branching out
// of the function: wazero's compile time grows with the square of n.
func siblingModule(n, funcs int) []byte {
	body := []byte{0}
	for range n {
		body = append(body, 0x02, 0x40, 0x41, 0, 0x0d, 0x01, 0x0b)
	}
	body = append(body, 0x0b)
	b := append([]byte(nil), wasmbin.Header...)
	b = wasmSection(b, 1, wasmVec(1, []byte{0x60, 0, 0}))
	b = wasmSection(b, 3, wasmVec(funcs, bytes.Repeat([]byte{0}, funcs)))
	var code []byte
	for range funcs {
		code = binary.AppendUvarint(code, uint64(len(body)))
		code = append(code, body...)
	}
	return wasmSection(b, 10, wasmVec(funcs, code))
}

// A containCase is one hostile module and what the host must do with it.
type containCase struct {
	name string
	wasm func(t testing.TB) []byte
	// call, when set, makes a canonicalize call on the loaded plugin.
	call bool
	want error  // the load's error, or the call's when call is set
	msg  string // in the error
}

var containCases = []containCase{
	{name: "table-init-expr", wasm: func(testing.TB) []byte { return tableInitModule() },
		want: ErrUnsupportedWasm, msg: "table with an initialiser expression"},
	{name: "elem-count", wasm: func(testing.TB) []byte { return elemCountModule() },
		want: errMalformedMeter, msg: "element segment 0 claims 4294967295 items"},
	{name: "table-grow-unbounded", wasm: func(t testing.TB) []byte { return watWasm(t, "table-grow-unbounded") },
		want: ErrModuleLimit, msg: "table.grow in a module with a table that has no maximum size"},
	{name: "table-huge-max", wasm: func(t testing.TB) []byte { return watWasm(t, "table-huge-max") },
		want: ErrModuleLimit, msg: "tables of up to 4294967295 entries take 68719476720 bytes at 16 bytes each, which leaves no memory under the limit of 16777216 bytes"},
	// Its table fits 16 MiB only just: the limit left for memories is
	// then less than the plugin's memory needs.
	{name: "table-grow-16MiB", wasm: func(t testing.TB) []byte { return watWasm(t, "table-grow") },
		want: ErrModuleLimit, msg: "leaves no memory under the limit"},
	{name: "nested-blocks", wasm: func(testing.TB) []byte { return nestedModule(750_000, 1) },
		want: ErrModuleLimit, msg: "body of 2250002 bytes, over the limit of 1048576"},
	{name: "nested-5000", wasm: func(testing.TB) []byte { return nestedModule(5000, 1) },
		want: ErrModuleLimit, msg: "blocks nested deeper than 2048"},
	{name: "sibling-blocks", wasm: func(testing.TB) []byte { return siblingModule(10_000, 1) },
		want: ErrModuleLimit, msg: "more than 4096 blocks, loops and ifs in one function"},
	{name: "compile-work", wasm: func(testing.TB) []byte { return siblingModule(4000, 8) },
		want: ErrModuleLimit, msg: "compile work 128000000"},
	{name: "start-loop", wasm: func(t testing.TB) []byte { return watWasm(t, "start-loop") },
		want: ErrPluginTimeout, msg: "instantiate: start function: plugin call timed out (limit 500ms)"},
}

// errMalformedMeter matches the rewriter's refusal of a malformed module,
// which the host passes on as it is.
var errMalformedMeter = errors.New("wasmmeter: malformed module")

// runContainCase is the child's side: load (and call) the module of the
// case named, and print the outcome on one line.
func runContainCase(name string) {
	for _, tc := range containCases {
		if tc.name != name {
			continue
		}
		ctx := context.Background()
		opts := Options{MemoryLimitBytes: containCap, CallTimeout: containTimeout, MaxInstances: 1}
		p, err := Load(ctx, "plugins/"+name+".wasm", tc.wasm(&testing.T{}), opts)
		if err == nil && tc.call {
			_, err = canon(p, `{}`)
		}
		if p != nil {
			_ = p.Close(ctx)
		}
		fmt.Printf("PEAKRSS %d\n", peakRSS())
		fmt.Printf("OUTCOME %v\n", err)
		os.Exit(0)
	}
	fmt.Println("no such case")
	os.Exit(3)
}

// TestHostileModulesContained runs each case of containCases in a child
// process: the load (or call) must fail with the case's error, in one line,
// within the call timeout plus timeoutMargin, and with the child's peak RSS
// under containCap plus containRSSMargin. Before issue 25's fixes the
// first case killed its process for want of memory, the nested blocks
// compiled for minutes and the looping start function never returned.
func TestHostileModulesContained(t *testing.T) {
	if name := os.Getenv(containEnv); name != "" {
		runContainCase(name)
	}
	for _, tc := range containCases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHostileModulesContained$")
			cmd.Env = append(os.Environ(), containEnv+"="+tc.name)
			start := time.Now()
			out, err := cmd.CombinedOutput()
			elapsed := time.Since(start)
			require.NoError(t, ctx.Err(), "the child did not finish; killed:\n%s", out)
			require.NoError(t, err, "the child died:\n%s", lastLines(out, 20))
			line := outcomeLine(t, out, "OUTCOME ")
			rss, err := strconv.ParseInt(outcomeLine(t, out, "PEAKRSS "), 10, 64)
			require.NoError(t, err)
			assert.NotEqual(t, "<nil>", line, "the module was accepted")
			assert.Contains(t, line, tc.want.Error())
			assert.Contains(t, line, tc.msg)
			assert.True(t, strings.HasPrefix(line, `plugin "plugins/`+tc.name+`.wasm": `), line)
			// The child starts, loads and exits: its own start-up is
			// part of the time, and well within the margin.
			assert.Less(t, elapsed, containTimeout+timeoutMargin, "the child answered long after the timeout")
			assert.Positive(t, rss, "the child's peak RSS (Linux only)")
			assert.Less(t, rss, int64(containCap+containRSSMargin), "the child's peak RSS")
			t.Logf("%s: %s; %v, peak RSS %d MiB", tc.name, line, elapsed.Round(time.Millisecond), rss>>20)
		})
	}
}

// peakRSS returns the process's peak resident set size in bytes (VmHWM):
// the child's own, unlike the rusage its parent gets, which counts what
// the parent had when it forked.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return -1
}

// outcomeLine returns what the child printed after prefix.
func outcomeLine(t *testing.T, out []byte, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(string(out), "\n") {
		if s, ok := strings.CutPrefix(l, prefix); ok {
			return s
		}
	}
	t.Fatalf("the child reported no outcome:\n%s", lastLines(out, 20))
	return ""
}

// lastLines returns the last n lines of out.
func lastLines(out []byte, n int) string {
	l := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// TestTableGrowBounded: a plugin growing its table in a loop (issue 25's
// reproducer 2) loads under a limit that holds its table's maximum, grows
// it to that and no further, and is stopped at the call timeout; the
// instance is discarded, not pooled.
func TestTableGrowBounded(t *testing.T) {
	const limit = 32 << 20
	p := loadWat(t, "table-grow", Options{MemoryLimitBytes: limit, CallTimeout: containTimeout, MaxInstances: 1})
	baseline := heapAlloc()
	peak := peakHeap()
	start := time.Now()
	_, err := canon(p, `{}`)
	elapsed := time.Since(start)
	peakAlloc := peak()
	require.ErrorIs(t, err, ErrPluginTimeout)
	assert.Less(t, elapsed, containTimeout+timeoutMargin)
	assert.EqualValues(t, 1, p.stats.discarded.Load(), "the instance was discarded")
	assert.Zero(t, len(p.idle), "no instance is pooled")
	// The grown table (8 MiB of wazero's 8-byte entries, within the
	// limit) was in the host's heap while the call ran, and is gone with
	// the instance.
	assert.Less(t, peakAlloc, 2*(baseline+2*limit), "host heap during the call (baseline %d MiB)", baseline>>20)
	assert.Less(t, heapAlloc(), baseline+limit/4, "host heap after the call (baseline %d MiB)", baseline>>20)
}

// TestStartFunctionMetered: a start function that loops 200,000 times
// reaches the meter's tick while the instance is made (issue 25's
// reproducer 4 once failed there with extism's "Invalid context"), and the
// plugin loads and answers.
func TestStartFunctionMetered(t *testing.T) {
	for _, noMeter := range []bool{false, true} {
		t.Run(fmt.Sprintf("noMeter=%t", noMeter), func(t *testing.T) {
			p := loadWat(t, "start-count", Options{noMeter: noMeter})
			_, err := canon(p, `{}`)
			require.ErrorIs(t, err, ErrPluginRefused, "the plugin's own answer")
		})
	}
}

// TestStartLoopStopped: a start function that never returns is stopped at
// the call timeout, with one line, both at load and metered or not.
func TestStartLoopStopped(t *testing.T) {
	for _, noMeter := range []bool{false, true} {
		t.Run(fmt.Sprintf("noMeter=%t", noMeter), func(t *testing.T) {
			start := time.Now()
			_, err := Load(context.Background(), "start-loop", watWasm(t, "start-loop"), Options{CallTimeout: shortTimeout, noMeter: noMeter})
			require.ErrorIs(t, err, ErrPluginTimeout)
			assert.EqualError(t, err, `plugin "start-loop": instantiate: start function: plugin call timed out (limit 200ms)`)
			assert.Less(t, time.Since(start), shortTimeout+timeoutMargin)
		})
	}
}

// TestNoMeterStillChecks: the noMeter option skips the rewrite, not its
// checks.
func TestNoMeterStillChecks(t *testing.T) {
	_, err := Load(context.Background(), "x", tableInitModule(), Options{noMeter: true})
	require.ErrorIs(t, err, ErrUnsupportedWasm)
	_, err = Load(context.Background(), "x", nestedModule(5000, 1), Options{noMeter: true})
	require.ErrorIs(t, err, ErrModuleLimit)
}

// TestModuleSizeLimit: a module over MaxModuleBytes is refused before
// anything reads it.
func TestModuleSizeLimit(t *testing.T) {
	big := append(append([]byte(nil), wasmbin.Header...), make([]byte, MaxModuleBytes)...)
	_, err := Load(context.Background(), "big", big, Options{})
	require.ErrorIs(t, err, ErrModuleLimit)
	assert.ErrorContains(t, err, fmt.Sprintf("%d bytes, over the limit of %d", len(big), MaxModuleBytes))
}

// TestCompileTimeout: a compilation past Options.CompileTimeout refuses
// the plugin, and what it leaves running is cleaned up when it ends.
func TestCompileTimeout(t *testing.T) {
	_, err := Load(context.Background(), "slow", siblingModule(4000, 1), Options{CompileTimeout: time.Nanosecond})
	require.ErrorIs(t, err, ErrModuleLimit)
	assert.ErrorContains(t, err, "not compiled within the compile timeout of 1ns")
	require.Eventually(t, func() bool { return compilesAbandoned.Load() == 0 }, time.Minute, 10*time.Millisecond,
		"the abandoned compilation did not end")
}

// FuzzLoadModule feeds mutated modules to Load (and, when one loads, one
// call) under a small memory limit and call timeout, with the Go heap
// held to fuzzHeapLimit: the process must never die, and every refusal is
// one line. The seeds are the hostile modules above and small plugins of
// testplugins/wat.
func FuzzLoadModule(f *testing.F) {
	const fuzzHeapLimit = 1 << 30
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(fuzzHeapLimit))
	for _, name := range []string{"script", "tiny", "start-count", "start-loop", "table-grow", "table-grow-unbounded", "direct", "bulk-fill"} {
		f.Add(watWasm(f, name))
	}
	f.Add(tableInitModule())
	f.Add(elemCountModule())
	f.Add(nestedModule(3000, 1))
	f.Add(siblingModule(100, 2))
	f.Fuzz(func(t *testing.T, wasm []byte) {
		ctx := context.Background()
		opts := Options{MemoryLimitBytes: containCap, CallTimeout: 200 * time.Millisecond, CompileTimeout: 30 * time.Second, MaxInstances: 1}
		start := time.Now()
		p, err := Load(ctx, "fuzz.wasm", wasm, opts)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("the load took %v: %v", d, err)
		}
		if err != nil {
			assert.NotContains(t, err.Error(), "\n", "a load refusal of more than one line")
			return
		}
		_, _ = canon(p, `{}`)
		require.NoError(t, p.Close(ctx))
	})
}

// TestStartFunctionsShareNothing: start functions run while their instances
// are made, before Extism has a plugin for them; one that calls an Extism
// host function (http_request writes the plugin's last status code before
// it fails) must not reach state another instance's start function uses
// at the same time. Run with -race.
func TestStartFunctionsShareNothing(t *testing.T) {
	wasm := watWasm(t, "start-http")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			p, err := Load(context.Background(), "start-http", wasm, Options{})
			if err == nil {
				_ = p.Close(context.Background())
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.ErrorIs(t, err, ErrPluginTrap)
		require.NotContains(t, err.Error(), "\n", "one line")
	}
}
