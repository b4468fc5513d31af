package host

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"unsafe"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmhost/wasmhost/abi"
)

// Direct calls (abi/SPEC.md section 5.2). Through Extism, a guest copies
// its request in and its answer out with one kernel call per eight bytes,
// each an exit from wasm to Go and a call into the kernel module: for a
// canonicalize batch of a thousand settings (about 160 KiB in, 340 KiB out)
// that is some 60,000 host calls, several milliseconds. A plugin that has
// the optional direct exports gets its request written into its own memory
// with one copy, and the host reads the answer with another.

// directCalls are the wazero handles of one instance's direct exports.
type directCalls struct {
	mem   api.Memory
	alloc api.Function
	fns   map[string]api.Function // by Extism export name
	// ctxValues are what extism's host functions (its kernel, logging, the
	// meter) expect in the context of a call, which Plugin.CallWithContext
	// sets for its own calls.
	plugin *extism.Plugin
	kernel api.Module
	stack  [2]uint64
}

// errNoDirect is returned by newDirectCalls when the instance's modules
// cannot be reached.
var errNoDirect = errors.New("direct calls unavailable")

// newDirectCalls resolves the direct exports named in exports (Extism export
// names) on an instance.
func newDirectCalls(ext *extism.Plugin, exports []string) (*directCalls, error) {
	main, kernel, err := extismModules(ext)
	if err != nil {
		return nil, err
	}
	d := &directCalls{
		mem:    main.ExportedMemory("memory"),
		alloc:  main.ExportedFunction(abi.ExportAlloc),
		fns:    make(map[string]api.Function, len(exports)),
		plugin: ext,
		kernel: kernel,
	}
	if d.mem == nil || d.alloc == nil {
		return nil, fmt.Errorf("%w: the module has no exported memory or %s", errNoDirect, abi.ExportAlloc)
	}
	for _, name := range exports {
		f := main.ExportedFunction(name + abi.DirectSuffix)
		if f == nil {
			return nil, fmt.Errorf("%w: the module has no %s", errNoDirect, name+abi.DirectSuffix)
		}
		d.fns[name] = f
	}
	return d, nil
}

// extismModules returns the wazero modules behind an Extism instance: the
// plugin's main module and the Extism kernel. extism go-sdk v1.7.1 has no
// accessor for either (Plugin.Module wraps the main module but exposes only
// export definitions; Plugin.Memory is the kernel's memory), so they are
// read from the unexported fields mainModule and extism. Should a later
// extism rename them, this returns errNoDirect, the plugin runs without
// direct calls, and TestDirectCallsUsed fails so that the upgrade is seen.
func extismModules(ext *extism.Plugin) (main, kernel api.Module, err error) {
	v := reflect.ValueOf(ext).Elem()
	field := func(name string) (api.Module, error) {
		f := v.FieldByName(name)
		if !f.IsValid() || f.Type() != reflect.TypeFor[api.Module]() {
			return nil, fmt.Errorf("%w: extism.Plugin has no field %s of type api.Module", errNoDirect, name)
		}
		m, _ := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(api.Module)
		if m == nil {
			return nil, fmt.Errorf("%w: extism.Plugin.%s is nil", errNoDirect, name)
		}
		return m, nil
	}
	if main, err = field("mainModule"); err != nil {
		return nil, nil, err
	}
	if kernel, err = field("extism"); err != nil {
		return nil, nil, err
	}
	return main, kernel, nil
}

// call makes one direct call of f with input: wasmhost_alloc, one copy in,
// the export. refused reports an answer flagged as a refusal, whose bytes
// are then the message. A trap or exit is returned as wazero reports it;
// an answer outside the plugin's memory or over abi.MaxOutputBytes is
// ErrBadOutput.
//
// out is not a copy: it is the answer where it lies in the plugin's memory,
// valid only until the instance's next call or its release (the plugin
// writes its next answer there, and a released instance may serve another
// call at once). Callers decode it, copying what they keep, before they
// release the instance; an answer of hundreds of KiB is then read once
// instead of copied out and read again.
func (d *directCalls) call(ctx context.Context, f api.Function, input []byte) (out []byte, refused bool, err error) {
	ctx = context.WithValue(ctx, extism.PluginCtxKey("extism"), d.kernel)
	ctx = context.WithValue(ctx, extism.PluginCtxKey("plugin"), d.plugin)
	stack := d.stack[:]
	stack[0] = uint64(len(input))
	if err := d.alloc.CallWithStack(ctx, stack[:1]); err != nil {
		return nil, false, err
	}
	addr := uint32(stack[0])
	if !d.mem.Write(addr, input) {
		return nil, false, fmt.Errorf("%w: %s returned address %d, and %d bytes from it are outside the plugin's memory (%d bytes)",
			ErrBadOutput, abi.ExportAlloc, addr, len(input), d.mem.Size())
	}
	stack[0], stack[1] = uint64(addr), uint64(len(input))
	if err := f.CallWithStack(ctx, stack); err != nil {
		return nil, false, err
	}
	addr, n, refused := abi.DirectResult(stack[0])
	if n > abi.MaxOutputBytes {
		return nil, false, fmt.Errorf("%w: %d bytes of output, limit %d", ErrBadOutput, n, abi.MaxOutputBytes)
	}
	b, ok := d.mem.Read(addr, n)
	if !ok {
		return nil, false, fmt.Errorf("%w: the answer at address %d, %d bytes, is outside the plugin's memory (%d bytes)",
			ErrBadOutput, addr, n, d.mem.Size())
	}
	// A view of the plugin's memory, not a copy: see above.
	return b, refused, nil
}
