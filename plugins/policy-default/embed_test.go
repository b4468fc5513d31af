//go:build !wasip1

package policydefault

import (
	"bytes"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
)

func TestWasmIsEmbedded(t *testing.T) {
	require.True(t, bytes.HasPrefix(Wasm, []byte("\x00asm\x01\x00\x00\x00")), "not a wasm binary module")
	for _, name := range slices.Concat(abi.RequiredExports, abi.OptionalExports) {
		assert.True(t, bytes.Contains(Wasm, []byte(name)), "no %q in the module", name)
	}
}
