package wasmmeter

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/wasmhost/wasmhost/internal/wasmbin"
)

// readTestdata returns testdata/name (a .wasm built from the .wat next to it).
func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

// instrument is Instrument that must succeed.
func instrument(t testing.TB, wasm []byte, budget int32) []byte {
	t.Helper()
	out, err := Instrument(wasm, budget)
	require.NoError(t, err)
	return out
}

// meter is the host side of the injected import.
type meter struct {
	budget int32
	ticks  atomic.Int64
	// stopOnDone makes tick panic, as the host does, once the call's
	// context is done.
	stopOnDone bool
}

// errStopped is what tick panics with when the call's context is done.
var errStopped = errors.New("meter: call stopped")

func (m *meter) tick(ctx context.Context) int32 {
	m.ticks.Add(1)
	if m.stopOnDone && ctx.Err() != nil {
		panic(fmt.Errorf("%w: %w", errStopped, ctx.Err()))
	}
	return m.budget
}

// newRuntime returns a wazero runtime with the default (compiler) config,
// and features added to the default ones, with the host modules "env" (for
// the testdata modules) and ImportModule (backed by m) defined.
func newRuntime(t testing.TB, features api.CoreFeatures, m *meter) wazero.Runtime {
	t.Helper()
	ctx := context.Background()
	cfg := wazero.NewRuntimeConfig()
	if features != 0 {
		cfg = cfg.WithCoreFeatures(api.CoreFeaturesV2 | features)
	}
	r := wazero.NewRuntimeWithConfig(ctx, cfg)
	t.Cleanup(func() { _ = r.Close(ctx) })
	_, err := r.NewHostModuleBuilder("env").
		NewFunctionBuilder().WithFunc(func(a, b int32) int32 { return a + b }).Export("add").
		NewFunctionBuilder().WithFunc(func(a int32) int32 { return 2 * a }).Export("twice").
		NewFunctionBuilder().WithFunc(func() {}).Export("nop").
		Instantiate(ctx)
	require.NoError(t, err)
	if m != nil {
		_, err = r.NewHostModuleBuilder(ImportModule).
			NewFunctionBuilder().WithFunc(m.tick).Export(ImportName).
			Instantiate(ctx)
		require.NoError(t, err)
	}
	return r
}

// instantiate compiles and instantiates wasm in r under name.
func instantiate(t testing.TB, r wazero.Runtime, wasm []byte, name string) api.Module {
	t.Helper()
	ctx := context.Background()
	mod, err := r.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithName(name).WithStartFunctions())
	require.NoError(t, err)
	return mod
}

// call is one export call and its arguments.
type call struct {
	name string
	args []uint64
}

// outcome is what a call did: its results or its error.
type outcome struct {
	results []uint64
	err     string
}

// run calls c on mod. A call that runs for more than 10 s is stopped by
// the meter (when mod is instrumented and its meter stops on done): a
// rewrite that calls the wrong functions must fail the test, not hang it.
func run(mod api.Module, c call) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := mod.ExportedFunction(c.name).Call(ctx, c.args...)
	if err != nil {
		// The message has a wasm stack trace, whose function indices
		// differ; keep the first line.
		msg, _, _ := strings.Cut(err.Error(), "\n")
		return outcome{err: msg}
	}
	return outcome{results: res}
}

