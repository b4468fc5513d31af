package host

import (
	"errors"

	"github.com/wasmhost/wasmhost/abi"
)

// Load refusals. Load, LoadFile, LoadEmbedded and Inspect wrap these; the
// message names the plugin and the detail (digests, versions, imports,
// exports).
var (
	// ErrNotWasm is returned when the bytes do not start with the
	// WebAssembly magic number and binary version 1 (for example a text
	// file, an empty file or a component-model binary).
	ErrNotWasm = errors.New("not a WebAssembly module")
	// ErrDigestMismatch is returned when Options.PinSHA256 is set and the
	// SHA-256 of the bytes differs from it (or the pin is not a hex
	// SHA-256). The check runs before the bytes are compiled.
	ErrDigestMismatch = errors.New("wasm digest does not match the pinned SHA-256")
	// ErrHandshake is returned when the handshake export fails (refusal,
	// trap, timeout), or its output is not a well-formed ABI v1 handshake.
	// A failing call also wraps the call error (ErrPluginRefused, ...).
	ErrHandshake = errors.New("bad handshake")
	// ErrABIVersion is returned when the handshake reports an ABI version
	// other than abi.Version; the message names both versions.
	ErrABIVersion = errors.New("unsupported ABI version")
	// ErrMissingExport is returned when the module lacks one of the exports
	// in abi.RequiredExports, or exports it, or one of the optional exports
	// in abi.OptionalExports, with a signature other than the one
	// abi.ExportSignature gives for it; the message names each of them.
	ErrMissingExport = errors.New("missing or mistyped export")
	// ErrUnknownImport is returned when the module imports something the
	// host does not provide: any module other than "extism:host/env" and
	// "wasi_snapshot_preview1", or a name those modules lack. The message
	// names each module and name.
	ErrUnknownImport = errors.New("unknown import")
	// ErrMemoryLimit is returned when the module declares more linear
	// memory than Options.MemoryLimitBytes allows; the message gives both.
	ErrMemoryLimit = errors.New("module needs more memory than the limit")
	// ErrUnsupportedWasm is returned when the module uses a WebAssembly
	// feature the host does not run (abi/SPEC.md section 6.3 lists those it
	// does): every plugin is metered, and a construct the meter does not
	// know could escape it. The message names the construct and where it
	// is.
	ErrUnsupportedWasm = errors.New("unsupported WebAssembly")
	// ErrModuleLimit is returned when the module is past one of the load
	// limits of abi/SPEC.md section 6.3 (its size, a function's size,
	// blocks or nesting, a table without a maximum or too large for the
	// memory limit), or does not compile within Options.CompileTimeout.
	// The message names the limit.
	ErrModuleLimit = errors.New("module past a load limit")
	// ErrCacheDir is returned when Options.CacheDir cannot be created or
	// used as a compilation cache; the message names the directory. It is
	// the host's setting at fault, not the plugin.
	ErrCacheDir = errors.New("cannot use the compilation cache directory")
)

// Call failures, returned by Plugin.Canonicalize, Plugin.Project and
// Plugin.ProjectBatch (and wrapped in ErrHandshake at load). Each message
// names the plugin and the export.
var (
	// ErrPluginTimeout is returned when a call runs past the call timeout
	// (Options.CallTimeout). The instance is discarded. When the caller's
	// own context ends first, the call returns that context's error
	// instead.
	ErrPluginTimeout = errors.New("plugin call timed out")
	// ErrPluginTrap is returned when a call traps (unreachable, out of
	// bounds access, out of memory, a Go panic in the guest), calls a host
	// function the sandbox refuses (HTTP, vars), or the guest runtime exits
	// (WASI proc_exit with any code). The instance is discarded.
	ErrPluginTrap = errors.New("plugin trapped")
	// ErrBadOutput is returned when a call's output breaks ABI v1: more than
	// abi.MaxOutputBytes, not a single JSON object of the export's output
	// type, failing abi.ValidateCanonicalize, abi.ValidateProject or
	// abi.ValidateProjectBatch, or a status and error message that disagree.
	// The instance is discarded.
	ErrBadOutput = errors.New("plugin returned bad output")
	// ErrPluginRefused is returned when the plugin refuses the input: a
	// non-zero status with an Extism error message, which the error quotes.
	// The instance stays in the pool. It wraps abi.ErrRefused, so that
	// abi.ProjectAll and other callers holding an abi.Policy tell a refusal
	// from a failure.
	ErrPluginRefused error = pluginRefused{}
	// ErrClosed is returned by calls made after Plugin.Close started, and by
	// calls that Close terminated.
	ErrClosed = errors.New("plugin is closed")
)

// pluginRefused is the type of ErrPluginRefused, which wraps abi.ErrRefused
// under a message of its own.
type pluginRefused struct{}

func (pluginRefused) Error() string { return "plugin refused the input" }
func (pluginRefused) Unwrap() error { return abi.ErrRefused }

// A refusedError is the error of one call the plugin refused. It wraps
// ErrPluginRefused and keeps the plugin's message as quoted (see
// refusalText), which a per-item refusal of ProjectBatch reports alone.
type refusedError struct{ msg string }

func (e *refusedError) Error() string { return ErrPluginRefused.Error() + ": " + e.msg }

// RefusalMessage returns the plugin's message (cut as project_batch results
// are), for abi.RefusalMessager.
func (e *refusedError) RefusalMessage() string { return e.msg }
func (e *refusedError) Unwrap() error          { return ErrPluginRefused }
