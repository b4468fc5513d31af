package host

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/wasmbin"
)

// An Import is one import of a module.
type Import struct {
	Module string `json:"module"`
	Name   string `json:"name"`
	// Kind is "func", "table", "memory", "global" or "tag".
	Kind string `json:"kind"`
	// Signature is the function type for a func import, e.g. "(i64) -> i32".
	Signature string `json:"signature,omitempty"`
}

func (i Import) String() string {
	s := fmt.Sprintf("%s %q %q", i.Kind, i.Module, i.Name)
	if i.Signature != "" {
		s += " " + i.Signature
	}
	return s
}

// nativeMagics are the first bytes of the native executable and library
// formats a plugin built for the wrong target comes out as.
var nativeMagics = []struct {
	magic  string
	format string
}{
	{"\x7fELF", "an ELF executable or library"},
	{"MZ", "a Windows executable or DLL"},
	{"\xcf\xfa\xed\xfe", "a Mach-O executable or library"},
	{"\xce\xfa\xed\xfe", "a Mach-O executable or library"},
	{"\xca\xfe\xba\xbe", "a Mach-O universal binary"},
}

// nativeHint explains a file that is a native binary rather than
// WebAssembly, the result of building a plugin without a wasm target: ""
// for anything else.
func nativeHint(b []byte) string {
	for _, m := range nativeMagics {
		if bytes.HasPrefix(b, []byte(m.magic)) {
			return fmt.Sprintf(" (%s, built for this machine: build the plugin for WebAssembly, for Go with GOOS=wasip1 GOARCH=wasm)", m.format)
		}
	}
	return ""
}

// An Export is one export of a module.
type Export struct {
	Name string `json:"name"`
	// Kind is "func", "table", "memory", "global" or "tag".
	Kind string `json:"kind"`
	// Signature is the function type for a func export, e.g. "() -> i32".
	Signature string `json:"signature,omitempty"`
}

// checkHeader reports whether b starts like a core WebAssembly module.
func checkHeader(b []byte) error {
	switch {
	case len(b) < 4 || !bytes.Equal(b[:4], wasmbin.Header[:4]):
		n := min(len(b), 4)
		return fmt.Errorf("%w: starts with %q, not the magic \"\\x00asm\"%s", ErrNotWasm, b[:n], nativeHint(b))
	case len(b) < 8:
		return fmt.Errorf("%w: truncated after the magic number", ErrNotWasm)
	case !wasmbin.HasHeader(b):
		return fmt.Errorf("%w: binary version/layer % x, want 01 00 00 00 (a core module, not a component)", ErrNotWasm, b[4:8])
	}
	return nil
}

// moduleInfo is what the host reads from a module's sections: its imports
// and exports with function signatures, and its tables.
type moduleInfo struct {
	imports []Import
	exports []Export
	tables  []wasmbin.Limits
}

// parseModule reads a module's imports, exports and tables with
// wasmbin.Decode, which runs before wazero sees the module and allocates
// nothing in proportion to a count it has not checked against the bytes
// left.
func parseModule(b []byte) (*moduleInfo, error) {
	if err := checkHeader(b); err != nil {
		return nil, err
	}
	m, err := wasmbin.Decode(b)
	if err != nil {
		return nil, err
	}
	sig := func(typeIdx uint32) string {
		if int64(typeIdx) < int64(len(m.Types)) {
			return m.Types[typeIdx].String()
		}
		return "?"
	}
	info := &moduleInfo{tables: m.Tables}
	for _, imp := range m.Imports {
		i := Import{Module: imp.Module, Name: imp.Name, Kind: wasmbin.ExternKindName(imp.Kind)}
		if imp.Kind == wasmbin.ExternFunc {
			i.Signature = sig(imp.Type)
		}
		info.imports = append(info.imports, i)
	}
	for _, exp := range m.Exports {
		e := Export{Name: exp.Name, Kind: wasmbin.ExternKindName(exp.Kind)}
		if exp.Kind == wasmbin.ExternFunc {
			if t, ok := m.FuncType(exp.Index); ok {
				e.Signature = t.String()
			}
		}
		info.exports = append(info.exports, e)
	}
	slices.SortFunc(info.exports, func(a, b Export) int { return strings.Compare(a.Name, b.Name) })
	return info, nil
}

// parseTables returns the tables a module defines.
func parseTables(b []byte) ([]wasmbin.Limits, error) {
	info, err := parseModule(b)
	if err != nil {
		return nil, err
	}
	return info.tables, nil
}

// Host import modules the sandbox provides.
const (
	moduleExtismEnv = "extism:host/env"
	moduleWASI      = "wasi_snapshot_preview1"
)

// extismEnvFuncs lists the functions extism go-sdk v1.7.1 exports from
// "extism:host/env" (see instantiateEnvModule in its host.go). The memory
// and I/O functions forward to the Extism kernel; config_get finds an empty
// config, var_set panics (vars are disabled), http_request panics (no
// allowed hosts), the log functions reach Options.Logger.
var extismEnvFuncs = map[string]bool{
	"alloc": true, "free": true, "load_u8": true, "input_load_u8": true,
	"store_u64": true, "store_u8": true, "input_set": true, "output_set": true,
	"input_length": true, "input_offset": true, "output_length": true,
	"output_offset": true, "length": true, "length_unsafe": true, "reset": true,
	"error_set": true, "error_get": true, "memory_bytes": true,
	"input_load_u64": true, "load_u64": true, "config_get": true,
	"var_get": true, "var_set": true, "http_request": true,
	"http_status_code": true, "http_headers": true, "get_log_level": true,
	"log_trace": true, "log_debug": true, "log_info": true, "log_warn": true,
	"log_error": true,
}