func TestBehaviourPreserved(t *testing.T) {
	cases := []struct {
		file     string
		features api.CoreFeatures
		calls    []call
		// Results checked against known values, by "name[args]".
		want map[string][]uint64
	}{
		{
			file: "behaviour.wasm",
			calls: []call{
				{"sum", []uint64{0}}, {"sum", []uint64{1000}}, {"fib", []uint64{20}},
				{"pair", []uint64{0}}, {"pair", []uint64{30}},
				{"indirect", []uint64{0, 7, 5}}, {"indirect", []uint64{1, 7, 5}}, {"indirect", []uint64{2, 7, 5}},
				{"indirect", []uint64{3, 7, 5}}, {"indirect", []uint64{5, 7, 5}}, {"indirect", []uint64{9, 7, 5}},
				{"indirect2", []uint64{0, 7, 5}}, {"indirect2", []uint64{1, 7, 5}}, {"indirect2", []uint64{2, 7, 5}},
				{"indirect2", []uint64{3, 7, 5}},
				{"via_global", []uint64{3, 9}}, {"via_code_ref", []uint64{15}},
				{"via_passive", []uint64{0, 7, 5}}, {"via_passive", []uint64{1, 7, 5}}, {"via_passive", []uint64{2, 7, 5}},
				{"via_passive", []uint64{3, 7, 5}}, {"via_passive", []uint64{4, 7, 5}},
				{"null_entry", nil}, {"is_null", nil}, {"imported", []uint64{20}}, {"started", nil},
				{"dispatch", []uint64{5}}, {"memsum", nil},
			},
			want: map[string][]uint64{
				"sum[1000]": {500500}, "fib[20]": {6765}, "pair[30]": {832040, 1346269},
				"indirect[0 7 5]": {12}, "indirect[1 7 5]": {2}, "indirect[2 7 5]": {12}, "indirect[3 7 5]": {35},
				"indirect[5 7 5]": {7}, "indirect2[0 7 5]": {2}, "indirect2[1 7 5]": {12}, "indirect2[2 7 5]": {35},
				"via_global[3 9]": {9}, "via_code_ref[15]": {610},
				"via_passive[0 7 5]": {2}, "via_passive[1 7 5]": {35}, "via_passive[2 7 5]": {12},
				"via_passive[3 7 5]": {7}, "via_passive[4 7 5]": {12},
				"is_null[]": {1}, "imported[20]": {41}, "started[]": {42},
			},
		},
		{
			file:     "features.wasm",
			features: experimental.CoreFeaturesThreads | experimental.CoreFeaturesExtendedConst,
			calls:    []call{{"simd", nil}, {"scalar", nil}, {"tables", nil}, {"bulk", nil}, {"atomics", nil}},
		},
		{
			file:     "tailcall.wasm",
			features: experimental.CoreFeaturesTailCall,
			calls:    []call{{"fact", []uint64{20, 1}}, {"down", []uint64{100000, 0}}},
			want:     map[string][]uint64{"fact[20 1]": {2432902008176640000}, "down[100000 0]": {200000}},
		},
		{
			file: "bulk.wasm",
			calls: []call{
				{"fill", []uint64{1000, 3}}, {"sum", []uint64{2000}}, {"fill", []uint64{0, 1}},
				{"copy", []uint64{500, 0, 300, 4}}, {"sum", []uint64{1000}},
				{"init", []uint64{10, 3, 20}}, {"sum", []uint64{1000}}, {"init", []uint64{10, 30, 20}},
				{"fill_const", []uint64{3}}, {"fill_small", []uint64{5}}, {"sum", []uint64{40000}},
				{"fill", []uint64{1 << 20, 1}}, {"copy", []uint64{0, 1 << 17, 1 << 17, 1}},
				{"tfill", []uint64{10, 2}}, {"tsum", []uint64{12}}, {"tinit", []uint64{1, 4}}, {"tsum", []uint64{12}},
				{"tcopy", []uint64{5, 0, 6}}, {"tsum", []uint64{12}}, {"tsum", []uint64{104}},
				{"tinit", []uint64{1, 5}}, {"tfill", []uint64{5000, 1}}, {"dead", []uint64{7}},
			},
			want: map[string][]uint64{
				"sum[2000]": {1000}, "sum[40000]": {10 + 1717 + 34 + 32000}, // "3456789abcdefghijklm" adds 1717
			},
		},
		{
			file:  "runaway.wasm",
			calls: []call{{"exp", []uint64{10}}, {"count", []uint64{1000}}, {"calls", []uint64{1000}}},
			want:  map[string][]uint64{"exp[10]": {1024}, "count[1000]": {1000}, "calls[1000]": {1000}},
		},
	}
	for _, tc := range cases {
		for _, budget := range []int32{1, 7, 1 << 30} {
			t.Run(fmt.Sprintf("%s/budget=%d", tc.file, budget), func(t *testing.T) {
				wasm := readTestdata(t, tc.file)
				m := &meter{budget: budget, stopOnDone: true}
				r := newRuntime(t, tc.features, m)
				orig := instantiate(t, r, wasm, "orig")
				inst := instantiate(t, r, instrument(t, wasm, budget), "inst")
				for _, c := range tc.calls {
					want, got := run(orig, c), run(inst, c)
					key := fmt.Sprintf("%s%v", c.name, c.args)
					assert.Equal(t, want, got, key)
					if w, ok := tc.want[key]; ok {
						assert.Equal(t, outcome{results: w}, got, key)
					}
				}
				if budget < 1<<30 {
					assert.Positive(t, m.ticks.Load(), "tick never called")
				} else {
					assert.Zero(t, m.ticks.Load(), "tick called before the budget ran out")
				}
			})
		}
	}
}

func TestStartFunctionInstrumented(t *testing.T) {
	// behaviour.wasm's start function calls env.twice and sets a global; it
	// runs (and is metered) at instantiation. With a budget of 0 the first
	// check calls tick.
	m := &meter{budget: 0}
	r := newRuntime(t, 0, m)
	inst := instantiate(t, r, instrument(t, readTestdata(t, "behaviour.wasm"), 0), "inst")
	assert.Equal(t, int64(1), m.ticks.Load(), "the start function's entry check should tick once")
	assert.Equal(t, outcome{results: []uint64{42}}, run(inst, call{"started", nil}))
	// A budget below 1 is spent: every check calls tick again.
	assert.Equal(t, int64(2), m.ticks.Load(), "a tick returning 0 should leave no fuel")
}

// runawayEnv, when set, makes TestRunawayReachesTick run the one case it
// names, in a child process of the test.
const runawayEnv = "WASMMETER_RUNAWAY_CASE"

var runawayCases = []struct {
	file     string
	features api.CoreFeatures
	call     call
}{
	{"runaway.wasm", 0, call{"spin", nil}},
	{"runaway.wasm", 0, call{"exp", []uint64{200}}},
	{"tailcall.wasm", experimental.CoreFeaturesTailCall, call{"forever", nil}},
	// 4 MiB fills, with a length known at run time: a millisecond or so
	// each, and each charged (and checked) before it runs.
	{"spinfill.wasm", 0, call{"spin_fill", []uint64{4<<20 - 1024}}},
}

