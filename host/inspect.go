package host

import (
	"context"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/wasmpack"
)

// An Inspection is what Inspect learned about a wasm module and whether
// Load would accept it.
type Inspection struct {
	// SHA256 is the hex SHA-256 of the bytes, the value for a pin.
	SHA256 string `json:"sha256"`
	// Size is the length of the bytes.
	Size int `json:"size"`
	// DataSegments is the number of data segments; Packed is how many
	// `wasmhost pack` would leave (the same when packing would not help).
	// A plugin built with Go has tens of thousands until packed, and every
	// load decodes them one by one. Both are 0 when the data section cannot
	// be read.
	DataSegments int `json:"dataSegments"`
	Packed       int `json:"packedSegments"`
	// Metered reports whether the host stops this module's runaway calls
	// by metering (package internal/wasmmeter). A module the host loads
	// is always metered: one the rewriter cannot meter is refused.
	Metered bool `json:"metered"`
	// Imports and Exports are the module's, exports sorted by name; empty
	// when the bytes did not compile.
	Imports []Import `json:"imports"`
	Exports []Export `json:"exports"`
	// OptionalExports names the optional ABI exports (abi.OptionalExports)
	// the module has with the right type, e.g. "project_batch"; empty when
	// it has none.
	OptionalExports []string `json:"optionalExports"`
	// Handshake is the decoded handshake output, when the handshake export
	// could be called and returned a JSON object.
	Handshake *abi.Handshake `json:"handshake,omitempty"`
	// Accepted reports whether Load (default Options, no pin) accepts the
	// module; Reason says why not.
	Accepted bool   `json:"accepted"`
	Reason   string `json:"reason,omitempty"`
	// Err is the error Load would return (it wraps the sentinel, e.g.
	// ErrABIVersion); nil when accepted.
	Err error `json:"-"`
}

// Inspect runs Load's checks on wasm with default Options and reports what
// it found, for `wasmhost inspect`. name names the module in the refusal
// text, as LoadFile's path does (usually the file it was read from).
// Refusals are reported in the Inspection; the error is non-nil only when
// ctx ended.
func Inspect(ctx context.Context, name string, wasm []byte) (*Inspection, error) {
	return inspect(ctx, name, wasm, Options{}, nil)
}

// InspectThen is Inspect, and then, when Load's checks pass, calls try
// with the loaded plugin before it is closed (a caller's own trial calls,
// such as the daemon makes before it serves with a plugin): an error of
// try makes the module not accepted, with that error.
func InspectThen(ctx context.Context, name string, wasm []byte, try func(context.Context, *Plugin) error) (*Inspection, error) {
	return inspect(ctx, name, wasm, Options{}, try)
}

// InspectCached is InspectThen with a compilation cache in cacheDir (as
// Options.CacheDir; "" for none), so that inspecting a large plugin twice
// compiles it once. The limits stay the defaults: the cache changes how
// long the load takes, not what it decides, except that a directory that
// cannot be used is a refusal wrapping ErrCacheDir.
func InspectCached(ctx context.Context, name string, wasm []byte, cacheDir string, try func(context.Context, *Plugin) error) (*Inspection, error) {
	return inspect(ctx, name, wasm, Options{CacheDir: cacheDir}, try)
}

// inspect is InspectThen with Options (tests pass a CacheDir).
func inspect(ctx context.Context, name string, wasm []byte, opts Options, try func(context.Context, *Plugin) error) (*Inspection, error) {
	insp := &Inspection{}
	if _, st, err := wasmpack.Pack(wasm, wasmpack.DefaultGap); err == nil {
		insp.DataSegments, insp.Packed = st.SegmentsBefore, st.SegmentsAfter
	}
	p, err := load(ctx, name, wasm, "", opts, insp)
	if p != nil {
		defer func() { _ = p.Close(context.Background()) }()
	}
	insp.Imports, insp.Exports = nonNil(insp.Imports), nonNil(insp.Exports)
	insp.OptionalExports = nonNil(insp.OptionalExports)
	if err == nil {
		h := p.Handshake()
		insp.Handshake = &h
		if try != nil {
			err = try(ctx, p)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		insp.Err, insp.Reason = err, err.Error()
		return insp, nil
	}
	insp.Accepted = true
	return insp, nil
}
