//go:build !wasip1

package policydefault

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmhost/wasmhost/abi"
)

func TestWasmIsEmbedded(t *testing.T) {
	require.True(t, bytes.HasPrefix(Wasm, []byte("\x00asm\x01\x00\x00\x00")), "not a wasm binary module")
	// The export names also appear in the module's strings (its error
	// messages), so look at its exports.
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	m, err := r.CompileModule(ctx, Wasm)
	require.NoError(t, err)
	exports := m.ExportedFunctions()
	for _, name := range slices.Concat(abi.RequiredExports, abi.OptionalExports) {
		if f := exports[name]; assert.NotNil(t, f, "no export %q", name) {
			assert.Equal(t, abi.ExportSignature(name), signature(f), name)
		}
	}
}

// signature formats a function type as abi.ExportSignature does.
func signature(f api.FunctionDefinition) string {
	names := func(types []api.ValueType) []string {
		var out []string
		for _, t := range types {
			out = append(out, api.ValueTypeName(t))
		}
		return out
	}
	results := names(f.ResultTypes())
	res := "(" + strings.Join(results, ", ") + ")"
	if len(results) == 1 {
		res = results[0]
	}
	return "(" + strings.Join(names(f.ParamTypes()), ", ") + ") -> " + res
}

// TestDigest: SHA256 is the digest of the embedded module. `make
// go-plugins` writes it after each rebuild.
func TestDigest(t *testing.T) {
	sum := sha256.Sum256(Wasm)
	require.Equal(t, hex.EncodeToString(sum[:]), SHA256, "digest.go is stale: run make go-plugins")
}