// TestRunawayReachesTick runs modules that never return on their own and
// checks that a tick that panics once the call's deadline has passed (as
// the host's does) stops them at once. Each case runs in a child process:
// compiled wasm that never reaches tick cannot be preempted, and would hang
// the whole test binary (its next garbage collection waits for it forever),
// so the parent kills a child that does not finish.
func TestRunawayReachesTick(t *testing.T) {
	if name := os.Getenv(runawayEnv); name != "" {
		for _, tc := range runawayCases {
			if tc.call.name == name {
				runaway(t, tc.file, tc.features, tc.call)
				return
			}
		}
		t.Fatalf("no case %q", name)
	}
	for _, tc := range runawayCases {
		t.Run(tc.call.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRunawayReachesTick$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), runawayEnv+"="+tc.call.name)
			out, err := cmd.CombinedOutput()
			require.NoError(t, ctx.Err(), "the call did not stop; the child was killed:\n%s", out)
			require.NoError(t, err, "%s", out)
			assert.Contains(t, string(out), "--- PASS: TestRunawayReachesTick")
		})
	}
}

// runawayBound is how soon after its start a runaway call must stop: its
// deadline is 50 ms.
const runawayBound = 10 * time.Second

func runaway(t *testing.T, file string, features api.CoreFeatures, c call) {
	m := &meter{budget: 10000, stopOnDone: true}
	r := newRuntime(t, features, m)
	inst := instantiate(t, r, instrument(t, readTestdata(t, file), m.budget), "inst")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := inst.ExportedFunction(c.name).Call(ctx, c.args...)
	elapsed := time.Since(start)
	require.Error(t, err)
	assert.ErrorContains(t, err, errStopped.Error())
	assert.ErrorContains(t, err, context.DeadlineExceeded.Error())
	// A call that never reached tick would run until the parent kills this
	// process, a minute on; one that does stops at its next tick, within
	// microseconds of guest work of the deadline. The bound is far enough
	// from both to hold on a loaded machine.
	assert.Less(t, elapsed, runawayBound, "the call should stop soon after its deadline")
	assert.Greater(t, m.ticks.Load(), int64(1))
	t.Logf("%s stopped after %v and %d ticks", c.name, elapsed, m.ticks.Load())
}

func TestTickCounts(t *testing.T) {
	const budget = 1000
	newInstance := func(t *testing.T) (*meter, api.Module) {
		m := &meter{budget: budget}
		r := newRuntime(t, 0, m)
		return m, instantiate(t, r, instrument(t, readTestdata(t, "runaway.wasm"), budget), "inst")
	}
	t.Run("exact", func(t *testing.T) {
		// count(n) runs n loop iterations; its entry check merges with the
		// loop's, so a call makes n checks. The first tick is at check
		// budget+1, then one every budget checks.
		m, inst := newInstance(t)
		assert.Equal(t, outcome{results: []uint64{budget}}, run(inst, call{"count", []uint64{budget}}))
		assert.Zero(t, m.ticks.Load())
		run(inst, call{"count", []uint64{1}})
		assert.Equal(t, int64(1), m.ticks.Load())
		run(inst, call{"count", []uint64{budget - 1}})
		assert.Equal(t, int64(1), m.ticks.Load())
		run(inst, call{"count", []uint64{1}})
		assert.Equal(t, int64(2), m.ticks.Load())
	})
	for _, tc := range []struct {
		call   call
		checks int64 // loop iterations plus function entries
	}{
		{call{"count", []uint64{1_000_000}}, 1_000_000},
		// loop: n+1 iterations, leaf: n entries.
		{call{"calls", []uint64{500_000}}, 1_000_001},
		// 2^21-1 entries, no loop.
		{call{"exp", []uint64{20}}, 1<<21 - 1},
	} {
		t.Run(tc.call.name, func(t *testing.T) {
			m, inst := newInstance(t)
			require.Empty(t, run(inst, tc.call).err)
			ticks := m.ticks.Load()
			assert.GreaterOrEqual(t, ticks, tc.checks/budget-1)
			assert.LessOrEqual(t, ticks, tc.checks/budget+1)
		})
	}
}

func TestDeterministicAndNotTwice(t *testing.T) {
	for _, name := range testdataModules(t) {
		t.Run(name, func(t *testing.T) {
			wasm := readTestdata(t, name)
			in := bytes.Clone(wasm)
			a := instrument(t, wasm, 5000)
			b := instrument(t, wasm, 5000)
			assert.Equal(t, a, b, "two rewrites differ")
			assert.Equal(t, in, wasm, "the input was modified")
			_, err := Instrument(a, 5000)
			require.ErrorIs(t, err, ErrUnsupported)
			assert.ErrorContains(t, err, ImportModule)
		})
	}
}

// testdataModules lists the .wasm files in testdata.
func testdataModules(t testing.TB) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join("testdata", "*.wasm"))
	require.NoError(t, err)
	require.NotEmpty(t, names)
	for i, n := range names {
		names[i] = filepath.Base(n)
	}
	return names
}

