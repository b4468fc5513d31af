// Package wasmmeter rewrites a WebAssembly module so that it counts down a
// budget of fuel and calls back into the host whenever the budget runs out.
//
// [Instrument] adds a mutable i32 global, the fuel, and an import
// ImportModule.ImportName ("wasmhost:meter" "tick"). Each function entry
// and each loop body decrements the fuel, and calls tick once it is spent;
// tick checks the call's context and returns the next budget. Bulk memory
// and table instructions are charged before they run, one unit per 16
// bytes or 2 elements. Every reference to a defined function is
// renumbered for the new import; other sections are copied byte for byte.
//
// The rewriter refuses (ErrUnsupported, ErrLimit, malformed) what it
// cannot meter or prove harmless. That covers opcodes wazero v1 does not
// accept with its default features plus tail calls and atomics,
// out-of-range indexes, and counts larger than the bytes that hold them. It
// also covers functions past MaxBodyBytes, MaxNesting, MaxBlocks,
// MaxCompileWork and MaxLocals, and growable tables without a maximum. A host that runs only instrumented modules can turn
// wazero's CloseOnContextDone off. It reads and writes bytes only
// (internal/wasmbin). Why it works this way: docs/design.md.
package wasmmeter

import (
	"errors"
	"fmt"

	"github.com/wasmhost/wasmhost/internal/wasmbin"
)

const (
	// ImportModule is the module name of the function import that Instrument
	// adds.
	ImportModule = "wasmhost:meter"
	// ImportName is the name of that import. Its type is () -> (i32): the host
	// checks whether the call must stop (it panics or otherwise aborts the
	// call if so) and returns the next budget. A result below 1 makes the
	// next check call it again.
	ImportName = "tick"
)

// Version names what Instrument writes: the same input, budget and Version
// give the same bytes, so a host may keep instrumented modules under it.
// Bump it whenever Instrument's output changes; TestVersionNamesOutput
// fails until you do. It also names the limits below: a module kept under
// a Version passed that Version's checks.
const Version = 2

// Limits of what Instrument accepts, so that neither the rewrite nor
// wazero's compiler (whose time grows with the square of a function's
// block nesting) nor its decoder (which allocates what a module's counts
// ask for) can be made to take unbounded time or memory by a small module.
// A module past one of them is refused with ErrLimit.
const (
	// MaxBodyBytes bounds the size of one function body. The largest body
	// of the Go plugins in this repository is under 64 KiB.
	MaxBodyBytes = 1 << 20
	// MaxNesting bounds the depth of nested blocks, loops and ifs in one
	// function. Go's code generator nests a block per resume point of a
	// function: the deepest of the Go plugins here nests 550.
	MaxNesting = 2048
	// MaxBlocks bounds the blocks, loops and ifs of one function. wazero's
	// compile time grows with the square of their number (4,096 sibling
	// blocks that branch out take about 2 s on a loaded 2-core server);
	// the most of a function of the Go plugins here is 799.
	MaxBlocks = 4096
	// MaxCompileWork bounds the sum over a module's functions of the
	// square of their blocks (MaxBlocks), which wazero's compile time
	// follows: about 10 million for the Go plugins here, and 2^26 would
	// take some 7 s to compile on that server.
	MaxCompileWork = 1 << 26
	// MaxLocals bounds the locals one function declares (not counting its
	// parameters), as web browsers do; wazero allocates a byte for each
	// before reading the body.
	MaxLocals = 50000
)

// ErrLimit is returned, wrapped with the place in the message, when the
// module is past one of the limits above.
var ErrLimit = errors.New("wasmmeter: module past a limit")

// ErrUnsupported is returned, wrapped with the place (section, function
// index, byte offset in the input) in the message, when the module uses an
// instruction or construct that Instrument does not know, or when it already
// imports from ImportModule (it is instrumented already). Such a module
// cannot be metered: a host must refuse it, not run it unmetered.
var ErrUnsupported = errors.New("wasmmeter: unsupported module")

// ErrMalformed is returned, wrapped with the place in the message, when the
// input is not a well-formed WebAssembly binary (truncated, bad LEB128,
// out-of-range index, inconsistent sizes). wazero would reject such a module
// too.
var ErrMalformed = errors.New("wasmmeter: malformed module")

// maxInput bounds the input size so that the scanner's "bad position"
// sentinel, plus any immediate width, never overflows an int.
const maxInput = 1 << 30

// bad is a position past any valid input; scanners return it on failure so
// that their loops stop without a branch for every immediate.
const bad = maxInput + 1

// section is one section of the input: in[start:body] is its header, in[body:end]
// its content.
type section struct {
	id               byte
	start, body, end int
}

