//go:build !wasip1

// Package policydefault embeds the default wasmhost policy plugin, built from
// the wasip1 sources in this directory by the command at the top of main.go.
// The daemon and the commands load it (host.LoadEmbedded) when no other
// policy plugin is configured; package host itself does not import it.
package policydefault

import _ "embed"

// Name is the name the embedded plugin is loaded under, in logs and
// errors.
const Name = "embedded:policy-default"

// Wasm is the compiled policy-default.wasm module (ABI v1).
//
//go:embed policy-default.wasm
var Wasm []byte
