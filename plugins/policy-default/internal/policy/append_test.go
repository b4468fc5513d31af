package policy

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
)

// TestAppendCanonicalize checks that AppendCanonicalize appends exactly
// Canonicalize's answer, keeps what dst held, and on error gives dst back
// as it was.
func TestAppendCanonicalize(t *testing.T) {
	req := benchCanonicalizeRequest(50)
	want, err := Canonicalize(req)
	require.NoError(t, err)
	got, err := AppendCanonicalize([]byte("prefix"), req)
	require.NoError(t, err)
	assert.Equal(t, "prefix"+string(want), string(got))

	got, err = AppendCanonicalize([]byte("prefix"), []byte(`{"settings":[{}`))
	require.Error(t, err)
	assert.Equal(t, "prefix", string(got))
}

// TestAppendCanonicalizeReusesItsBuffer checks that a caller passing its
// last answer's buffer back makes AppendCanonicalize allocate next to
// nothing (its scratch lists, well under a KiB, against some 700 KiB for
// the answer of a fresh buffer): the plugin's direct export does so,
// because garbage costs a Go WebAssembly guest dearly
// (host.TestDefaultDirectCanonicalizeMakesNoGarbage checks the plugin
// itself).
func TestAppendCanonicalizeReusesItsBuffer(t *testing.T) {
	req := benchCanonicalizeRequest(1000)
	out, err := AppendCanonicalize(nil, req)
	require.NoError(t, err)
	const runs = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		out, err = AppendCanonicalize(out[:0], req)
	}
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	perCall := (after.TotalAlloc - before.TotalAlloc) / runs
	assert.Less(t, perCall, uint64(1<<10), "bytes allocated per call")
}

// withKeys checks that no result of a canonicalize answer carries a key
// (the plugin's handshake declares canonicalKeys, so the key is the
// canonical form) and gives each result with a canonical form its text as
// key, as the host does (abi/SPEC.md section 4).
func withKeys(t testing.TB, resp abi.CanonicalizeResponse) abi.CanonicalizeResponse {
	t.Helper()
	for i := range resp.Results {
		r := &resp.Results[i]
		require.Empty(t, r.Key, "result %d carries a key", i)
		if r.Error == "" {
			r.Key = string(r.Canonical)
		}
	}
	return resp
}