// module assembles a module with one function type () -> (), one defined
// function of that type with the given body (locals and instructions,
// without the size) and, if it is not empty, a memory.
func module(body []byte, memory bool) []byte {
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = append(b, wasmbin.SecType, 4, 1, 0x60, 0, 0)
	b = append(b, wasmbin.SecFunction, 2, 1, 0)
	if memory {
		b = append(b, wasmbin.SecMemory, 3, 1, 0, 1)
	}
	code := wasmbin.AppendU32(nil, 1)
	code = wasmbin.AppendU32(code, uint32(len(body)))
	code = append(code, body...)
	b = append(b, wasmbin.SecCode)
	b = wasmbin.AppendU32(b, uint32(len(code)))
	return append(b, code...)
}

func TestUnsupported(t *testing.T) {
	cases := []struct {
		name   string
		wasm   []byte
		offset int // of the refused construct
		msg    string
	}{
		// try (legacy exception handling) ... end
		{"try", module([]byte{0, 0x06, 0x40, 0x0b, 0x0b}, false), 0x17, "exception-handling"},
		{"throw", module([]byte{0, 0x08, 0x00, 0x0b}, false), 0x17, "exception-handling"},
		{"try_table", module([]byte{0, 0x1f, 0x40, 0x00, 0x0b, 0x0b}, false), 0x17, "exception-handling"},
		{"call_ref", module([]byte{0, 0x14, 0x00, 0x0b}, false), 0x17, "typed-function-references"},
		{"unknown opcode", module([]byte{0, 0x27, 0x0b}, false), 0x17, "unknown opcode 0x27"},
		{"unknown 0xfc", module([]byte{0, 0xfc, 0x12, 0x0b}, false), 0x17, "unknown 0xfc opcode 18"},
		{"unknown simd", module([]byte{0, 0xfd, 0x9a, 0x01, 0x0b}, false), 0x17, "unknown SIMD opcode 0x9a"},
		{"unknown atomic", module([]byte{0, 0xfe, 0x04, 0x0b}, false), 0x17, "unknown atomic opcode 0x4"},
		{"multi-memory memarg", module([]byte{0, 0x41, 0, 0x28, 0x40, 0x01, 0x00, 0x1a, 0x0b}, true), 0x1f, "multiple memories"},
		{"exnref local", module([]byte{1, 1, 0x69, 0x0b}, false), 0x18, "local of type 0x69"},
		{"ref block type", module([]byte{0, 0x02, 0x63, 0x70, 0x0b, 0x0b}, false), 0x18, "block type 0x63"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Instrument(tc.wasm, 100)
			require.ErrorIs(t, err, ErrUnsupported)
			assert.ErrorContains(t, err, "function 0 at offset "+fmt.Sprintf("%#x", tc.offset))
			assert.ErrorContains(t, err, tc.msg)
		})
	}

	t.Run("tag section", func(t *testing.T) {
		b := append([]byte("\x00asm\x01\x00\x00\x00"), wasmbin.SecType, 4, 1, 0x60, 0, 0, wasmbin.SecTag, 3, 1, 0, 0)
		_, err := Instrument(b, 100)
		require.ErrorIs(t, err, ErrUnsupported)
		assert.ErrorContains(t, err, "tag section")
	})
	t.Run("memory64", func(t *testing.T) {
		b := append([]byte("\x00asm\x01\x00\x00\x00"), wasmbin.SecMemory, 3, 1, 4, 1)
		_, err := Instrument(b, 100)
		require.ErrorIs(t, err, ErrUnsupported)
		assert.ErrorContains(t, err, "64-bit")
	})
	t.Run("already instrumented", func(t *testing.T) {
		b := append([]byte("\x00asm\x01\x00\x00\x00"), wasmbin.SecType, 5, 1, 0x60, 0, 1, 0x7f, wasmbin.SecImport)
		imp := wasmbin.AppendU32(nil, 1)
		imp = wasmbin.AppendU32(imp, uint32(len(ImportModule)))
		imp = append(imp, ImportModule...)
		imp = wasmbin.AppendU32(imp, 1)
		imp = append(imp, 'x', 0, 0)
		b = wasmbin.AppendU32(b, uint32(len(imp)))
		b = append(b, imp...)
		_, err := Instrument(b, 100)
		require.ErrorIs(t, err, ErrUnsupported)
	})
	t.Run("valid", func(t *testing.T) {
		// The same helper with a known body works, so the cases above fail
		// for their opcode.
		_, err := Instrument(module([]byte{0, 0x01, 0x0b}, false), 100)
		require.NoError(t, err)
	})
}

// compiles reports whether wazero compiles wasm. wazero v1.12.0 panics on
// some malformed modules (a function whose type index is out of range, for
// one); that counts as not compiling.
func compiles(ctx context.Context, r wazero.Runtime, wasm []byte) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("wazero panicked: %v", p)
		}
	}()
	if err := implausible(wasm); err != nil {
		return err
	}
	m, err := r.CompileModule(ctx, wasm)
	if err == nil {
		_ = m.Close(ctx)
	}
	return err
}

