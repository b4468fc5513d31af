package host

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
)

// realBatchOutputs returns raw project_batch outputs of the default plugin
// for random batches.
func realBatchOutputs(t testing.TB, n int) [][]byte {
	t.Helper()
	p := sharedDefault(t)
	rng := rand.New(rand.NewPCG(7, 8))
	var outputs [][]byte
	for range n {
		in, err := json.Marshal(randomProjectBatch(rng, 1+rng.IntN(30)))
		require.NoError(t, err)
		err = p.call(context.Background(), abi.ExportProjectBatch, in, func(out []byte) error {
			outputs = append(outputs, bytes.Clone(out))
			return nil
		})
		require.NoError(t, err)
	}
	return outputs
}

// agreeWithStrict checks that decodeBatchCompact either declines out or
// decodes it exactly as decodeStrict does, and reports whether it took it.
func agreeWithStrict(t testing.TB, out []byte) bool {
	t.Helper()
	return agrees(t, out, decodeBatchCompact)
}

// agrees checks that fast either declines out or decodes it exactly as
// decodeStrict decodes it into a W, and reports whether fast took it.
func agrees[W any](t testing.TB, out []byte, fast func([]byte) (*W, bool)) bool {
	t.Helper()
	got, ok := fast(out)
	if !ok {
		return false
	}
	var strict W
	require.NoError(t, decodeStrict(out, &strict), "the compact decoder took %q, which decodeStrict refuses", out)
	if diff := cmp.Diff(&strict, got); diff != "" {
		t.Fatalf("%q: (-decodeStrict +compact)\n%s", out, diff)
	}
	return true
}

func TestDecodeBatchCompact(t *testing.T) {
	outputs := realBatchOutputs(t, 30)
	for _, out := range outputs {
		require.True(t, agreeWithStrict(t, out), "the default plugin's output takes the compact path: %q", out)
	}

	// Mutations: each is declined, or decoded as decodeStrict decodes it.
	rng := rand.New(rand.NewPCG(9, 10))
	const junk = ` {}[],:"\0159-.eftnrux`
	var took, declined int
	mutations := 300 // of each output
	if testing.Short() {
		mutations = 60
	}
	for _, out := range outputs {
		for range mutations {
			m := bytes.Clone(out)
			i := rng.IntN(len(m))
			switch rng.IntN(4) {
			case 0:
				m = append(m[:i:i], append([]byte{junk[rng.IntN(len(junk))]}, m[i:]...)...)
			case 1:
				m = append(m[:i:i], m[i+1:]...)
			case 2:
				m[i] = junk[rng.IntN(len(junk))]
			default:
				j := i + rng.IntN(len(m)-i)
				m = append(m[:j:j], append(bytes.Clone(m[i:j]), m[j:]...)...)
			}
			if agreeWithStrict(t, m) {
				took++
			} else {
				declined++
			}
		}
	}
	t.Logf("mutations: %d decoded on the compact path, %d declined", took, declined)
	assert.Positive(t, took)
	assert.Positive(t, declined)
}

func TestDecodeBatchCompactForms(t *testing.T) {
	for _, tt := range []struct {
		out  string
		want []abi.BatchResult // nil: declined
	}{
		{`{"results":[]}`, []abi.BatchResult{}},
		{`{"results":[{}]}    `, []abi.BatchResult{{}}},
		{`{"results":[{"error":"no"},{"error":""}]}`, []abi.BatchResult{{Error: "no"}, {Error: ""}}},
		{`{"results":[{"tools":[{"i":0},{"i":2,"trust":true},{"i":3,"alwaysLoad":true},{"i":4,"trust":false,"alwaysLoad":true}],"prompts":[1],"resources":[0,10]}]}`,
			[]abi.BatchResult{{ProjectResponse: &abi.ProjectResponse{
				Tools:   []abi.ToolDecision{{Index: 0}, {Index: 2, Trust: true}, {Index: 3, AlwaysLoad: true}, {Index: 4, AlwaysLoad: true}},
				Prompts: []int{1}, Resources: []int{0, 10},
			}}}},
		{`{"results":[{"tools":[],"resources":[]}]}`, []abi.BatchResult{{ProjectResponse: &abi.ProjectResponse{Tools: []abi.ToolDecision{}, Resources: []int{}}}}},
		{`{"results":[{"prompts":[123456789]}]}`, []abi.BatchResult{{ProjectResponse: &abi.ProjectResponse{Prompts: []int{123456789}}}}},
		{`{"results":[{"error":"a\"b\\c\\\"d"}]}`, []abi.BatchResult{{Error: `a"b\c\"d`}}},
		// Declined: the strict decoder decides these.
		{` {"results":[]}`, nil},
		{`{"results":null}`, nil},
		{`{"results":[{"error":"a\nb"}]}`, nil},
		{`{"results":[{"error":"a\u0041"}]}`, nil},
		{`{"results":[{"error":"a\"}]}`, nil},
		{`{"results":[{"error":"é"}]}`, nil},
		{`{"results":[{"error":"no","tools":[]}]}`, nil},
		{`{"results":[{"prompts":[0],"tools":[]}]}`, nil},
		{`{"results":[{"prompts":[0],"prompts":[1]}]}`, nil},
		{`{"results":[{"prompts":[01]}]}`, nil},
		{`{"results":[{"prompts":[1234567890]}]}`, nil},
		{`{"results":[{"prompts":[-1]}]}`, nil},
		{`{"results":[{"prompts":[1.5]}]}`, nil},
		{`{"results":[{"tools":[{"i":1,"alwaysLoad":true,"trust":true}]}]}`, nil},
		{`{"results":[{"tools":[{"i":1,"trust":null}]}]}`, nil},
		{`{"results":[{"tools":[{"trust":true}]}]}`, nil},
		{`{"results":[{"tools":[{"i":1}],}]}`, nil},
		{`{"results":[{}]}x`, nil},
		{`{"results":[{}],"extra":1}`, nil},
	} {
		resp, ok := decodeBatchCompact([]byte(tt.out))
		got := resp.Results
		if tt.want == nil {
			assert.False(t, ok, tt.out)
			continue
		}
		require.True(t, ok, tt.out)
		assert.Equal(t, tt.want, got, tt.out)
		agreeWithStrict(t, []byte(tt.out))
	}
}

