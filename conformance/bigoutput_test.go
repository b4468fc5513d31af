package conformance

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/metakey"
)

// bigCanonical is metakey.Reference whose canonical forms carry a string of
// 2 MiB ending in tail: the most a plugin's output may hold is 16 MiB a
// call.
type bigCanonical struct {
	metakey.Reference
	tail string
}

func (b *bigCanonical) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	resp, err := b.Reference.Canonicalize(ctx, req)
	if err != nil {
		return nil, err
	}
	for i := range resp.Results {
		if r := &resp.Results[i]; len(r.Canonical) > 0 {
			r.Canonical = []byte(`{"pad":"` + strings.Repeat("x", 2<<20) + b.tail + `"}`)
		}
	}
	return resp, nil
}

// TestHugeAnswersAreCutInReports: a plugin whose canonical forms are
// megabytes long fails its cases with report lines, and Want and Got, of
// at most maxShown bytes and a digest, and the answers kept to compare
// direct and Extism calls are as bounded, answers that differ only at
// their end still told apart. Before, each report line held the whole
// form (the runner printed megabytes per failing case), and RunBothWays
// kept every answer of every case whole until the end of the run: tens of
// MiB a case.
func TestHugeAnswersAreCutInReports(t *testing.T) {
	suites := []*Suite{edgeSuite(t, `
		{"name": "canon", "settings": {}, "canonical": {"trust": null, "alwaysLoadTools": false, "includeTools": null, "excludeTools": []}},
		{"name": "same", "same": [{}, {"trust": null}]}`)}
	r := Run(t.Context(), &bigCanonical{tail: "d"}, suites)
	require.Len(t, r.Results, 2)
	canon := r.Results[0]
	require.False(t, canon.Passed)
	assert.Contains(t, canon.Message, "canonical form differs")
	assert.Less(t, len(canon.Got), maxShown+200)
	assert.True(t, strings.Contains(canon.Got, "bytes in all, sha256"), "Got says it was cut: %.200s…", canon.Got)
	assert.Less(t, len(canon.String()), maxShown+1000, "the report line")
	assert.True(t, r.Results[1].Passed, r.Results[1].String())

	_, kept := run(t.Context(), &bigCanonical{tail: "d"}, suites, true, nil)
	for _, ans := range kept {
		for _, a := range *ans {
			assert.Less(t, len(a.value), maxShown+200, "an answer kept: %s", a.what)
		}
	}

	both := RunBothWays(t.Context(), &bigCanonical{tail: "d"}, &bigCanonical{tail: "e"}, suites)
	same := both.Results[1]
	require.False(t, same.Passed, "forms that differ at their end, two ways")
	assert.Contains(t, same.Message, "direct calls answer differently")
	assert.NotEqual(t, same.Want, same.Got)
	assert.Less(t, len(same.Want), maxShown+200)
	assert.Less(t, len(same.Got), maxShown+200)
}
