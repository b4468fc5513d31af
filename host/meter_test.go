package host

import (
	"context"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bulkFillWat is a hostile plugin whose canonicalize and project run a loop
// of 64 MiB memory.fill instructions, a few milliseconds each. The rewriter
// once charged such a fill like any other instruction, nothing, so the host
// checked the call's context once every meterBudget turns of the loop:
// once every few minutes, long after the call timeout and Close.
const bulkFillWat = `;; bulk-fill: a policy plugin whose canonicalize and project fill 64 MiB of
;; memory over and over (each fill a single instruction), and never return.
(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (memory (export "memory") 1024) ;; 64 MiB
  (data (i32.const 0) "{\22abi\22:1,\22name\22:\22wat-bulk-fill\22,\22version\22:\221.0.0\22}")
  (func (export "handshake") (result i32)
    (local $off i64) (local $i i32)
    (local.set $off (call $alloc (i64.const 50)))
    (loop $next
      (call $store_u8 (i64.add (local.get $off) (i64.extend_i32_u (local.get $i)))
        (i32.load8_u (local.get $i)))
      (br_if $next (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 1))) (i32.const 50))))
    (call $output_set (local.get $off) (i64.const 50))
    (i32.const 0))
  (func $spin (export "canonicalize") (export "project") (result i32)
    (loop $fill
      (memory.fill (i32.const 1024) (i32.const 0) (i32.const 67107840))
      (br $fill))
    (unreachable))
)
`

// bulkFillWasm is wat2wasm's output for bulkFillWat
// (TestBulkFillWasmMatchesItsText checks it where wat2wasm is installed).
var bulkFillWasm = mustHex("" +
	"0061736d0100000001140460017e017e60027e7f0060027e7e006000017f0251" +
	"030f65787469736d3a686f73742f656e7605616c6c6f6300000f65787469736d" +
	"3a686f73742f656e760873746f72655f753800010f65787469736d3a686f7374" +
	"2f656e760a6f75747075745f73657400020303020303050401008008072f0406" +
	"6d656d6f727902000968616e647368616b6500030c63616e6f6e6963616c697a" +
	"6500040770726f6a65637400040a48023002017e017f42321000210003402000" +
	"2001ad7c20012d00001001200141016a22014132490d000b2000423210024100" +
	"0b1500034041800841004180f8ff1ffc0b000c000b000b0b38010041000b327b" +
	"22616269223a312c226e616d65223a227761742d62756c6b2d66696c6c222c22" +
	"76657273696f6e223a22312e302e30227d")

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func TestBulkFillWasmMatchesItsText(t *testing.T) {
	if _, err := exec.LookPath("wat2wasm"); err != nil {
		t.Skip("wat2wasm is not installed (make tools installs it)")
	}
	dir := t.TempDir()
	wat, out := filepath.Join(dir, "bulk-fill.wat"), filepath.Join(dir, "bulk-fill.wasm")
	require.NoError(t, os.WriteFile(wat, []byte(bulkFillWat), 0o644))
	cmdOut, err := exec.Command("wat2wasm", wat, "-o", out).CombinedOutput()
	require.NoError(t, err, "wat2wasm: %s", cmdOut)
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, hex.EncodeToString(got), hex.EncodeToString(bulkFillWasm), "update bulkFillWasm from bulkFillWat")
}

// TestBulkFillStopped checks that a metered plugin looping over huge bulk
// memory instructions is stopped at its call timeout (abi/SPEC.md 6.1) and
// when Close's context ends, as one looping over plain instructions is.
func TestBulkFillStopped(t *testing.T) {
	ctx := context.Background()
	insp, err := inspect(ctx, bulkFillWasm, Options{})
	require.NoError(t, err)
	require.True(t, insp.Accepted, insp.Reason)
	require.True(t, insp.Metered, "the plugin must run metered, not under wazero's termination checks")

	t.Run("timeout", func(t *testing.T) {
		p, err := Load(ctx, "bulk-fill", bulkFillWasm, Options{CallTimeout: shortTimeout, MaxInstances: 1})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, p.Close(ctx)) })
		for _, export := range []string{"canonicalize", "project"} {
			start := time.Now()
			if export == "canonicalize" {
				_, err = canon(p, `{}`)
			} else {
				_, err = p.Project(ctx, projectReq(`{}`))
			}
			elapsed := time.Since(start)
			require.ErrorIs(t, err, ErrPluginTimeout, export)
			assert.EqualError(t, err, `plugin "bulk-fill": `+export+`: plugin call timed out (limit 200ms)`)
			assert.GreaterOrEqual(t, elapsed, shortTimeout)
			assert.Less(t, elapsed, shortTimeout+timeoutMargin, "%s: the call returned long after its limit", export)
			t.Logf("%s: %v after %v", export, ErrPluginTimeout, elapsed.Round(time.Millisecond))
		}
	})
	t.Run("close", func(t *testing.T) {
		p, err := Load(ctx, "bulk-fill", bulkFillWasm, Options{CallTimeout: time.Minute})
		require.NoError(t, err)
		closeTerminates(t, p)
	})
}
