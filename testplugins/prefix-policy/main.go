// Rebuild prefix-policy.wasm (byte-reproducible, standard Go toolchain; `make
// go-plugins` runs both steps):
//
//	cd testplugins/prefix-policy && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -buildvcs=false -o prefix-policy.wasm .
//	go run ./internal/wasmpack/cmd/wasmpack testplugins/prefix-policy/prefix-policy.wasm   # from the repository root
//
// The output is byte-reproducible for a given Go toolchain and go.sum as long
// as VCS stamping is off (GOFLAGS=-buildvcs=false): stamping would write the
// commit into the module.

//go:build wasip1

// Command prefix-policy is a test policy plugin with rules of its own (see
// package internal/prefix): includeTools as name prefixes, deny by default,
// read-only tools trusted. It speaks the same ABI v1 as the default policy.
package main

import (
	"encoding/json"
	"runtime"

	"github.com/extism/go-pdk"
	"github.com/wasmhost/wasmhost/testplugins/prefix-policy/internal/prefix"
)

//lint:file-ignore U1000 the exports are called by the host through //go:wasmexport

func main() {}

//go:wasmexport handshake
func handshake() int32 {
	return answer(func([]byte) ([]byte, error) { return json.Marshal(&prefix.Handshake) })
}

//go:wasmexport canonicalize
func canonicalize() int32 { return answer(prefix.Canonicalize) }

//go:wasmexport project
func project() int32 { return answer(prefix.Project) }

// answer runs fn on the call's input and sets the call's output or error.
// It yields before returning: a Go reactor runs the runtime's own
// goroutines (the garbage collector's workers and sweeper) only when an
// export's goroutine yields, and without them the heap can outgrow the
// memory cap after a few hundred large calls.
func answer(fn func([]byte) ([]byte, error)) int32 {
	defer runtime.Gosched()
	out, err := fn(pdk.Input())
	if err != nil {
		pdk.SetErrorString(err.Error())
		return 1
	}
	pdk.Output(out)
	return 0
}
