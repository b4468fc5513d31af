//go:build wasip1

package main

import (
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/extism/go-pdk"
)

// abiVersion is the ABI version this plugin speaks.
const abiVersion = 1

// handshakeInfo is the output of the handshake export. It asks for each
// tool's annotations in project calls (wants) and declares the settings
// keys team and readOnly as this plugin's own, so that wasmhost accepts
// them in server entries and session overrides and passes them on
// (settingsKeys); and it may give tools and prompts names of its own
// (renames).
var handshakeInfo = handshakeMessage{
	ABI:          abiVersion,
	Name:         "team-access",
	Version:      "1.0.0",
	Wants:        []string{"toolAnnotations"},
	SettingsKeys: []string{"team", "readOnly"},
	Renames:      true,
}

// Each export returns 0 with its answer as the Extism output, or 1 with the
// Extism error set: the host then treats the whole call as refused. Both
// end with runtime.Gosched: a Go reactor runs the runtime's own goroutines
// (the garbage collector's workers and sweeper) only when an export's
// goroutine yields, and without them the heap can outgrow the host's
// memory cap after a few hundred large calls.

// The handshake reads the plugin's configuration from its input and
// refuses, refusing the plugin, when it is missing or wrong. Every
// instance gets the same handshake before its first call.
//
//go:wasmexport handshake
func handshake() int32 {
	if err := configure(pdk.Input()); err != nil {
		return fail(fmt.Errorf("handshake: %w", err))
	}
	return output(handshakeInfo)
}

//go:wasmexport canonicalize
func canonicalize() int32 {
	var req canonicalizeRequest
	if err := json.Unmarshal(pdk.Input(), &req); err != nil {
		return fail(fmt.Errorf("canonicalize: malformed request: %w", err))
	}
	return output(canonicalizeAll(&req))
}

//go:wasmexport project
func project() int32 {
	var req projectRequest
	if err := json.Unmarshal(pdk.Input(), &req); err != nil {
		return fail(fmt.Errorf("project: malformed request: %w", err))
	}
	resp, err := projectAll(&req)
	if err != nil {
		return fail(err)
	}
	return output(resp)
}

func output(v any) int32 {
	b, err := json.Marshal(v)
	if err != nil {
		return fail(err)
	}
	pdk.Output(b)
	runtime.Gosched()
	return 0
}

func fail(err error) int32 {
	pdk.SetErrorString(err.Error())
	runtime.Gosched()
	return 1
}