// implausible returns an error for a module with a section that runs past
// the module's end, or that declares more items than it has bytes (every
// item takes one at least): wazero would refuse it, but wazero v1.12.0
// first allocates what the count asks for, gigabytes for some random
// bytes (TestMalformed reached 10 GB of RSS under -race). nil means
// wazero is to decide.
func implausible(wasm []byte) error {
	if len(wasm) < 8 {
		return nil
	}
	b := wasm[8:]
	for len(b) > 0 {
		id := b[0]
		size, n := uleb32(b[1:])
		if n == 0 {
			return nil
		}
		b = b[1+n:]
		if uint64(size) > uint64(len(b)) {
			return fmt.Errorf("section %d: %d bytes, %d left", id, size, len(b))
		}
		payload := b[:size]
		b = b[size:]
		if id >= 1 && id <= 11 && id != 8 { // the sections that are vectors
			if count, n := uleb32(payload); n > 0 && uint64(count) > uint64(len(payload)) {
				return fmt.Errorf("section %d: %d items in %d bytes", id, count, len(payload))
			}
		}
	}
	return nil
}

// uleb32 decodes an unsigned LEB128 u32 and its length, or 0 bytes if it is
// not one.
func uleb32(b []byte) (uint32, int) {
	var v uint64
	for i := 0; i < 5 && i < len(b); i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			if v > 1<<32-1 {
				return 0, 0
			}
			return uint32(v), i + 1
		}
	}
	return 0, 0
}

// checkProperty is the property of FuzzInstrument: Instrument does not
// panic, its errors wrap ErrUnsupported or ErrMalformed, and if it succeeds
// and wazero compiles the input, wazero compiles the output. With strict,
// Instrument must also succeed (or refuse the module as unsupported)
// whenever wazero compiles the input: it must not call a valid module
// malformed. (The fuzz target leaves that out: it would have wazero compile
// every input, and wazero v1.12.0 allocates as much memory as some malformed
// counts ask for.)
func checkProperty(t testing.TB, r wazero.Runtime, wasm []byte, strict bool) {
	t.Helper()
	ctx := context.Background()
	out, err := Instrument(wasm, 1000)
	if err != nil {
		require.True(t, errors.Is(err, ErrUnsupported) || errors.Is(err, ErrMalformed) || errors.Is(err, ErrLimit), "error wraps no sentinel: %v", err)
		require.Nil(t, out)
		if !strict || errors.Is(err, ErrUnsupported) || errors.Is(err, ErrLimit) {
			return
		}
	}
	if compiles(ctx, r, wasm) != nil {
		return
	}
	require.NoError(t, err, "wazero compiles the input but Instrument fails")
	require.NoError(t, compiles(ctx, r, out), "wazero compiles the input but not the output")
}

// fuzzRuntime is a runtime with every feature the testdata uses, and no
// host modules: only compilation is checked.
func fuzzRuntime(t testing.TB) wazero.Runtime {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2|
		experimental.CoreFeaturesThreads|experimental.CoreFeaturesTailCall|experimental.CoreFeaturesExtendedConst))
	t.Cleanup(func() { _ = r.Close(ctx) })
	return r
}

func TestMalformed(t *testing.T) {
	r := fuzzRuntime(t)
	t.Run("truncations", func(t *testing.T) {
		for _, name := range []string{"runaway.wasm", "tailcall.wasm", "behaviour.wasm", "bulk.wasm"} {
			wasm := readTestdata(t, name)
			errs := 0
			for n := 0; n < len(wasm); n++ {
				cut := bytes.Clone(wasm[:n])
				checkProperty(t, r, cut, true)
				if _, err := Instrument(cut, 1000); err != nil {
					errs++
				}
			}
			// Only a cut at a section boundary can leave a whole module.
			assert.Greater(t, errs, len(wasm)*9/10, "%s: too few truncations fail", name)
		}
	})
	t.Run("random bytes", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		header := []byte("\x00asm\x01\x00\x00\x00")
		errs := 0
		for i := 0; i < 2000; i++ {
			b := make([]byte, rng.IntN(64))
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			if i%2 == 0 {
				b = append(bytes.Clone(header), b...)
			}
			checkProperty(t, r, b, true)
			if _, err := Instrument(b, 1000); err != nil {
				errs++
			}
		}
		assert.Greater(t, errs, 1900)
	})
	t.Run("mutations", func(t *testing.T) {
		// Single-byte changes of valid modules: mostly still parseable, so
		// they reach deep into the scanner.
		rng := rand.New(rand.NewPCG(3, 4))
		for _, name := range []string{"behaviour.wasm", "features.wasm", "bulk.wasm"} {
			wasm := readTestdata(t, name)
			for i := 0; i < 300; i++ {
				b := bytes.Clone(wasm)
				b[8+rng.IntN(len(b)-8)] = byte(rng.Uint32())
				checkProperty(t, r, b, true)
			}
		}
	})
}

func TestErrorsNamePlace(t *testing.T) {
	// A call of function 7 in a module with one function.
	_, err := Instrument(module([]byte{0, 0x10, 0x07, 0x0b}, false), 100)
	require.ErrorIs(t, err, ErrMalformed)
	assert.EqualError(t, err, "wasmmeter: malformed module: function 0 at offset 0x17: function index 7 out of range")

	_, err = Instrument([]byte("\x00asm\x01\x00\x00\x00\x01\x05\x01"), 100)
	require.ErrorIs(t, err, ErrMalformed)
	assert.ErrorContains(t, err, "at offset 0x8")
}

