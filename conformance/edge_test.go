package conformance

// Edge cases of the golden case format (v1) that runner_test.go does not
// cover, from an audit of the runner against the format: cases written by
// others run through it, so each corner of the format is pinned here.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/metakey"
)

// edgeSuite parses one suite file made of cases and fails the test when
// the file as a whole is not a suite.
func edgeSuite(t *testing.T, cases string) *Suite {
	t.Helper()
	s := ParseSuite([]byte(`{"suite": "edge", "cases": [` + cases + `]}`))
	require.NoError(t, s.Err)
	s.File, s.Rel = "edge.json", "edge.json"
	return s
}

// edgeResults runs s against p and returns its results by case name.
func edgeResults(t *testing.T, p abi.Policy, s *Suite) map[string]Result {
	t.Helper()
	r := Run(t.Context(), p, []*Suite{s})
	out := make(map[string]Result, len(r.Results))
	for _, res := range r.Results {
		out[res.Case] = res
	}
	return out
}

// TestSnapshotKeysDifferingInCase: encoding/json matches struct fields
// ignoring case, so {"name": "a", "Name": "b"} would be a tool named "b";
// an item with two keys that differ only in case, at its top or in a field
// decoded into a struct (annotations), is malformed.
func TestSnapshotKeysDifferingInCase(t *testing.T) {
	for _, tc := range []struct{ name, c string }{
		{"tool name", `{"name": "tool", "settings": {"includeTools": ["a"]},
			"snapshot": {"tools": [{"name": "a", "Name": "b"}]},
			"project": {"tools": [{"name": "a", "trust": false, "alwaysLoad": false}]}}`},
		{"prompt name", `{"name": "prompt", "settings": {},
			"snapshot": {"prompts": [{"name": "a", "NAME": "b"}]},
			"project": {"prompts": ["a"]}}`},
		{"resource uri", `{"name": "resource", "settings": {},
			"snapshot": {"resources": [{"uri": "file:///a", "URI": "file:///b"}]},
			"project": {"resources": ["file:///a"]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := edgeSuite(t, tc.c)
			require.Len(t, s.Cases, 1)
			assert.Equal(t, KindMalformed, s.Cases[0].Kind)
			assert.ErrorContains(t, s.Cases[0].Err, "differ only in case")
		})
	}

	// The same inside an item: annotations a plugin may want.
	_, err := DecodeSnapshot([]byte(`{"tools": [{"name": "a", "annotations": {"readOnlyHint": true, "readonlyhint": false}}]}`))
	assert.ErrorContains(t, err, `tools[0]: keys "readOnlyHint" and "readonlyhint" at "annotations" differ only in case`)

	// Free-form fields keep keys that differ in case apart: two schema
	// properties, two _meta keys.
	snap, err := DecodeSnapshot([]byte(`{"tools": [{"name": "a", "_meta": {"k": 1, "K": 2},
		"inputSchema": {"type": "object", "properties": {"Path": {"type": "string"}, "path": {"type": "number"}}}}]}`))
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"k": 1.0, "K": 2.0}, map[string]any(snap.Tools[0].Meta))
}

// TestSnapshotNestedDuplicateKeys: a key given twice anywhere in a snapshot
// item (annotations, which may cross into a plugin, _meta, which the runner
// compares, inputSchema) makes the case malformed, not read as the last one.
func TestSnapshotNestedDuplicateKeys(t *testing.T) {
	for _, item := range []string{
		`{"name": "a", "annotations": {"readOnlyHint": true, "readOnlyHint": false}}`,
		`{"name": "a", "_meta": {"vendor/x": 1, "vendor/x": 2}}`,
		`{"name": "a", "inputSchema": {"type": "object", "type": "string"}}`,
	} {
		s := edgeSuite(t, `{"name": "dup", "settings": {}, "snapshot": {"tools": [`+item+`]},
			"project": {"tools": [{"name": "a", "trust": false, "alwaysLoad": false}]}}`)
		require.Len(t, s.Cases, 1)
		c := s.Cases[0]
		if assert.Equal(t, KindMalformed, c.Kind, "a duplicated key in %s must not pass silently", item) {
			assert.ErrorContains(t, c.Err, "duplicate key")
		}
	}
}

// TestEdgeRejectValue: "reject": true with spacing around it makes a
// reject case (other values are malformed: TestParseMalformedCases).
func TestEdgeRejectValue(t *testing.T) {
	c := parseOne(t, `{"name": "spaced", "settings": {"trust": 1}, "reject" :   true   }`)
	assert.Equal(t, KindReject, c.Kind, "%v", c.Err)
}

// recorder answers as the reference does and keeps the settings bytes of
// every call.
type recorder struct {
	metakey.Reference
	mu        sync.Mutex
	canonical [][]json.RawMessage
	project   []json.RawMessage
}

func (r *recorder) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	r.mu.Lock()
	r.canonical = append(r.canonical, append([]json.RawMessage(nil), req.Settings...))
	r.mu.Unlock()
	return r.Reference.Canonicalize(ctx, req)
}

func (r *recorder) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	r.mu.Lock()
	r.project = append(r.project, req.Settings)
	r.mu.Unlock()
	return r.Reference.Project(ctx, req)
}

// TestEdgeSettingsReachThePolicyRaw: settings go to the policy as written,
// ill-typed, null, not objects, with duplicate keys, and the reference
// refuses each of them; a settings key left out is missing.
func TestEdgeSettingsReachThePolicyRaw(t *testing.T) {
	raws := []string{
		`null`, `[]`, `1`, `"x"`, `{"trust": true, "trust": true}`,
		`{ "includeTools" : [ "a" , 7 ] }`, `{"excludeTools": {}}`, `{"alwaysLoadTools": 1}`,
	}
	var cases []string
	for i, raw := range raws {
		cases = append(cases, `{"name": "r`+string(rune('a'+i))+`", "settings": `+raw+`, "reject": true}`)
	}
	joined := cases[0]
	for _, c := range cases[1:] {
		joined += ", " + c
	}
	s := edgeSuite(t, joined)
	p := &recorder{}
	for name, res := range edgeResults(t, p, s) {
		assert.True(t, res.Passed, "%s: %s", name, res)
	}
	var firstCalls []string
	for _, call := range p.canonical {
		require.Len(t, call, 1)
		firstCalls = append(firstCalls, string(call[0]))
	}
	for _, raw := range raws {
		assert.Contains(t, firstCalls, raw, "canonicalize gets the bytes of the file")
	}
	var projected []string
	for _, s := range p.project {
		projected = append(projected, string(s))
	}
	for _, raw := range raws {
		assert.Contains(t, projected, raw, "project gets the bytes of the file")
	}

	res := edgeResults(t, metakey.Reference{}, edgeSuite(t, `{"name": "null", "settings": null, "canonical": {}}`))["null"]
	assert.False(t, res.Passed)
	assert.Contains(t, res.String(), "refused the settings")
}

// TestEdgeSameDiffer: entries of a group that are not objects are
// settings like any other, passed through (the reference refuses them, so
// the case fails); groups of fewer than two are malformed
// (TestParseMalformedCases).
func TestEdgeSameDiffer(t *testing.T) {
	s := edgeSuite(t, `{"name": "same numbers", "same": [1, 1]}, {"name": "differ mixed", "differ": [{}, "x"]},
		{"name": "same dup keys", "same": [{"trust": true, "trust": true}, {"trust": true}]}`)
	require.Len(t, s.Cases, 3)
	for _, c := range s.Cases {
		assert.NotEqual(t, KindMalformed, c.Kind, c.Name)
	}
	results := edgeResults(t, metakey.Reference{}, s)
	require.Len(t, results, 3)
	for name, res := range results {
		assert.False(t, res.Passed, name)
		assert.Contains(t, res.Message, "the policy refused", name)
	}
}

// TestEdgeProjectItems: tools and prompts named "", a tool with only a
// name, a resource with only a uri, and project keys left out.
func TestEdgeProjectItems(t *testing.T) {
	s := edgeSuite(t, `
		{"name": "bare items", "settings": {"trust": true},
		 "snapshot": {"tools": [{"name": ""}, {"name": "a"}], "prompts": [{"name": ""}, {"name": "p"}], "resources": [{"uri": ""}, {"uri": "u"}]},
		 "project": {"tools": [{"name": "a", "trust": true, "alwaysLoad": false}], "prompts": ["p"], "resources": ["", "u"]}},
		{"name": "only resources", "settings": {"includeTools": []},
		 "snapshot": {"tools": [{"name": "a"}], "resources": [{"uri": "u"}]},
		 "project": {"resources": ["u"]}},
		{"name": "empty snapshot", "settings": {}, "snapshot": {}, "project": {}},
		{"name": "order matters", "settings": {},
		 "snapshot": {"tools": [{"name": "a"}, {"name": "b"}]},
		 "project": {"tools": [{"name": "b", "trust": false, "alwaysLoad": false}, {"name": "a", "trust": false, "alwaysLoad": false}]}}`)
	results := edgeResults(t, metakey.Reference{}, s)
	for _, name := range []string{"bare items", "only resources", "empty snapshot"} {
		assert.True(t, results[name].Passed, results[name].String())
	}
	assert.False(t, results["order matters"].Passed)
	assert.Contains(t, results["order matters"].Message, "projection differs")

	for _, raw := range []string{
		`{"name": "x", "settings": {}, "snapshot": {"tools": null}, "project": {}}`,
		`{"name": "x", "settings": {}, "snapshot": {}, "project": {"tools": null}}`,
		`{"name": "x", "settings": {}, "snapshot": {}, "project": null}`,
		`{"name": "x", "settings": {}, "snapshot": {"resources": [{"name": "no uri"}]}, "project": {}}`,
	} {
		assert.Equal(t, KindMalformed, parseOne(t, raw).Kind, raw)
	}
}

// customCanonical is a policy with a canonical form of its own, written
// with other spacing, number spelling and key order than the golden file.
type customCanonical struct{ metakey.Reference }

func (customCanonical) Canonicalize(_ context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	resp := &abi.CanonicalizeResponse{}
	for range req.Settings {
		resp.Results = append(resp.Results, abi.CanonicalResult{Key: "k", Canonical: json.RawMessage(`{ "n" : 1.0, "l" : [ 1, "\u0061" ] }`)})
	}
	return resp, nil
}

// TestEdgeCanonicalAsJSONValue: key order, spacing, escapes and number
// spelling do not matter, array order does.
func TestEdgeCanonicalAsJSONValue(t *testing.T) {
	s := edgeSuite(t, `
		{"name": "equal", "settings": {}, "canonical": {"l": [1e0, "a"], "n": 1}},
		{"name": "array order", "settings": {}, "canonical": {"n": 1, "l": ["a", 1]}},
		{"name": "extra key", "settings": {}, "canonical": {"n": 1, "l": [1, "a"], "x": null}},
		{"name": "number value", "settings": {}, "canonical": {"n": 1.0000001, "l": [1, "a"]}}`)
	results := edgeResults(t, customCanonical{}, s)
	assert.True(t, results["equal"].Passed, results["equal"].String())
	for _, name := range []string{"array order", "extra key", "number value"} {
		assert.False(t, results[name].Passed, name)
		assert.Contains(t, results[name].Message, "canonical form differs", name)
	}
}

// TestEdgeDuplicateNamesAfterUnescaping: names are compared as decoded
// strings, so "a" and "\u0061" are one name; a duplicated name fails the
// later case only, and names differing in case or space are distinct.
func TestEdgeDuplicateNamesAfterUnescaping(t *testing.T) {
	s := edgeSuite(t, `{"name": "a", "same": [{}, {}]}, {"name": "\u0061", "same": [{}, {}]},
		{"name": "A", "same": [{}, {}]}, {"name": "a ", "same": [{}, {}]}`)
	require.Len(t, s.Cases, 4)
	assert.Equal(t, KindSame, s.Cases[0].Kind)
	assert.Equal(t, KindMalformed, s.Cases[1].Kind)
	assert.ErrorContains(t, s.Cases[1].Err, "duplicate case name")
	assert.Equal(t, KindSame, s.Cases[2].Kind)
	assert.Equal(t, KindSame, s.Cases[3].Kind)

	// A case key spelled with an escape is that key.
	c := parseOne(t, `{"name": "esc", "se\u0074tings": {}, "canonical": {}}`)
	assert.Equal(t, KindCanonical, c.Kind, "%v", c.Err)
	c = parseOne(t, `{"name": "esc", "settings": {}, "se\u0074tings": {}, "canonical": {}}`)
	assert.Equal(t, KindMalformed, c.Kind)
}

// TestEdgeLoadDirectory: a directory is read recursively, each directory
// in byte order of its entries (a subdirectory "a" before "a-b.json" and
// "a.json", as filepath.WalkDir does), only *.json files (not *.JSON, not
// *.txt; hidden ones included); a file named explicitly is read whatever
// its name; a *.json entry that cannot be read stops the load.
func TestEdgeLoadDirectory(t *testing.T) {
	tmp := t.TempDir()
	suite := []byte(`{"suite": "s", "cases": [{"name": "c", "same": [{}, {}]}]}`)
	write := func(rel string) {
		p := filepath.Join(tmp, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, suite, 0o644))
	}
	for _, rel := range []string{"a.json", "a-b.json", "a/x.json", "B.json", ".hidden.json", "up.JSON", "notes.txt", "d/e/f.json", "empty/keep.txt"} {
		write(rel)
	}
	suites, err := Load(tmp)
	require.NoError(t, err)
	var rels []string
	for _, s := range suites {
		rels = append(rels, s.Rel)
	}
	assert.Equal(t, []string{".hidden.json", "B.json", "a/x.json", "a-b.json", "a.json", "d/e/f.json"}, rels)

	suites, err = Load(filepath.Join(tmp, "notes.txt"))
	require.NoError(t, err)
	require.Len(t, suites, 1)
	assert.NoError(t, suites[0].Err)

	_, err = Load(filepath.Join(tmp, "empty"))
	assert.ErrorIs(t, err, ErrNoSuites, "a directory without *.json is an error, not 0 passed")

	require.NoError(t, os.Symlink("nowhere", filepath.Join(tmp, "d", "zz.json")))
	_, err = Load(tmp)
	assert.ErrorIs(t, err, os.ErrNotExist, "a suite file that cannot be read stops the run (exit 2)")
}

// TestEdgeFileProblemsDoNotHideOthers: a file that is not JSON (a BOM and
// nothing else, a UTF-16 BOM), lacks "suite", or has an unknown top-level
// key is one failed case of kind file; the next file still runs, and the
// summary stays the last line.
func TestEdgeFileProblemsDoNotHideOthers(t *testing.T) {
	tmp := t.TempDir()
	files := map[string]string{
		"1.json": "\uFEFF",
		"2.json": "\xff\xfe{}",
		"3.json": `{"description": "no suite", "cases": []}`,
		"4.json": `{"suite": "s", "cases": [], "$schema": "x"}`,
		"5.json": `{"suite": "s", "cases": [{"name": "ok", "same": [{}, {"trust": null}]}]}`,
	}
	for name, data := range files {
		require.NoError(t, os.WriteFile(filepath.Join(tmp, name), []byte(data), 0o644))
	}
	suites, err := Load(tmp)
	require.NoError(t, err)
	r := Run(t.Context(), metakey.Reference{}, suites)
	require.Len(t, r.Results, 5)
	for _, res := range r.Results[:4] {
		assert.Equal(t, KindFile, res.Kind, res.String())
		assert.False(t, res.Passed)
	}
	assert.True(t, r.Results[4].Passed, r.Results[4].String())
	assert.Equal(t, "1 passed, 4 failed", r.Summary())
}
