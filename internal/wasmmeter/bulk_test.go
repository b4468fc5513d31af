package wasmmeter

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/wasmhost/wasmhost/internal/wasmbin"
)

// bulkTicks models the fuel of one call of a counted export of bulk.wasm on
// a fresh instance with the given budget: n turns of a loop, each a check
// and then, unless charge is negative (no charge emitted), the charge of
// its bulk instruction. It returns how often the module calls tick.
func bulkTicks(budget, charge int64, n int) int64 {
	fuel, ticks := budget, int64(0)
	for range n {
		if fuel < 1 { // the loop's check
			ticks++
			fuel = budget
		}
		fuel--
		switch {
		case charge < 0:
		case charge >= fuel: // the charge checks before the instruction
			ticks++
			fuel = budget
		default:
			fuel -= charge
		}
	}
	return ticks
}

// TestBulkChargesByLength checks that bulk memory and table instructions
// are charged one unit of fuel per 16 bytes or 2 elements of their length,
// whether it is known only at run time or is a constant, by counting the
// ticks of loops of them against a model of the fuel.
func TestBulkChargesByLength(t *testing.T) {
	const (
		budget = 1000
		turns  = 3000
	)
	wasm := instrument(t, readTestdata(t, "bulk.wasm"), budget)
	cases := []struct {
		name   string
		args   []uint64
		charge int64 // per turn; -1: none emitted
	}{
		{"fill", []uint64{0, turns}, 0},
		{"fill", []uint64{15, turns}, 0},
		{"fill", []uint64{16, turns}, 1},
		{"fill", []uint64{160, turns}, 10},
		{"fill", []uint64{999 * 16, turns}, 999},
		{"fill", []uint64{1000*16 + 15, turns}, 1000},
		{"fill", []uint64{1 << 17, turns}, 1 << 13},
		{"copy", []uint64{1 << 17, 0, 100, turns}, 6},
		{"copy", []uint64{1 << 17, 0, 1600, turns}, 100},
		{"copy", []uint64{1 << 17, 0, 1 << 16, turns}, 1 << 12},
		{"fill_const", []uint64{turns}, 32000 / 16},
		{"fill_small", []uint64{turns}, -1}, // 15 bytes: less than a unit
		{"tfill", []uint64{0, turns}, 0},
		{"tfill", []uint64{1, turns}, 0},
		{"tfill", []uint64{2, turns}, 1},
		{"tfill", []uint64{201, turns}, 100},
		{"tfill", []uint64{2000, turns}, 1000},
		{"tfill", []uint64{4096, turns}, 2048},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s%v", tc.name, tc.args), func(t *testing.T) {
			m := &meter{budget: budget}
			r := newRuntime(t, 0, m)
			inst := instantiate(t, r, wasm, "inst")
			require.Equal(t, outcome{results: []uint64{}}, run(inst, call{tc.name, tc.args}))
			assert.Equal(t, bulkTicks(budget, tc.charge, turns), m.ticks.Load())
		})
	}
	// The model itself: a charge of the budget or more ticks on every
	// turn; no charge ticks as the loop alone does. A tick comes when a
	// unit is due and the fuel is spent, so u units cost (u-1)/budget.
	assert.Equal(t, int64(turns), bulkTicks(budget, budget, turns))
	assert.Equal(t, int64((turns-1)/budget), bulkTicks(budget, -1, turns))
	assert.Equal(t, int64((turns*11-1)/budget), bulkTicks(budget, 10, turns))
	// Enough turns that the small charges are told apart: with too few,
	// no charge, a charge of 0 and one of 1 would all give no tick.
	require.Less(t, bulkTicks(budget, -1, turns), bulkTicks(budget, 0, turns))
	require.Less(t, bulkTicks(budget, 0, turns), bulkTicks(budget, 1, turns))
}

// TestBulkChecksBeforeItRuns checks that a bulk instruction whose charge
// spends the fuel calls tick before it runs: under a context that is done
// already, and a tick that then stops the call, the memory stays as it was.
func TestBulkChecksBeforeItRuns(t *testing.T) {
	const budget = 1000
	wasm := instrument(t, readTestdata(t, "bulk.wasm"), budget)
	for _, tc := range []struct {
		call       call
		start, end uint32 // the bytes the call would fill
	}{
		{call{"fill", []uint64{1 << 17, 1}}, 0, 1 << 17},
		{call{"fill_const", []uint64{1}}, 64, 64 + 32000},
	} {
		t.Run(tc.call.name, func(t *testing.T) {
			m := &meter{budget: budget, stopOnDone: true}
			r := newRuntime(t, 0, m)
			inst := instantiate(t, r, wasm, "inst")
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, err := inst.ExportedFunction(tc.call.name).Call(ctx, tc.call.args...)
			require.ErrorIs(t, err, errStopped, "the fill should have been stopped by its check")
			assert.Equal(t, int64(1), m.ticks.Load())
			got, ok := inst.Memory().Read(tc.start, tc.end-tc.start)
			require.True(t, ok)
			assert.Equal(t, make([]byte, tc.end-tc.start), got, "the fill ran before its check")
		})
	}
}

