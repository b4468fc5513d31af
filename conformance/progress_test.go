package conformance

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/metakey"
)

// TestRunWithProgress: Options.Progress hears each case start (naming it)
// and end (counting it, and its failure), once per way when a run goes
// both ways, and the last report agrees with the run's report.
func TestRunWithProgress(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.json"), `{"suite": "a", "cases": [
  {"name": "passes", "same": [{}, {"excludeTools": null}]},
  {"name": "fails", "differ": [{}, {"excludeTools": []}]}]}`)
	writeFile(t, filepath.Join(dir, "b.json"), `not a suite`)
	suites, err := Load(dir)
	require.NoError(t, err)

	for _, ways := range []int{1, 2} {
		var seen []Progress
		opts := Options{Progress: func(p Progress) { seen = append(seen, p) }}
		var extism *metakey.Reference
		var r *Report
		if ways == 2 {
			extism = &metakey.Reference{}
			r = RunWith(t.Context(), &metakey.Reference{}, extism, suites, opts)
		} else {
			r = RunWith(t.Context(), &metakey.Reference{}, nil, suites, opts)
		}
		require.Len(t, r.Results, 3)
		total := 3 * ways
		require.Len(t, seen, 2*total, "a start and an end per case and way")
		for i, p := range seen {
			assert.Equal(t, total, p.Total)
			assert.Equal(t, (i+1)/2, p.Done, "report %d", i)
			if i%2 == 0 {
				assert.NotEmpty(t, p.File, "a start names the case: %+v", p)
				assert.NotEmpty(t, p.Case, "a start names the case: %+v", p)
			} else {
				assert.Empty(t, p.File+p.Case, "an end names none: %+v", p)
			}
		}
		assert.Equal(t, "passes", seen[0].Case)
		assert.Equal(t, "fails", seen[2].Case)
		assert.Equal(t, "b.json", seen[4].Case, "a file that is not a suite")
		last := seen[len(seen)-1]
		assert.Equal(t, total, last.Done)
		assert.Equal(t, 2*ways, last.Failed, "the failing case and the bad file, each way")
		assert.Equal(t, 2, r.Failed)
	}

	// Without Progress, RunWith is RunBothWays.
	assert.Equal(t, RunBothWays(t.Context(), &metakey.Reference{}, nil, suites), RunWith(t.Context(), &metakey.Reference{}, nil, suites, Options{}))
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}