// rewriter holds the state of one Instrument call.
type rewriter struct {
	in  []byte
	out []byte
	err error

	sections []section
	secBuf   [16]section

	nTypes      uint32 // types in the input
	tickType    uint32 // type index of () -> (i32), maybe == nTypes (appended)
	nImpFuncs   uint32 // imported functions; also the index of tick
	nImpGlobals uint32
	nGlobals    uint32 // imported + defined; also the index of the fuel global
	nFuncs      uint32 // defined functions (function section)
	nAllFuncs   uint32 // imported + defined functions, before the rewrite
	codeSize    int    // content size of the code section
	blocks      uint64 // the sum of the squares of each body's blocks
	unbounded   bool   // some table of the table section has no maximum

	// Where the scanner is, for error messages.
	fidx uint32 // function index in the input
	base int    // offset in the input of the current body

	seqBuf [48]byte
	seq    []byte // the fuel check

	typeParams []uint32 // parameters of each type (scanTypes)
	funcParams []uint32 // parameters of each defined function (scanFunctions)
}

// Instrument returns a new module that behaves as wasm does, except that it
// imports the function ImportModule.ImportName, of type () -> (i32), and
// has a mutable i32 fuel global, initialised to budget, that every function
// entry and every loop iteration decrements. When a check finds the fuel
// below 1, it calls the import and stores its result as the new fuel, so
// the first call of the import comes at check budget+1 and, while it
// returns budget, one comes every budget checks after that. A bulk memory
// or table instruction is charged in proportion to its length (see the
// package doc) and calls the import first when its charge is at least the
// fuel left.
//
// The input is not modified. The output is deterministic: the same input
// and budget always give the same bytes. Errors wrap ErrUnsupported or
// ErrMalformed. Instrument is safe for concurrent use.
func Instrument(wasm []byte, budget int32) ([]byte, error) {
	if len(wasm) >= maxInput {
		return nil, fmt.Errorf("%w: module of %d bytes is too large", ErrUnsupported, len(wasm))
	}
	r := &rewriter{in: wasm}
	if err := r.scanSections(); err != nil {
		return nil, err
	}
	r.seq = r.seqFor()
	if err := r.emit(budget); err != nil {
		return nil, err
	}
	return r.out, nil
}

// malformed records (once) and returns an ErrMalformed error at offset off
// of the input.
func (r *rewriter) malformed(off int, format string, args ...any) error {
	return r.fail(ErrMalformed, off, format, args...)
}

// unsupported records (once) and returns an ErrUnsupported error at offset
// off of the input.
func (r *rewriter) unsupported(off int, format string, args ...any) error {
	return r.fail(ErrUnsupported, off, format, args...)
}

func (r *rewriter) fail(kind error, off int, format string, args ...any) error {
	if r.err == nil {
		r.err = fmt.Errorf("%w: at offset %#x: %s", kind, off, fmt.Sprintf(format, args...))
	}
	return r.err
}

// codeFail records an error inside the body of function r.fidx, at offset
// off of the body, and returns bad.
func (r *rewriter) codeFail(kind error, off int, format string, args ...any) int {
	if r.err == nil {
		r.err = fmt.Errorf("%w: function %d at offset %#x: %s", kind, r.fidx, r.base+off, fmt.Sprintf(format, args...))
	}
	return bad
}

// seqFor returns the fuel check for r's fuel global and tick function:
//
//	global.get $fuel
//	i32.const 1
//	i32.lt_s
//	if
//	  call $tick
//	  global.set $fuel
//	end
//	global.get $fuel
//	i32.const 1
//	i32.sub
//	global.set $fuel
//
// It is stack-neutral and, while fuel remains, costs a load, a compare and a
// not-taken branch, a decrement and a store.
func (r *rewriter) seqFor() []byte {
	s := r.seqBuf[:0]
	s = append(s, wasmbin.OpGlobalGet)
	s = wasmbin.AppendU32(s, r.nGlobals)
	s = append(s, wasmbin.OpI32Const, 1, wasmbin.OpI32LtS, wasmbin.OpIf, wasmbin.BlockEmpty, wasmbin.OpCall)
	s = wasmbin.AppendU32(s, r.nImpFuncs)
	s = append(s, wasmbin.OpGlobalSet)
	s = wasmbin.AppendU32(s, r.nGlobals)
	s = append(s, wasmbin.OpEnd, wasmbin.OpGlobalGet)
	s = wasmbin.AppendU32(s, r.nGlobals)
	s = append(s, wasmbin.OpI32Const, 1, wasmbin.OpI32Sub, wasmbin.OpGlobalSet)
	return wasmbin.AppendU32(s, r.nGlobals)
}

// skipLEB returns the position after the LEB128 number at b[p:], which may
// take at most max bytes, or bad.
func skipLEB(b []byte, p, max int) int {
	if w := wasmbin.Width(b, p, max); w != 0 {
		return p + w
	}
	return bad
}