func TestNoIndexAliasesTheNewOnes(t *testing.T) {
	// An out-of-range global index must not become a reference to the fuel
	// global, nor a type index one to the tick type: the module would turn
	// valid, with access to its own meter.
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"global.set", []byte{0, 0x41, 0x00, 0x24, 0x00, 0x0b}},
		{"global.get", []byte{0, 0x23, 0x00, 0x1a, 0x0b}},
		{"call_indirect", []byte{0, 0x41, 0x00, 0x11, 0x01, 0x00, 0x1a, 0x0b}},
		{"block type", []byte{0, 0x02, 0x01, 0x0b, 0x0b}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Instrument(module(tc.body, false), 100)
			require.ErrorIs(t, err, ErrMalformed)
			assert.ErrorContains(t, err, "out of range")
		})
	}
}

// readFile returns the contents of path.
func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

func TestSIMDOpcodeIsOneByte(t *testing.T) {
	// wazero reads the opcode after 0xfd as one byte: 0xfd 0x80 is
	// i16x8.abs, and the 0x03 after it, which the specification would read
	// as the second byte of the LEB128 opcode 0x180, is a loop to wazero.
	// The rewriter must see that loop.
	body := []byte{0, 0xfd, 0x0c}
	body = append(body, make([]byte, 16)...) // v128.const 0
	body = append(body,
		0xfd, 0x80, // i16x8.abs
		0x03, 0x40, // loop
		0x0c, 0x00, // br 0
		0x0b, // end
		0x1a, // drop
		0x0b)
	wasm := module(body, false)
	r := fuzzRuntime(t)
	require.NoError(t, compiles(context.Background(), r, wasm), "wazero no longer reads 0xfd 0x80 0x03 as i16x8.abs, loop")
	out := instrument(t, wasm, 100)
	require.NoError(t, compiles(context.Background(), r, out))
	check := (&rewriter{nGlobals: 0, nImpFuncs: 0}).seqFor()
	assert.Contains(t, string(out), "\xfd\x80\x03\x40"+string(check), "no check at the top of the loop")
}

// nameSubsections returns the subsections of the "name" custom section of
// wasm by id, or nil if it has none.
func nameSubsections(t testing.TB, wasm []byte) map[byte][]byte {
	t.Helper()
	for p := 8; p < len(wasm); {
		size, n := wasmbin.U32(wasm, p+1)
		require.NotZero(t, n)
		body, end := p+1+n, p+1+n+int(size)
		if wasm[p] == wasmbin.SecCustom {
			if name, q, ok := wasmbin.Name(wasm[:end], body); ok && string(name) == "name" {
				subs := map[byte][]byte{}
				for q < end {
					size, n := wasmbin.U32(wasm, q+1)
					require.NotZero(t, n)
					subs[wasm[q]] = wasm[q+1+n : q+1+n+int(size)]
					q += 1 + n + int(size)
				}
				return subs
			}
		}
		p = end
	}
	return nil
}

// indirectNameMap decodes vec(funcidx vec(idx name)) (local or label names)
// into "funcidx.idx" -> name.
func indirectNameMap(t testing.TB, b []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	cnt, n := wasmbin.U32(b, 0)
	p := n
	for i := uint32(0); i < cnt; i++ {
		f, n := wasmbin.U32(b, p)
		p += n
		c, n := wasmbin.U32(b, p)
		p += n
		for j := uint32(0); j < c; j++ {
			l, n := wasmbin.U32(b, p)
			name, q, ok := wasmbin.Name(b, p+n)
			require.True(t, ok)
			out[fmt.Sprintf("%d.%d", f, l)] = string(name)
			p = q
		}
	}
	require.Equal(t, len(b), p)
	return out
}

func TestNameSection(t *testing.T) {
	ctx := context.Background()
	wasm := readTestdata(t, "behaviour.wasm") // built with --debug-names
	out := instrument(t, wasm, 100)

	// wazero names exported functions from the name section.
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer func() { _ = r.Close(ctx) }()
	orig, err := r.CompileModule(ctx, wasm)
	require.NoError(t, err)
	inst, err := r.CompileModule(ctx, out)
	require.NoError(t, err)
	named := 0
	for name, d := range orig.ExportedFunctions() {
		assert.Equal(t, d.Name(), inst.ExportedFunctions()[name].Name(), name)
		if d.Name() != "" { // $sum, $fib and $pair are exported under their names
			assert.Equal(t, name, d.Name())
			named++
		}
	}
	assert.Equal(t, 3, named)

	// Local names move with their functions (2 imports: index 2 and up
	// shift); the other subsections are unchanged.
	before, after := nameSubsections(t, wasm), nameSubsections(t, out)
	require.Contains(t, before, byte(wasmbin.NameLocals))
	want := map[string]string{}
	for k, v := range indirectNameMap(t, before[wasmbin.NameLocals]) {
		var f, l uint32
		_, err := fmt.Sscanf(k, "%d.%d", &f, &l)
		require.NoError(t, err)
		if f >= 2 {
			f++
		}
		want[fmt.Sprintf("%d.%d", f, l)] = v
	}
	assert.Equal(t, want, indirectNameMap(t, after[wasmbin.NameLocals]))
	assert.Len(t, after, len(before))
	for id, b := range before {
		if id != wasmbin.NameFunctions && id != wasmbin.NameLocals {
			assert.Equal(t, b, after[id], "subsection %d", id)
		}
	}

	t.Run("malformed is dropped", func(t *testing.T) {
		m := module([]byte{0, 0x01, 0x0b}, false)
		m = append(m, wasmbin.SecCustom, 8, 4, 'n', 'a', 'm', 'e', wasmbin.NameFunctions, 5, 1)
		out, err := Instrument(m, 100)
		require.NoError(t, err)
		assert.Nil(t, nameSubsections(t, out))
		assert.NotContains(t, string(out), "\x04name")
	})
}

