// Rebuild nondeterministic.wasm (byte-reproducible, standard Go toolchain; `make
// go-plugins` runs both steps):
//
//	cd testplugins/hostile-go/nondeterministic && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o nondeterministic.wasm .
//	go run ./internal/wasmpack/cmd/wasmpack testplugins/hostile-go/nondeterministic/nondeterministic.wasm   # from the repository root
//
// The output is byte-reproducible for a given Go toolchain and go.sum as long
// as VCS stamping is off (GOFLAGS=-buildvcs=false). `make plugins` rebuilds
// it too.

//go:build wasip1

// Command nondeterministic is a test policy plugin speaking ABI v1 that
// breaks the determinism rule of abi/SPEC.md section 7: it answers like
// the default policy (metakey.Reference), except that every key ends in
// "#N", where N counts the canonicalize calls this instance has served. The
// same settings therefore get a different key from each call (keys within
// one call agree). Projections are deterministic.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/extism/go-pdk"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/metakey"
)

//lint:file-ignore U1000 the exports are called by the host through //go:wasmexport

func main() {}

// handshakeJSON is the output of the handshake export.
const handshakeJSON = `{"abi":1,"name":"nondeterministic","version":"1.0.0"}`

// calls counts the canonicalize calls of this instance: state left in an
// instance that changes its answers.
var calls int

//go:wasmexport handshake
func handshake() int32 {
	pdk.OutputString(handshakeJSON)
	return 0
}

//go:wasmexport canonicalize
func canonicalize() int32 {
	var req abi.CanonicalizeRequest
	if err := json.Unmarshal(pdk.Input(), &req); err != nil {
		return refuse("canonicalize: reading the request: %v", err)
	}
	resp, err := metakey.Reference{}.Canonicalize(context.Background(), &req)
	if err != nil {
		return refuse("canonicalize: %v", err)
	}
	calls++
	for i := range resp.Results {
		if r := &resp.Results[i]; r.Error == "" {
			r.Key += "#" + strconv.Itoa(calls)
		}
	}
	return output(resp)
}

//go:wasmexport project
func project() int32 {
	var req abi.ProjectRequest
	if err := json.Unmarshal(pdk.Input(), &req); err != nil {
		return refuse("project: reading the request: %v", err)
	}
	resp, err := metakey.Reference{}.Project(context.Background(), &req)
	if err != nil {
		return refuse("%s", strings.TrimPrefix(err.Error(), "metakey: "))
	}
	return output(resp)
}

// refuse sets the Extism error and returns the refusal status.
func refuse(format string, args ...any) int32 {
	pdk.SetErrorString(fmt.Sprintf(format, args...))
	return 1
}

// output writes v as the call's JSON output.
func output(v any) int32 {
	out, err := json.Marshal(v)
	if err != nil {
		return refuse("encoding the answer: %v", err)
	}
	pdk.Output(out)
	return 0
}
