package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmhost/wasmhost/internal/wasmmeter"
)

// How a runaway plugin is stopped. wazero's RuntimeConfig option
// CloseOnContextDone makes the compiled code leave wasm for Go at every
// function entry and loop turn to see whether the call's context ended.
// A Go guest (its code generator routes every taken jump through a loop
// header) then spends most of a call in those exits: 60-80% of the default
// plugin's canonicalize and project calls.
//
// The host instead rewrites each plugin at load (package
// internal/wasmmeter): the same function entries and loop turns count down
// a fuel global inside wasm, and only every meterBudget of them does the
// plugin call the host function below, which stops the call when its
// context has ended (the call timeout, the caller's context, or Close
// terminating calls). A module the rewriter does not support is refused.

// meterBudget is the number of function entries and loop turns between two
// checks of the call's context: at a nanosecond or more each, a check every
// 65 µs or more, and a runaway plugin stops within about that of its
// deadline. Bulk memory and table instructions (memory.fill, memory.copy,
// ...) count one unit per 16 bytes they touch and are checked before they
// run, so a loop of them stops about as soon as a loop of plain instructions
// (and a single one that alone spends the budget is checked first).
const meterBudget = 1 << 16

// errMeterStop is the panic value the meter stops a call with; wazero
// returns it from the call as an error.
var errMeterStop = errors.New("plugin stopped by the host")

// meterModule returns the module to compile for wasm and whether it is
// metered. Every module goes through the rewriter, which also checks what
// wazero's decoder and compiler would take unbounded memory or time for
// (wasmmeter's limits and counts): a module it finds malformed, past a
// limit or using a construct it does not know is refused, never run as it
// is. Under the noMeter option (the host's own tests and benchmarks) the
// checks still run, and the module is then compiled as it is, with
// wazero's termination checks.
//
// With a cache directory and the plugin's digest, an instrumented module is
// kept there and read back by later loads (see metercache.go); it passed
// the same checks, which wasmmeter.Version names, when it was written.
func meterModule(ctx context.Context, name string, wasm []byte, digest string, cfg settings) ([]byte, bool, error) {
	var kept string
	if cfg.cacheDir != "" && digest != "" && !cfg.noMeter {
		kept = meteredPath(cfg.cacheDir, digest)
		if code, ok := readMetered(kept); ok {
			return code, true, nil
		}
	}
	metered, err := wasmmeter.Instrument(wasm, meterBudget)
	switch {
	case errors.Is(err, wasmmeter.ErrUnsupported):
		return nil, false, fmt.Errorf("%w: %s", ErrUnsupportedWasm, meterDetail(err, wasmmeter.ErrUnsupported))
	case errors.Is(err, wasmmeter.ErrLimit):
		return nil, false, fmt.Errorf("%w: %s", ErrModuleLimit, meterDetail(err, wasmmeter.ErrLimit))
	case err != nil:
		return nil, false, err
	case cfg.noMeter:
		return wasm, false, nil
	}
	if kept != "" {
		if err := writeMetered(kept, metered); err != nil {
			cfg.log.LogAttrs(ctx, slog.LevelDebug, "cannot keep the metered module",
				slog.String("plugin", name), slog.String("path", kept), slog.Any("err", err))
		}
	}
	return metered, true, nil
}

// meterDetail returns the message of err, a wasmmeter error wrapping
// sentinel, without the sentinel's own words.
func meterDetail(err, sentinel error) string {
	return strings.TrimPrefix(err.Error(), sentinel.Error()+": ")
}

// meterFunction is the host function a metered plugin calls when its fuel
// runs out: it stops the call when the call's context has ended, and
// otherwise grants another meterBudget.
func meterFunction() extism.HostFunction {
	f := extism.NewHostFunctionWithStack(wasmmeter.ImportName, func(ctx context.Context, _ *extism.CurrentPlugin, stack []uint64) {
		if ctx.Err() != nil {
			panic(fmt.Errorf("%w: %w", errMeterStop, context.Cause(ctx)))
		}
		stack[0] = api.EncodeI32(meterBudget)
	}, nil, []extism.ValueType{extism.ValueTypeI32})
	f.SetNamespace(wasmmeter.ImportModule)
	return f
}