// TestSplitRewriteSameBytes: rewriting a code section in two halves, the
// second on another goroutine, gives the bytes of one sequential rewrite,
// or the same error (the first in the module's order): for the committed
// plugins, the test modules, and their truncations and mutations.
func TestSplitRewriteSameBytes(t *testing.T) {
	orig := splitCode
	t.Cleanup(func() { splitCode = orig })
	rewrite := func(wasm []byte, split bool) ([]byte, string) {
		splitCode = func(int) bool { return split }
		out, err := Instrument(wasm, 1000)
		if err != nil {
			return nil, err.Error()
		}
		return out, ""
	}
	same := func(t *testing.T, what string, wasm []byte) {
		t.Helper()
		seqOut, seqErr := rewrite(wasm, false)
		splitOut, splitErr := rewrite(wasm, true)
		require.Equal(t, seqErr, splitErr, "%s: errors differ", what)
		require.True(t, bytes.Equal(seqOut, splitOut), "%s: outputs differ", what)
	}
	for _, path := range committedPlugins(t) {
		same(t, path, readFile(t, path))
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, name := range testdataModules(t) {
		wasm := readTestdata(t, name)
		same(t, name, wasm)
		for n := 8; n < len(wasm); n++ {
			same(t, fmt.Sprintf("%s cut at %d", name, n), wasm[:n])
		}
		for i := range 300 {
			b := bytes.Clone(wasm)
			b[8+rng.IntN(len(b)-8)] = byte(rng.Uint32())
			same(t, fmt.Sprintf("%s mutation %d", name, i), b)
		}
	}
	// An unsupported body in the first half and a malformed one in the
	// second: the first is the error, as in one pass.
	two := []byte("\x00asm\x01\x00\x00\x00")
	two = append(two, wasmbin.SecType, 4, 1, 0x60, 0, 0)
	two = append(two, wasmbin.SecFunction, 3, 2, 0, 0)
	bodies := [][]byte{{0, 0x06, 0x40, 0x0b, 0x0b}, {0, 0x10, 0x07, 0x0b}} // try; call of function 7
	code := wasmbin.AppendU32(nil, 2)
	for _, b := range bodies {
		code = wasmbin.AppendU32(code, uint32(len(b)))
		code = append(code, b...)
	}
	two = append(two, wasmbin.SecCode)
	two = wasmbin.AppendU32(two, uint32(len(code)))
	two = append(two, code...)
	_, splitErr := rewrite(two, true)
	assert.Contains(t, splitErr, "exception-handling")
	same(t, "two bodies", two)
}

// versionOutputs holds, for each Version, the SHA-256 of what Instrument
// writes for the modules of TestVersionNamesOutput.
var versionOutputs = map[int]string{
	1: "1be8bea230d29e4d9a27e191e4c6bedb5c26b1ff8beb3eae3cab72d595da2884",
	2: "c0e6439f15ae866a1f31fa9d8200053f37ae58fef21a491ad104240f80422b2e",
}

// TestVersionNamesOutput: Instrument's output for a fixed set of modules is
// the one recorded for Version, so that a change to the output cannot keep
// the Version under which hosts keep instrumented modules.
func TestVersionNamesOutput(t *testing.T) {
	names, err := filepath.Glob(filepath.Join("testdata", "*.wasm"))
	require.NoError(t, err)
	names = append(names, filepath.Join("..", "..", "testplugins", "prefix-policy", "prefix-policy.wasm"))
	h := sha256.New()
	for _, name := range names {
		wasm, err := os.ReadFile(name)
		require.NoError(t, err)
		out, err := Instrument(wasm, 1<<16)
		require.NoError(t, err, name)
		h.Write(out)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if want := versionOutputs[Version]; got != want {
		t.Fatalf("Instrument's output changed (sha256 %s, recorded for Version %d: %q).\n"+
			"If Instrument changed, bump Version and record this digest for it; if a module read here was rebuilt, record it for Version %d.",
			got, Version, want, Version)
	}
}

// tableModule assembles a module with a table of the given limits bytes
// (flags, min[, max]) and one function of type () -> () with body.
func tableModule(limits, body []byte) []byte {
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = append(b, wasmbin.SecType, 4, 1, 0x60, 0, 0)
	b = append(b, wasmbin.SecFunction, 2, 1, 0)
	b = append(b, wasmbin.SecTable, byte(2+len(limits)), 1, 0x70)
	b = append(b, limits...)
	code := wasmbin.AppendU32(nil, 1)
	code = wasmbin.AppendU32(code, uint32(len(body)))
	code = append(code, body...)
	b = append(b, wasmbin.SecCode)
	b = wasmbin.AppendU32(b, uint32(len(code)))
	return append(b, code...)
}

// TestTableLimits: a table without a maximum is given its minimum as
// maximum when the module cannot grow it, and a module that can is
// refused; a table.grow is charged for its delta.
func TestTableLimits(t *testing.T) {
	grow := []byte{0, 0xd0, 0x70, 0x41, 0xc0, 0x00, 0xfc, 0x0f, 0x00, 0x1a, 0x0b} // drop (table.grow 0 (ref.null func) (i32.const 64))
	t.Run("no maximum, no grow", func(t *testing.T) {
		out, err := Instrument(tableModule([]byte{0x00, 0x05}, []byte{0, 0x0b}), 100)
		require.NoError(t, err)
		assert.True(t, bytes.Contains(out, []byte{wasmbin.SecTable, 5, 1, 0x70, 0x01, 0x05, 0x05}), "table 5..5 in % x", out)
	})
	t.Run("no maximum, grow", func(t *testing.T) {
		_, err := Instrument(tableModule([]byte{0x00, 0x05}, grow), 100)
		require.ErrorIs(t, err, ErrLimit)
		assert.ErrorContains(t, err, "table.grow in a module with a table that has no maximum size")
	})
	t.Run("maximum, grow", func(t *testing.T) {
		out, err := Instrument(tableModule([]byte{0x01, 0x05, 0x7f}, grow), 100)
		require.NoError(t, err)
		// The delta, a constant 64, is charged 32 units before the grow.
		assert.True(t, bytes.Contains(out, []byte{0x41, 32}), "a charge of 32 in % x", out)
	})
}

// TestLimits: a function past MaxBodyBytes, MaxNesting, MaxBlocks or
// MaxLocals, or a module past MaxCompileWork, is refused with ErrLimit; a
// count larger than the bytes left is malformed.
func TestLimits(t *testing.T) {
	nest := func(depth int) []byte {
		b := []byte{0}
		for range depth {
			b = append(b, 0x02, 0x40)
		}
		return append(b, bytes.Repeat([]byte{0x0b}, depth+1)...)
	}
	siblings := func(n int) []byte {
		b := []byte{0}
		for range n {
			b = append(b, 0x02, 0x40, 0x0b)
		}
		return append(b, 0x0b)
	}
	_, err := Instrument(module(nest(MaxNesting-1), false), 100)
	require.NoError(t, err, "nesting at the limit")
	_, err = Instrument(module(nest(MaxNesting), false), 100)
	require.ErrorIs(t, err, ErrLimit)
	assert.ErrorContains(t, err, "blocks nested deeper than 2048")
	_, err = Instrument(module(append([]byte{0, 0x01}, nest(MaxNesting)[1:]...), false), 100)
	require.ErrorIs(t, err, ErrLimit, "nesting after the prologue")

	_, err = Instrument(module(siblings(MaxBlocks), false), 100)
	require.NoError(t, err, "blocks at the limit")
	_, err = Instrument(module(siblings(MaxBlocks+1), false), 100)
	require.ErrorIs(t, err, ErrLimit)
	assert.ErrorContains(t, err, "more than 4096 blocks")

	big := append([]byte{0}, bytes.Repeat([]byte{0x01}, MaxBodyBytes)...)
	_, err = Instrument(module(append(big, 0x0b), false), 100)
	require.ErrorIs(t, err, ErrLimit)
	assert.ErrorContains(t, err, "over the limit of 1048576")

	locals := append([]byte{1}, wasmbin.AppendU32(nil, MaxLocals+1)...)
	_, err = Instrument(module(append(locals, 0x7f, 0x0b), false), 100)
	require.ErrorIs(t, err, ErrLimit)
	assert.ErrorContains(t, err, "more than 50000 locals")

	// A local declaration count, a br_table's labels: more than the body
	// holds.
	_, err = Instrument(module([]byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0x0b}, false), 100)
	require.ErrorIs(t, err, ErrMalformed)
	_, err = Instrument(module([]byte{0, 0x41, 0, 0x0e, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x00, 0x0b}, false), 100)
	require.ErrorIs(t, err, ErrMalformed)
	assert.ErrorContains(t, err, "br_table of 4294967295 labels")
}

// TestCountsChecked: a vector count larger than the bytes left to hold it
// is malformed, in every section wazero allocates for, before any item is
// read.
func TestCountsChecked(t *testing.T) {
	huge := []byte{0xff, 0xff, 0xff, 0xff, 0x0f}
	header := []byte("\x00asm\x01\x00\x00\x00")
	sec := func(id byte, content []byte) []byte {
		b := append(bytes.Clone(header), id)
		b = wasmbin.AppendU32(b, uint32(len(content)))
		return append(b, content...)
	}
	for name, wasm := range map[string][]byte{
		"types":     sec(wasmbin.SecType, huge),
		"imports":   sec(wasmbin.SecImport, huge),
		"functions": sec(wasmbin.SecFunction, huge),
		"tables":    sec(wasmbin.SecTable, huge),
		"memories":  sec(wasmbin.SecMemory, huge),
		"globals":   sec(wasmbin.SecGlobal, huge),
		"data":      sec(wasmbin.SecData, huge),
		"data size": sec(wasmbin.SecData, append([]byte{1, 1}, huge...)),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Instrument(wasm, 100)
			require.ErrorIs(t, err, ErrMalformed)
		})
	}
}
