package host

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
)

// TestDecodeCanonicalizeKeyIsCanonical covers the compact decoder's
// comparison of a key with its canonical form (keyIsCanonical): a key that
// is the canonical JSON, escaped, is taken without decoding; one that
// differs anywhere, or escapes differently, is decoded as any other key or
// declines the output; either way the result is what decodeStrict gives.
func TestDecodeCanonicalizeKeyIsCanonical(t *testing.T) {
	for _, tt := range []struct {
		out  string
		took bool
	}{
		{`{"results":[{"canonical":{"a":["x"]},"key":"{\"a\":[\"x\"]}"}]}`, true},
		{`{"results":[{"canonical":"q\"b\\s","key":"\"q\\\"b\\\\s\""}]}`, true},
		{`{"results":[{"canonical":{},"key":"{}"},{"canonical":{},"key":"{}"}]}`, true},
		// A prefix of the canonical form, or more than it.
		{`{"results":[{"canonical":{"a":1},"key":"{\"a\":1"}]}`, true},
		{`{"results":[{"canonical":{"a":1},"key":"{\"a\":1}}"}]}`, true},
		// The same bytes once decoded, escaped otherwise: decodeStrict's
		// business.
		{`{"results":[{"canonical":{"a":1},"key":"{\u0022a\":1}"}]}`, false},
		{`{"results":[{"canonical":{"a":1},"key":"{\"a\":1}\/"}]}`, false},
		// Not printable ASCII in the canonical form (and so in the key).
		{`{"results":[{"canonical":{"é":1},"key":"{\"é\":1}"}]}`, false},
		{"{\"results\":[{\"canonical\":{\"a\":\"\t\"},\"key\":\"k\"}]}", false},
		// The key ends early, or never.
		{`{"results":[{"canonical":{"a":1},"key":"{\"a\":`, false},
		{`{"results":[{"canonical":{"a":1},"key":"{\"a\":1}`, false},
	} {
		assert.Equal(t, tt.took, canonAgreesWithStrict(t, []byte(tt.out)), tt.out)
	}

	// The canonical form and key of a result are copies: the output they
	// were read from may be written over (a direct call's answer lies in
	// the plugin's memory, which its next call reuses).
	out := []byte(`{"results":[{"canonical":{"a":["x"]},"key":"{\"a\":[\"x\"]}"}]}`)
	resp, ok := decodeCanonicalizeCompact(out)
	require.True(t, ok)
	for i := range out {
		out[i] = 'z'
	}
	assert.Equal(t, `{"a":["x"]}`, string(resp.Results[0].Canonical))
	assert.Equal(t, `{"a":["x"]}`, resp.Results[0].Key)
}

// canonKeysAgreeWithStrict checks that decodeCanonicalizeCompactKeys, for a
// plugin with canonicalKeys, either declines out or decodes it exactly as
// decodeStrict and then fillCanonicalKeys do, and reports whether it took
// it.
func canonKeysAgreeWithStrict(t testing.TB, out []byte) bool {
	t.Helper()
	got, ok := decodeCanonicalizeCompactKeys(out, true)
	if !ok {
		return false
	}
	var strict abi.CanonicalizeResponse
	require.NoError(t, decodeStrict(out, &strict), "the compact decoder took %q, which decodeStrict refuses", out)
	require.NoError(t, fillCanonicalKeys(&strict), "the compact decoder took %q", out)
	if diff := cmp.Diff(&strict, got); diff != "" {
		t.Fatalf("%q: (-decodeStrict +compact)\n%s", out, diff)
	}
	return true
}