// wasiFuncs lists the functions wazero's wasi_snapshot_preview1 exports,
// read once from wazero itself.
var wasiFuncs = sync.OnceValues(func() (map[string]bool, error) {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	cm, err := wasi_snapshot_preview1.NewBuilder(r).Compile(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing WASI functions: %w", err)
	}
	names := map[string]bool{}
	for name := range cm.ExportedFunctions() {
		names[name] = true
	}
	return names, nil
})

// checkImports returns ErrUnknownImport naming every import the sandbox
// does not provide.
func checkImports(imports []Import) error {
	wasi, err := wasiFuncs()
	if err != nil {
		return err
	}
	var bad []string
	gojs := false // whether an import of module "gojs" was explained
	for _, imp := range imports {
		var ok bool
		switch imp.Module {
		case moduleExtismEnv:
			ok = imp.Kind == "func" && extismEnvFuncs[imp.Name]
		case moduleWASI:
			ok = imp.Kind == "func" && wasi[imp.Name]
		}
		if !ok {
			what := "function"
			if imp.Kind != "func" {
				what = imp.Kind
			}
			item := fmt.Sprintf("module %q %s %q", imp.Module, what, imp.Name)
			if imp.Module == "env" && imp.Name == "abort" {
				// AssemblyScript's default abort handler; its build
				// option --use abort=... replaces it.
				item += " (AssemblyScript: build with --use abort=... as docs/plugins.md shows)"
			}
			if imp.Module == "gojs" && !gojs {
				// Go's GOOS=js port imports dozens of these: say once
				// what they mean.
				gojs = true
				item += " (a Go build for GOOS=js: build with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared)"
			}
			bad = append(bad, item)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s (the host provides only %q and %q functions)",
			ErrUnknownImport, strings.Join(bad, ", "), moduleExtismEnv, moduleWASI)
	}
	return nil
}

// nearExport returns the name of a function export that is probably a
// misspelling of name: the same but for case, '-' or '_', or at most two
// letters apart. It returns "" when there is none.
func nearExport(exports []Export, name string) string {
	fold := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "-", "_") }
	for _, e := range exports {
		if e.Kind == "func" && e.Name != name && fold(e.Name) == fold(name) {
			return e.Name
		}
	}
	for _, e := range exports {
		if e.Kind == "func" && e.Name != name && editDistance(fold(e.Name), fold(name), 2) <= 2 {
			return e.Name
		}
	}
	return ""
}

// editDistance returns the Levenshtein distance between a and b, counted
// in bytes, or limit+1 once it is sure to exceed limit.
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d > limit || -d > limit {
		return limit + 1
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		best := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			best = min(best, cur[j])
		}
		if best > limit {
			return limit + 1
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// isCommand reports whether the module is a WASI command: it exports a
// _start function and no _initialize, as Go builds one without
// -buildmode=c-shared.
func (m *moduleInfo) isCommand() bool {
	has := func(name string) bool {
		return slices.ContainsFunc(m.exports, func(e Export) bool { return e.Name == name && e.Kind == "func" })
	}
	return has("_start") && !has("_initialize")
}

// exportsMemory reports whether the module exports a memory named
// "memory", where direct calls exchange their messages.
func (m *moduleInfo) exportsMemory() bool {
	return slices.ContainsFunc(m.exports, func(e Export) bool { return e.Name == "memory" && e.Kind == "memory" })
}

// presentExports returns the names among names that exports has, of any
// kind.
func presentExports(exports []Export, names []string) []string {
	var out []string
	for _, name := range names {
		if slices.ContainsFunc(exports, func(e Export) bool { return e.Name == name }) {
			out = append(out, name)
		}
	}
	return out
}

// checkExports returns ErrMissingExport naming every required export that
// is absent or not a function of the type abi.ExportSignature gives.
func checkExports(exports []Export, required []string) error {
	var missing, wrong []string
	for _, name := range required {
		i := slices.IndexFunc(exports, func(e Export) bool { return e.Name == name })
		switch {
		case i < 0:
			if near := nearExport(exports, name); near != "" {
				name += fmt.Sprintf(" (the module exports %q: export names are exact and case-sensitive)", near)
			}
			missing = append(missing, name)
		case exports[i].Kind != "func":
			wrong = append(wrong, fmt.Sprintf("%s is a %s, not a function", name, exports[i].Kind))
		case exports[i].Signature != abi.ExportSignature(name):
			wrong = append(wrong, fmt.Sprintf("%s has signature %s, want %s", name, exports[i].Signature, abi.ExportSignature(name)))
		}
	}
	var parts []string
	if len(missing) > 0 {
		parts = append(parts, "missing "+strings.Join(missing, ", "))
	}
	parts = append(parts, wrong...)
	if len(parts) > 0 {
		return fmt.Errorf("%w: %s", ErrMissingExport, strings.Join(parts, "; "))
	}
	return nil
}
