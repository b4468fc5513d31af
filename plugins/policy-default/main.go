// Rebuild policy-default.wasm (byte-reproducible, standard Go toolchain; `make
// go-plugins` runs both steps):
//
//	cd plugins/policy-default && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -buildvcs=false -o policy-default.wasm .
//	go run ./internal/wasmpack/cmd/wasmpack plugins/policy-default/policy-default.wasm   # from the repository root
//
// The output is byte-reproducible for a given Go toolchain and go.sum as long
// as VCS stamping is off (GOFLAGS=-buildvcs=false): stamping would write the
// commit into the module.

//go:build wasip1

// Command policy-default is the default wasmhost policy as an Extism plugin
// speaking ABI v1, with the optional project_batch export and the direct
// forms of its exports (direct.go). Each Extism export is a thin wrapper: it
// reads the Extism input, hands it to package internal/policy and writes the
// answer as the Extism output (kernel.go), or sets the Extism error and
// returns 1.
package main

import (
	"runtime"
	"strconv"

	"github.com/extism/go-pdk"
	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/plugins/policy-default/internal/policy"
)

// handshakeJSON is the output of the handshake export (an abi.Handshake).
// canonicalKeys: the policy's key is its canonical JSON, which its
// canonicalize answers therefore write once, without a key
// (policy.Canonicalize).
var handshakeJSON = `{"abi":` + strconv.Itoa(abi.Version) + `,"name":"policy-default","version":"1.0.0","canonicalKeys":true}`

//lint:file-ignore U1000 the exports are called by the host through //go:wasmexport

func main() {}

//go:wasmexport handshake
func handshake() int32 {
	output([]byte(handshakeJSON))
	yield()
	return 0
}

//go:wasmexport canonicalize
func canonicalize() int32 {
	return answer(policy.Canonicalize)
}

//go:wasmexport project
func project() int32 {
	return answer(policy.Project)
}

//go:wasmexport project_batch
func projectBatch() int32 {
	return answer(policy.ProjectBatch)
}

// answer runs fn on the call's input and sets the call's output or error.
func answer(fn func([]byte) ([]byte, error)) int32 {
	out, err := fn(input())
	defer yield()
	if err != nil {
		pdk.SetErrorString(err.Error())
		return 1
	}
	output(out)
	return 0
}

// yield ends every export. A Go reactor runs the runtime's own goroutines
// (the garbage collector's mark workers and its sweeper) only while an
// export runs and its goroutine yields. Without this the collector ran on
// allocation assists alone, and after a few hundred large calls the heap
// outgrew the memory cap and the plugin trapped with "out of memory" (see
// TestGoPluginsReclaimMemory in host).
func yield() { runtime.Gosched() }
