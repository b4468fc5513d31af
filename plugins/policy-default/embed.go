//go:build !wasip1

// Package policydefault embeds the default wasmhost policy plugin, built from
// the wasip1 sources in this directory by the command at the top of main.go.
// The host loads it when no other policy plugin is configured.
package policydefault

import _ "embed"

// Wasm is the compiled policy-default.wasm module (ABI v1).
//
//go:embed policy-default.wasm
var Wasm []byte
