// Package wasmbin reads and writes the WebAssembly binary format for the
// rest of wasmhost: LEB128 numbers, names, section headers, a decoder of
// the sections the host inspects (types, imports, functions, tables,
// exports), and named constants for section ids, value types, external
// kinds and opcodes.
//
// It owns only the format. The host's checks (host), the data-segment
// packer (internal/wasmpack) and the metering rewriter
// (internal/wasmmeter) build on it and decide what to accept. Readers take
// a byte slice and a position and return the value with its width, or a
// width of 0 when the input is truncated or malformed, following wazero's
// decoder on what it accepts; they never allocate in proportion to a count
// read from the input.
package wasmbin
