package host

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