// TestDecodeCanonicalizeCanonicalKeys covers results without a key, which
// only a plugin with canonicalKeys may give (abi/SPEC.md section 4): the
// key is then the canonical form's text, as the plugin wrote it.
func TestDecodeCanonicalizeCanonicalKeys(t *testing.T) {
	for _, tt := range []struct {
		out  string
		took bool
	}{
		{`{"results":[{"canonical":{"a":["x"]}},{"error":"no"},{"canonical":null}]}  `, true},
		{`{"results":[{"canonical":"q\"b\\s"}]}`, true},
		// The decoders keep a key that is there, even one that differs
		// (validation then refuses it: see below).
		{`{"results":[{"canonical":{"a":1},"key":"k"},{"canonical":{"a":1}}]}`, true},
		{`{"results":[{"canonical":{"a":1},"key":""}]}`, true},
		// Not the compact form: left to decodeStrict.
		{`{"results":[{"canonical": {"a":1}}]}`, false},
		{`{"results":[{"canonical":{"é":1}}]}`, true},
		{`{"results":[{"canonical":{"a":1},"error":"x"}]}`, false},
		{`{"results":[{"canonical":{"a":1}`, false},
		{`{"results":[{"canonical":{"a":}}]}`, false},
	} {
		assert.Equal(t, tt.took, canonKeysAgreeWithStrict(t, []byte(tt.out)), tt.out)
	}

	// Without canonicalKeys a result without a key is bad output, on
	// either path; with it, its key is its canonical text, and that text
	// is held to the key's length limit.
	one := &abi.CanonicalizeRequest{Settings: []json.RawMessage{json.RawMessage(`{}`)}}
	for _, out := range []string{`{"results":[{"canonical":{"a":1}}]}`, `{"results":[ {"canonical":{"a":1}} ]}`} {
		var plain, keys Plugin
		keys.handshake.CanonicalKeys = true
		_, err := decodeChecked(one, []byte(out), decodeCanonicalizeCompact, plain.validateCanonicalize)
		assert.ErrorContains(t, err, "neither a key", out)
		resp, err := decodeChecked(one, []byte(out), func(out []byte) (*abi.CanonicalizeResponse, bool) {
			return decodeCanonicalizeCompactKeys(out, true)
		}, keys.validateCanonicalize)
		if assert.NoError(t, err, out) {
			assert.Equal(t, `{"a":1}`, resp.Results[0].Key)
		}
	}
	long := `{"results":[{"canonical":"` + strings.Repeat("x", abi.MaxKeyBytes) + `"}]}`
	var keys Plugin
	keys.handshake.CanonicalKeys = true
	_, err := decodeChecked(one, []byte(long), func(out []byte) (*abi.CanonicalizeResponse, bool) {
		return decodeCanonicalizeCompactKeys(out, true)
	}, keys.validateCanonicalize)
	assert.ErrorContains(t, err, "key is 65538 bytes, limit 65536")

	// A plugin with canonicalKeys has declared its key to be the canonical
	// form's text: a key that differs, even only in white space, is bad
	// output on either path; one that is that text is taken.
	for _, out := range []string{
		`{"results":[{"canonical":{"a":1},"key":"k"}]}`,
		`{"results":[ {"canonical":{"a":1},"key":"k"} ]}`,
		`{"results":[{"canonical":{"a":1},"key":"{\"a\": 1}"}]}`,
	} {
		_, err := decodeChecked(one, []byte(out), func(out []byte) (*abi.CanonicalizeResponse, bool) {
			return decodeCanonicalizeCompactKeys(out, true)
		}, keys.validateCanonicalize)
		assert.ErrorContains(t, err, "key differs from the canonical form", out)
	}
	resp, err := decodeChecked(one, []byte(`{"results":[{"canonical":{"a":1},"key":"{\"a\":1}"}]}`), func(out []byte) (*abi.CanonicalizeResponse, bool) {
		return decodeCanonicalizeCompactKeys(out, true)
	}, keys.validateCanonicalize)
	if assert.NoError(t, err) {
		assert.Equal(t, `{"a":1}`, resp.Results[0].Key)
	}

	// A canonical form is valid JSON even with bytes that are not UTF-8;
	// as a key it must be UTF-8.
	for _, out := range []string{"{\"results\":[{\"canonical\":\"\xff\"}]}", "{\"results\":[ {\"canonical\":\"\xed\xa0\x80\"}]}", "{\"results\":[{\"canonical\":\"\xff\",\"key\":\"\"}]}"} {
		_, ok := decodeCanonicalizeCompactKeys([]byte(out), true)
		assert.False(t, ok, "%q", out)
		_, err := decodeChecked(one, []byte(out), func(out []byte) (*abi.CanonicalizeResponse, bool) {
			return decodeCanonicalizeCompactKeys(out, true)
		}, keys.validateCanonicalize)
		assert.ErrorContains(t, err, "not UTF-8", "%q", out)
	}
}

func FuzzDecodeCanonicalizeCompactKeys(f *testing.F) {
	f.Add([]byte(`{"results":[{"canonical":{"trust":true,"includeTools":["a"]}},{"error":"no \\ way"}]}`))
	f.Add([]byte(`{"results":[{"canonical":[1,{"x":"]"}],"key":"k"},{"canonical":"s"}]}`))
	f.Fuzz(func(t *testing.T, out []byte) {
		canonKeysAgreeWithStrict(t, out)
	})
}
