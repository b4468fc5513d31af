package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/metakey"
)

// otherDirect is metakey.Reference with its answers altered the way a
// plugin's direct exports could answer differently from its Extism exports
// and still pass every golden case on its own: keys prefixed (still one
// per settings object, still equal and different where they must be),
// canonical forms re-spaced (the same JSON value in other bytes), refusal
// messages reworded.
type otherDirect struct {
	metakey.Reference
	keys, canonical, refusals bool
}

func (o *otherDirect) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	resp, err := o.Reference.Canonicalize(ctx, req)
	if err != nil {
		return nil, err
	}
	out := &abi.CanonicalizeResponse{Results: make([]abi.CanonicalResult, len(resp.Results))}
	for i, r := range resp.Results {
		switch {
		case r.Error != "":
			if o.refusals {
				r.Error = "direct: " + r.Error
			}
		default:
			if o.keys {
				r.Key = "direct:" + r.Key
			}
			if o.canonical && len(r.Canonical) > 0 {
				var b bytes.Buffer
				if err := json.Indent(&b, r.Canonical, "", " "); err != nil {
					return nil, err
				}
				r.Canonical = b.Bytes()
			}
		}
		out.Results[i] = r
	}
	return out, nil
}

func (o *otherDirect) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	resp, err := o.Reference.Project(ctx, req)
	if err != nil && o.refusals {
		return nil, &reworded{err}
	}
	return resp, err
}

func (o *otherDirect) ProjectBatch(ctx context.Context, req *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error) {
	resp, err := o.Reference.ProjectBatch(ctx, req)
	if err != nil || !o.refusals {
		return resp, err
	}
	for i := range resp.Results {
		if resp.Results[i].Error != "" {
			resp.Results[i].Error = "direct: " + resp.Results[i].Error
		}
	}
	return resp, nil
}

// reworded is a refusal with another message, still a refusal.
type reworded struct{ err error }

func (r *reworded) Error() string { return "direct: " + r.err.Error() }
func (r *reworded) Unwrap() error { return r.err }

// RefusalMessage rewords the message as the batch results are reworded, so
// that each way stays consistent with itself.
func (r *reworded) RefusalMessage() string {
	var rm abi.RefusalMessager
	if errors.As(r.err, &rm) {
		return "direct: " + rm.RefusalMessage()
	}
	return ""
}

// TestRunBothWaysComparesAnswers checks abi/SPEC.md section 5.2: a case
// whose answers differ between direct and Extism calls fails, though each
// way alone passes, with one line naming file, case and both answers.
func TestRunBothWaysComparesAnswers(t *testing.T) {
	suites, err := Load(defaultSuite)
	require.NoError(t, err)
	ref := Run(t.Context(), metakey.Reference{}, suites)
	require.True(t, ref.OK(), "the reference passes its suite")
	byKind := map[Kind]int{}
	for _, res := range ref.Results {
		byKind[res.Kind]++
	}
	assert.Equal(t, ref, RunBothWays(t.Context(), metakey.Reference{}, metakey.Reference{}, suites), "the same answers both ways")

	for _, tc := range []struct {
		name  string
		other *otherDirect
		kinds []Kind // the kinds of case that fail, every case of them
		what  string // in the message of each failure
		want  string // in the want (Extism answer) and, prefixed, the got
		got   string
	}{
		{"keys", &otherDirect{keys: true}, []Kind{KindCanonical, KindSame, KindDiffer},
			"the first canonicalize call's answer for ", "key `", "key `direct:"},
		{"canonical bytes", &otherDirect{canonical: true}, []Kind{KindCanonical, KindSame, KindDiffer},
			"the canonical form the first canonicalize call gave ", "`{\"", `"{\n`},
		{"refusal messages", &otherDirect{refusals: true}, []Kind{KindReject},
			"the first canonicalize call's answer for the settings", `error "`, `error "direct: `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alone := Run(t.Context(), tc.other, suites)
			require.True(t, alone.OK(), "each way alone passes:\n%s", reportText(alone))

			r := RunBothWays(t.Context(), tc.other, metakey.Reference{}, suites)
			want := 0
			for _, k := range tc.kinds {
				want += byKind[k]
			}
			require.Positive(t, want)
			assert.Equal(t, want, r.Failed, reportText(r))
			assert.Equal(t, len(ref.Results)-want, r.Passed)
			for i, res := range r.Results {
				base := ref.Results[i]
				if !slices.Contains(tc.kinds, res.Kind) {
					assert.Equal(t, base, res, "a case whose answers agree passes")
					continue
				}
				assert.False(t, res.Passed, "%s: %s", res.File, res.Case)
				assert.Equal(t, base.File, res.File)
				assert.Equal(t, base.Case, res.Case)
				line := res.String()
				assert.True(t, strings.HasPrefix(line, "FAIL "+res.File+": "+res.Case+" ("+string(res.Kind)+"): direct calls answer differently from Extism calls"), line)
				assert.Contains(t, res.Message, tc.what)
				assert.True(t, strings.HasPrefix(res.Want, tc.want), "want (the Extism answer): %s", res.Want)
				assert.True(t, strings.HasPrefix(res.Got, tc.got), "got (the direct answer): %s", res.Got)
				assert.Contains(t, line, ": want "+oneLine(res.Want)+"; got "+oneLine(res.Got))
			}
		})
	}

	t.Run("the report text", func(t *testing.T) {
		s, err := Load("golden/default/keys.json")
		require.NoError(t, err)
		var text strings.Builder
		r := RunBothWays(t.Context(), &otherDirect{keys: true}, metakey.Reference{}, s)
		require.NoError(t, r.WriteText(&text, false))
		require.Positive(t, r.Failed, "keys.json has canonical, same and differ cases")
		lines := strings.Split(strings.TrimSuffix(text.String(), "\n"), "\n")
		require.Equal(t, r.Failed+1, len(lines), text.String())
		for _, l := range lines[:r.Failed] {
			assert.Regexp(t, "^FAIL golden/default/keys.json: .+ \\((canonical|same|differ)\\): direct calls answer differently from Extism calls \\(abi/SPEC.md section 5.2\\): the first canonicalize call's answer for (the settings|same\\[0\\]|differ\\[0\\]) \\(want: through Extism calls; got: direct calls\\): want key `[^`]*`; got key `direct:[^`]*`$", l)
		}
		assert.Equal(t, r.Summary(), lines[len(lines)-1])
	})
}