func FuzzDecodeBatchCompact(f *testing.F) {
	for _, out := range realBatchOutputs(f, 5) {
		f.Add(out)
	}
	f.Add([]byte(`{"results":[{"tools":[{"i":1,"trust":true}],"prompts":[0]},{"error":"no"},{}]}`))
	f.Add([]byte(`{"tools":[{"i":1,"trust":true}],"prompts":[0]}`))
	f.Fuzz(func(t *testing.T, out []byte) {
		agreeWithStrict(t, out)
		projectAgreesWithStrict(t, out)
	})
}

// projectAgreesWithStrict is agreeWithStrict for decodeProjectCompact.
func projectAgreesWithStrict(t testing.TB, out []byte) bool {
	t.Helper()
	return agrees(t, out, decodeProjectCompact)
}

func TestDecodeProjectCompact(t *testing.T) {
	for _, tt := range []struct {
		out  string
		took bool
	}{
		{`{}`, true},
		{`{"tools":[{"i":0},{"i":2,"trust":true,"alwaysLoad":true}],"prompts":[1],"resources":[0,10]}  `, true},
		{`{"tools":[]}`, true},
		{`{"error":"no"}`, false},
		{`{"results":[]}`, false},
		{`{"prompts":[0],"tools":[]}`, false},
		{`{"tools":[{"i":1}]}x`, false},
		{` {}`, false},
	} {
		assert.Equal(t, tt.took, projectAgreesWithStrict(t, []byte(tt.out)), tt.out)
	}
	// Every single project output of the default plugin takes the fast path.
	p := loadDefault(t, Options{})
	rng := rand.New(rand.NewPCG(9, 10))
	var outputs [][]byte
	for range 50 {
		batch := randomProjectBatch(rng, 1)
		in, err := json.Marshal(batch.ItemRequest(0))
		require.NoError(t, err)
		err = p.call(context.Background(), abi.ExportProject, in, func(out []byte) error {
			outputs = append(outputs, bytes.Clone(out))
			return nil
		})
		if err != nil {
			require.ErrorIs(t, err, ErrPluginRefused)
		}
	}
	require.NotEmpty(t, outputs)
	for _, out := range outputs {
		assert.True(t, projectAgreesWithStrict(t, out), "a project output of the default plugin was declined: %q", out)
	}
}

// canonAgreesWithStrict is agreeWithStrict for decodeCanonicalizeCompact.
func canonAgreesWithStrict(t testing.TB, out []byte) bool {
	t.Helper()
	return agrees(t, out, decodeCanonicalizeCompact)
}

func TestDecodeCanonicalizeCompact(t *testing.T) {
	for _, tt := range []struct {
		out  string
		took bool
	}{
		{`{"results":[]}`, true},
		{`{"results":[{"canonical":{"a":[1,"x]}"]},"key":"k\"\\"},{"error":"no"}]}  `, true},
		{`{"results":[{"canonical":null,"key":"n"},{"canonical":"s,}","key":"s"},{"canonical":12,"key":"x"}]}`, true},
		{`{"results":[{"canonical":{"a":1},"key":""}]}`, true},
		{`{"results":[{"error":""}]}`, false},
		{`{"results":[{"canonical":{"a":1}}]}`, false},
		{`{"results":[{"key":"k","canonical":{}}]}`, false},
		{`{"results":[{"canonical":{"a":},"key":"k"}]}`, false},
		{`{"results":[{"canonical":{"a":1},"key":"\u0041"}]}`, false},
		{`{"results":[{"canonical":{"a":1},"key":"é"}]}`, false},
		{`{"results":[{"canonical":{"a":1},"key":"k","extra":1}]}`, false},
		{`{"results":[{"canonical":{"a":1},"key":"k"}],"x":1}`, false},
		{` {"results":[]}`, false},
		{`{"results":[{"canonical":{"a":1},"key":"k"}]}x`, false},
		{`{"results":[{"canonical":1}`, false},
	} {
		assert.Equal(t, tt.took, canonAgreesWithStrict(t, []byte(tt.out)), tt.out)
	}
	// The default plugin's outputs take the fast path (ASCII settings); it
	// has canonicalKeys.
	p := loadDefault(t, Options{})
	in := []byte(`{"settings":[{},{"includeTools":["b(x)","a","<b>"],"trust":true},{"trust":"no"},null,{"excludeTools":["q\"uote","back\\slash"]}]}`)
	var out []byte
	require.NoError(t, p.call(context.Background(), abi.ExportCanonicalize, in, func(o []byte) error {
		out = bytes.Clone(o)
		return nil
	}))
	assert.True(t, canonKeysAgreeWithStrict(t, out), "declined %q", out)
}

func FuzzDecodeCanonicalizeCompact(f *testing.F) {
	f.Add([]byte(`{"results":[{"canonical":{"trust":true,"includeTools":["a"]},"key":"{\"trust\":true}"},{"error":"no \\ way"}]}`))
	f.Add([]byte(`{"results":[{"canonical":[1,{"x":"]"}],"key":"k"}]}`))
	f.Fuzz(func(t *testing.T, out []byte) {
		canonAgreesWithStrict(t, out)
	})
}