// TestBulkAddsLocal checks the local declarations of a function that gets
// the length local: the count grows by one (here past a byte: 127 entries
// become 128), the declarations are kept and the new i32 comes last.
func TestBulkAddsLocal(t *testing.T) {
	code := []byte{
		0x41, 0x00, // i32.const 0
		0x41, 0x00, // i32.const 0
		0x20, 0x00, // local.get 0 (an i32 declared below)
		0xfc, 0x0b, 0x00, // memory.fill
		0x0b,
	}
	for _, entries := range []int{0, 1, 127, 128} {
		t.Run(fmt.Sprint(entries), func(t *testing.T) {
			decl := wasmbin.AppendU32(nil, uint32(entries))
			nLocals := 0
			for i := range entries {
				types := []byte{0x7f, 0x7e}
				decl = append(decl, 2, types[i%2]) // 2 i32, 2 i64, ...
				nLocals += 2
			}
			body := append(bytes.Clone(decl), code...)
			if entries == 0 {
				body[len(decl)+4] = 0x3f // memory.size (0x00 follows) for the length
			}
			out := instrument(t, module(body, true), 100)
			require.NoError(t, compiles(context.Background(), fuzzRuntime(t), out))

			got := codeBody(t, out)
			cnt, w := wasmbin.U32(got, 0)
			require.Equal(t, uint32(entries+1), cnt)
			end := w + len(decl) - wasmbin.SizeU32(uint32(entries))
			assert.Equal(t, decl[wasmbin.SizeU32(uint32(entries)):], got[w:end], "the declared locals changed")
			assert.Equal(t, []byte{1, 0x7f}, got[end:end+2], "the added local is not one i32 at the end")
			tee := wasmbin.AppendU32([]byte{0x22}, uint32(nLocals))
			assert.True(t, bytes.Contains(got[end+2:], tee), "the charge does not use the added local %d", nLocals)
		})
	}
}

// codeBody returns the first function body (without its size) in the code
// section of wasm.
func codeBody(t testing.TB, wasm []byte) []byte {
	t.Helper()
	for p := 8; p < len(wasm); {
		size, n := wasmbin.U32(wasm, p+1)
		require.NotZero(t, n)
		body := p + 1 + n
		if wasm[p] == wasmbin.SecCode {
			_, n := wasmbin.U32(wasm, body)
			bsize, m := wasmbin.U32(wasm, body+n)
			return wasm[body+n+m : body+n+m+int(bsize)]
		}
		p = body + int(size)
	}
	t.Fatal("no code section")
	return nil
}

// TestBulkConstantCharge checks that a constant length is charged as a
// constant, without the local, and not at all below one unit.
func TestBulkConstantCharge(t *testing.T) {
	fill := func(length ...byte) []byte {
		// The entry check goes before the drop; then i32.const 0 (twice)
		// and the length, and the fill.
		b := []byte{0, 0x41, 0x00, 0x1a, 0x41, 0x00, 0x41, 0x00, 0x41}
		b = append(b, length...)
		return append(b, 0xfc, 0x0b, 0x00, 0x0b)
	}
	small := instrument(t, module(fill(0x0f), true), 100)           // 15 bytes
	big := instrument(t, module(fill(0x80, 0xfa, 0x01), true), 100) // 32000 bytes
	r := fuzzRuntime(t)
	for _, out := range [][]byte{small, big} {
		require.NoError(t, compiles(context.Background(), r, out))
		assert.Equal(t, byte(0), codeBody(t, out)[0], "a local was added for a constant length")
	}
	assert.Equal(t, len(module(fill(0x0f), true))+tickOverhead(t), len(small), "a charge below one unit was emitted")
	charge := (&rewriter{}).appendConstCharge(nil, 2000)
	assert.Contains(t, string(big), string(charge)+"\xfc\x0b\x00", "no charge of 2000 units before the fill")
}

// tickOverhead returns how many bytes the rewrite adds to a module() module
// without bulk instructions: the tick type, import and fuel global, and the
// entry check.
func tickOverhead(t testing.TB) int {
	t.Helper()
	in := module([]byte{0, 0x0b}, true)
	return len(instrument(t, in, 100)) - len(in)
}