func reportText(r *Report) string {
	var b strings.Builder
	_ = r.WriteText(&b, false)
	return b.String()
}

// TestAnswersDiffer checks the comparison of two ways' answers, including
// answers one way lacks, and that nothing is compared when a way did not
// record.
func TestAnswersDiffer(t *testing.T) {
	a := &answers{{"the first projection", `{"tools":[]}`}}
	assert.Nil(t, a.differ(&answers{{"the first projection", `{"tools":[]}`}}))
	assert.Nil(t, a.differ(nil))
	assert.Nil(t, (*answers)(nil).differ(a))

	f := a.differ(&answers{{"the first projection", `{"tools":[1]}`}})
	require.NotNil(t, f)
	assert.Contains(t, f.msg, "the first projection (want: through Extism calls; got: direct calls)")
	assert.Equal(t, `{"tools":[1]}`, f.want)
	assert.Equal(t, `{"tools":[]}`, f.got)

	f = a.differ(&answers{{"the first projection", `{"tools":[]}`}, {"the batch path's answer", "x"}})
	require.NotNil(t, f)
	assert.Equal(t, [2]string{"x", "no answer"}, [2]string{f.want, f.got})
	f = (&answers{}).differ(a)
	require.NotNil(t, f)
	assert.Equal(t, [2]string{`{"tools":[]}`, "no answer"}, [2]string{f.want, f.got})
}

// The child half of TestRunBothWaysTReportsDifferences: it runs only when
// the parent sets the variable, and is expected to fail.
func TestRunBothWaysTChild(t *testing.T) {
	if os.Getenv("CONFORMANCE_BOTHWAYS_CHILD") != "1" {
		t.Skip("run by TestRunBothWaysTReportsDifferences")
	}
	runBothWaysT(t, &otherDirect{keys: true}, metakey.Reference{}, "testdata/runner/mixed.json", "testdata/broken")
}

// TestRunBothWaysTReportsDifferences: the subtests RunT makes for a plugin
// with direct exports fail a case whose answers differ between the two
// ways, as `wasmhost conformance` does, and still report each case and
// each unreadable file on its own.
func TestRunBothWaysTReportsDifferences(t *testing.T) {
	text := failingChild(t, "TestRunBothWaysTChild", "CONFORMANCE_BOTHWAYS_CHILD")
	for _, want := range []string{
		"--- FAIL: TestRunBothWaysTChild/mixed.json/good_canonical ",
		"direct calls answer differently from Extism calls",
		"--- FAIL: TestRunBothWaysTChild/mixed.json/wrong_canonical ",
		"--- PASS: TestRunBothWaysTChild/mixed.json/good_project ",
		"--- FAIL: TestRunBothWaysTChild/broken.json ",
	} {
		assert.Contains(t, text, want)
	}
}
