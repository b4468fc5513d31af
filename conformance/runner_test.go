package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
)

// parseOne parses a suite of cases and returns its last case.
func parseOne(t *testing.T, cases string) *Case {
	t.Helper()
	s := edgeSuite(t, cases)
	require.NotEmpty(t, s.Cases)
	return s.Cases[len(s.Cases)-1]
}

func TestParseKinds(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		kind Kind
	}{
		{`{"name": "c", "settings": {}, "canonical": {"x": 1}}`, KindCanonical},
		{`{"name": "s", "same": [{}, {"trust": null}]}`, KindSame},
		{`{"name": "d", "differ": [{}, {"trust": true}, {"trust": false}]}`, KindDiffer},
		{`{"name": "p", "settings": {}, "snapshot": {}, "project": {}}`, KindProject},
		{`{"name": "r", "settings": {"trust": "x"}, "reject": true}`, KindReject},
	} {
		c := parseOne(t, tc.raw)
		assert.Equal(t, tc.kind, c.Kind, "%s: %v", tc.raw, c.Err)
		assert.NoError(t, c.Err)
	}
}

func TestParseKeepsSettingsBytes(t *testing.T) {
	settings := `{ "trust" : "false",  "trust": true, "includeTools": ["\u00e9", "a(b)"] }`
	c := parseOne(t, `{"name": "r", "settings": `+settings+`, "reject": true}`)
	require.Equal(t, KindReject, c.Kind, "%v", c.Err)
	assert.Equal(t, settings, string(c.Settings))

	c = parseOne(t, `{"name": "s", "same": [ {"a" :1}, [ ] ]}`)
	require.Equal(t, KindSame, c.Kind, "%v", c.Err)
	assert.Equal(t, `{"a" :1}`, string(c.Group[0]))
	assert.Equal(t, `[ ]`, string(c.Group[1]))
}

func TestParseMalformedCases(t *testing.T) {
	for _, tc := range []struct {
		raw, msg string
	}{
		{`{"name": "typo", "settings": {}, "canonicl": {}}`, `unknown key "canonicl"`},
		{`{"name": "none", "settings": {}}`, "keys of no kind"},
		{`{"name": "two", "settings": {}, "canonical": {}, "reject": true}`, "several kinds: canonical, reject"},
		{`{"name": "half project", "settings": {}, "project": {}}`, `needs "snapshot"`},
		{`{"name": "no settings", "canonical": {}}`, `needs "settings"`},
		{`{"name": "stray settings", "settings": {}, "same": [{}, {}]}`, `"settings" does not belong in a same case`},
		{`{"name": "short same", "same": [{}]}`, "two or more"},
		{`{"name": "empty same", "same": []}`, "two or more"},
		{`{"name": "short differ", "differ": [{}]}`, "two or more"},
		{`{"name": "null same", "same": null}`, "expected an array"},
		{`{"name": "differ not array", "differ": {}}`, "expected an array, got an object"},
		{`{"name": "reject false", "settings": {}, "reject": false}`, "must be true"},
		{`{"name": "reject 1", "settings": {}, "reject": 1}`, "must be true"},
		{`{"name": "reject string", "settings": {}, "reject": "true"}`, "must be true"},
		{`{"name": "reject null", "settings": {}, "reject": null}`, "must be true"},
		{`{"name": "reject array", "settings": {}, "reject": [true]}`, "must be true"},
		{`{"name": "reject object", "settings": {}, "reject": {}}`, "must be true"},
		{`{"name": "dup key", "settings": {}, "canonical": {}, "canonical": {}}`, `duplicate key "canonical"`},
		{`{"settings": {}, "canonical": {}}`, `missing "name"`},
		{`{"name": 3, "settings": {}, "canonical": {}}`, "name: expected a string"},
		{`{"name": "", "settings": {}, "canonical": {}}`, "name is empty"},
		{`[1]`, "expected an object"},
		{`{"name": "tool without name", "settings": {}, "snapshot": {"tools": [{"description": "x"}]}, "project": {}}`, `snapshot: tools[0]: missing "name"`},
		{`{"name": "resource uri", "settings": {}, "snapshot": {"resources": [{"uri": 1}]}, "project": {}}`, "resources[0].uri: expected a string"},
		{`{"name": "snapshot key", "settings": {}, "snapshot": {"tool": []}, "project": {}}`, `unknown key "tool"`},
		{`{"name": "project key", "settings": {}, "snapshot": {}, "project": {"tool": []}}`, `project: unknown key "tool"`},
		{`{"name": "project tool", "settings": {}, "snapshot": {}, "project": {"tools": [{"name": "a", "trust": true}]}}`, `missing "alwaysLoad"`},
		{`{"name": "project flag", "settings": {}, "snapshot": {}, "project": {"tools": [{"name": "a", "trust": 1, "alwaysLoad": false}]}}`, "trust: expected a boolean"},
		{`{"name": "project prompts", "settings": {}, "snapshot": {}, "project": {"prompts": ["a", 2]}}`, "prompts[1]: expected a string"},
	} {
		c := parseOne(t, tc.raw)
		if assert.Equal(t, KindMalformed, c.Kind, tc.raw) {
			assert.ErrorContains(t, c.Err, tc.msg, tc.raw)
		}
	}
}

func TestParseDuplicateNames(t *testing.T) {
	s := ParseSuite([]byte(`{"suite": "t", "cases": [
		{"name": "a", "settings": {}, "canonical": {}},
		{"name": "b", "settings": {}, "canonical": {}},
		{"name": "a", "settings": {}, "canonical": {}},
		{"settings": {}, "canonical": {}}
	]}`))
	require.NoError(t, s.Err)
	require.Len(t, s.Cases, 4)
	assert.Equal(t, KindCanonical, s.Cases[0].Kind)
	assert.Equal(t, KindCanonical, s.Cases[1].Kind)
	assert.Equal(t, KindMalformed, s.Cases[2].Kind)
	assert.ErrorContains(t, s.Cases[2].Err, "duplicate case name (first used by cases[0])")
	assert.Equal(t, "cases[3]", s.Cases[3].Name)
}

func TestParseBadFiles(t *testing.T) {
	for _, tc := range []struct {
		data, msg string
	}{
		{"{\"suite\": \"x\",\n \"cases\": [,]}", "not valid JSON: line 2, column"},
		{``, "not valid JSON"},
		{`[]`, "not a suite object: expected an object, got an array"},
		{`{"cases": []}`, `missing "suite"`},
		{`{"suite": "x"}`, `missing "cases"`},
		{`{"suite": 1, "cases": []}`, "suite: expected a string"},
		{`{"suite": "x", "cases": {}}`, "cases: expected an array"},
		{`{"suite": "x", "cases": [], "extra": 1}`, `unknown top-level key "extra"`},
		{`{"suite": "x", "suite": "y", "cases": []}`, `duplicate key "suite"`},
	} {
		s := ParseSuite([]byte(tc.data))
		assert.ErrorContains(t, s.Err, tc.msg, tc.data)
		assert.Empty(t, s.Cases)
	}
}

func TestLoadOrderAndErrors(t *testing.T) {
	suites, err := Load("testdata/load", "testdata/runner/mixed.json")
	require.NoError(t, err)
	var got []string
	for _, s := range suites {
		got = append(got, s.Rel+"="+s.File)
	}
	want := []string{
		"a/y.json=" + filepath.Join("testdata/load/a/y.json"),
		"a/z.json=" + filepath.Join("testdata/load/a/z.json"),
		"b.json=" + filepath.Join("testdata/load/b.json"),
		"mixed.json=testdata/runner/mixed.json",
	}
	assert.Empty(t, cmp.Diff(want, got), "(-want +got)")

	_, err = Load("testdata/does-not-exist")
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.ErrorContains(t, err, "testdata/does-not-exist")

	_, err = Load(t.TempDir())
	assert.ErrorIs(t, err, ErrNoSuites)

	_, err = Load()
	assert.Error(t, err)
}

// caseOutcome is what a test expects of one result.
type caseOutcome struct {
	passed   bool
	contains []string // substrings of Result.String()
}

func checkReport(t *testing.T, r *Report, want map[string]caseOutcome) {
	t.Helper()
	seen := map[string]bool{}
	for _, res := range r.Results {
		w, ok := want[res.Case]
		if !ok {
			continue
		}
		seen[res.Case] = true
		assert.Equal(t, w.passed, res.Passed, "%s", res)
		for _, s := range w.contains {
			assert.Contains(t, res.String(), s)
		}
	}
	for name := range want {
		assert.True(t, seen[name], "no result for case %q", name)
	}
}

func TestRunAgainstReference(t *testing.T) {
	suites, err := Load("testdata/runner/mixed.json")
	require.NoError(t, err)
	r := Run(t.Context(), metakey.Reference{}, suites)
	checkReport(t, r, map[string]caseOutcome{
		"good canonical": {passed: true},
		"good canonical, spacing and key order differ": {passed: true},
		"wrong canonical": {contains: []string{
			`FAIL testdata/runner/mixed.json: wrong canonical (canonical): canonical form differs: want {"trust":true,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}; got {"trust":false,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}`,
		}},
		"array order matters":             {contains: []string{`want {"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":["b","a"]}`, `"excludeTools":["a","b"]}`}},
		"good same":                       {passed: true},
		"wrong same":                      {contains: []string{"same[0] and same[1] got different keys: want `{\"trust\":null,", "; got `{\"trust\":false,"}},
		"good differ":                     {passed: true},
		"wrong differ":                    {contains: []string{"differ[0] and differ[1] got the same key"}},
		"good project":                    {passed: true},
		"missing project keys mean empty": {passed: true},
		"wrong project": {contains: []string{
			`projection differs: want {"tools":[{"name":"read","trust":true,"alwaysLoad":false}],"prompts":[],"resources":[]}; got {"tools":[{"name":"read","trust":false,"alwaysLoad":false}],"prompts":[],"resources":[]}`,
		}},
		"good reject":           {passed: true},
		"reject but accepted":   {contains: []string{"accepted settings it must refuse: want an error; got {"}},
		"canonical but refused": {contains: []string{"refused the settings", "includeTools: expected"}},
		"typo":                  {contains: []string{`(malformed): malformed case: unknown key "canonicl"`}},
		"two kinds":             {contains: []string{"malformed case: the keys of several kinds"}},
	})
	assert.Equal(t, 7, r.Passed)
	assert.Equal(t, 9, r.Failed)
	assert.Equal(t, len(r.Results), r.Passed+r.Failed)
	assert.Equal(t, "metakey-reference", r.Policy.Name)
}

func TestRunBrokenFileIsOneFailedCase(t *testing.T) {
	suites, err := Load("testdata/broken")
	require.NoError(t, err)
	r := Run(t.Context(), metakey.Reference{}, suites)
	require.Len(t, r.Results, 2)
	broken := r.Results[0]
	assert.False(t, broken.Passed)
	assert.Equal(t, KindFile, broken.Kind)
	assert.Equal(t, "broken.json", broken.Case)
	assert.Equal(t, filepath.Join("testdata/broken/broken.json"), broken.File)
	assert.Contains(t, broken.String(), "not a valid suite file: not valid JSON: line 3, column")
	assert.True(t, r.Results[1].Passed, r.Results[1].String())
	assert.Equal(t, "1 passed, 1 failed", r.Summary())
}

func TestReportText(t *testing.T) {
	suites, err := Load("testdata/runner/mixed.json")
	require.NoError(t, err)
	r := Run(t.Context(), metakey.Reference{}, suites)

	var quiet, verbose bytes.Buffer
	require.NoError(t, r.WriteText(&quiet, false))
	require.NoError(t, r.WriteText(&verbose, true))
	ql := strings.Split(strings.TrimSuffix(quiet.String(), "\n"), "\n")
	vl := strings.Split(strings.TrimSuffix(verbose.String(), "\n"), "\n")
	assert.Len(t, ql, r.Failed+1)
	assert.Len(t, vl, len(r.Results)+1)
	assert.Equal(t, "7 passed, 9 failed", ql[len(ql)-1])
	assert.Equal(t, ql[len(ql)-1], vl[len(vl)-1])
	for _, l := range ql[:len(ql)-1] {
		assert.True(t, strings.HasPrefix(l, "FAIL testdata/runner/mixed.json: "), l)
	}
	assert.Contains(t, vl, "PASS testdata/runner/mixed.json: good canonical (canonical)")

	var decoded Report
	b, err := json.Marshal(r)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &decoded))
	assert.Empty(t, cmp.Diff(*r, decoded), "(-want +got)")
}

// flakyKeys gives every key it computes a fresh suffix, as a plugin keying on
// a clock or a counter would.
type flakyKeys struct {
	metakey.Reference
	n atomic.Int64
}

func (f *flakyKeys) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	resp, err := f.Reference.Canonicalize(ctx, req)
	if err != nil {
		return nil, err
	}
	for i := range resp.Results {
		if resp.Results[i].Key != "" {
			resp.Results[i].Key += fmt.Sprintf("#%d", f.n.Add(1))
		}
	}
	return resp, nil
}

// flakyCanonical keeps keys stable but numbers each canonical form.
type flakyCanonical struct {
	metakey.Reference
	n atomic.Int64
}

func (f *flakyCanonical) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	resp, err := f.Reference.Canonicalize(ctx, req)
	if err != nil {
		return nil, err
	}
	for i := range resp.Results {
		if resp.Results[i].Key != "" {
			resp.Results[i].Canonical = json.RawMessage(fmt.Sprintf(`{"n": %d}`, f.n.Add(1)))
		}
	}
	return resp, nil
}

// batchKeys makes each key depend on its position in the batch.
type batchKeys struct{ metakey.Reference }

func (b batchKeys) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	resp, err := b.Reference.Canonicalize(ctx, req)
	if err != nil {
		return nil, err
	}
	for i := range resp.Results {
		if resp.Results[i].Key != "" {
			resp.Results[i].Key += fmt.Sprintf("@%d", i)
		}
	}
	return resp, nil
}

// flakyTrust trusts every tool on every other project call.
type flakyTrust struct {
	metakey.Reference
	n atomic.Int64
}

func (f *flakyTrust) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	resp, err := f.Reference.Project(ctx, req)
	if err != nil {
		return nil, err
	}
	if f.n.Add(1)%2 == 0 {
		for i := range resp.Tools {
			resp.Tools[i].Trust = !resp.Tools[i].Trust
		}
	}
	return resp, nil
}

func TestRunDetectsNondeterminism(t *testing.T) {
	suites, err := Load("testdata/runner/mixed.json")
	require.NoError(t, err)

	r := Run(t.Context(), &flakyKeys{}, suites)
	checkReport(t, r, map[string]caseOutcome{
		"good canonical": {contains: []string{"nondeterministic: the settings got two different keys from two canonicalize calls"}},
		"good same":      {contains: []string{"nondeterministic: same[0] got two different keys"}},
		"good differ":    {contains: []string{"nondeterministic: differ[0] got two different keys"}},
		"good project":   {passed: true},
		"good reject":    {passed: true},
	})

	r = Run(t.Context(), &flakyCanonical{}, suites)
	checkReport(t, r, map[string]caseOutcome{
		"good canonical": {contains: []string{"nondeterministic: the settings got two different canonical forms from two canonicalize calls (the second call sent the same settings with a trailing space, in reverse order): want {\"n\":1}; got {\"n\":2}"}},
		"good same":      {contains: []string{"nondeterministic: same[0] got two different canonical forms"}},
	})

	r = Run(t.Context(), batchKeys{}, suites)
	checkReport(t, r, map[string]caseOutcome{
		"good canonical": {passed: true}, // a batch of one
		"good same":      {contains: []string{"nondeterministic: same[0] got two different keys"}},
		"wrong differ":   {contains: []string{"nondeterministic: differ[0]"}},
	})

	r = Run(t.Context(), &flakyTrust{}, suites)
	checkReport(t, r, map[string]caseOutcome{
		"good canonical":                  {passed: true},
		"good project":                    {contains: []string{"nondeterministic: two projections of the same snapshot differ"}},
		"missing project keys mean empty": {passed: true}, // no tool to flip
	})
}

// failing is a policy whose calls fail the way a broken plugin's do.
type failing struct {
	metakey.Reference
	canonErr, projErr error
	canonResp         *abi.CanonicalizeResponse
	projResp          *abi.ProjectResponse
	panicMsg          string
}

func (f *failing) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	switch {
	case f.panicMsg != "":
		panic(f.panicMsg)
	case f.canonErr != nil:
		return nil, f.canonErr
	case f.canonResp != nil:
		return f.canonResp, nil
	}
	return f.Reference.Canonicalize(ctx, req)
}

func (f *failing) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	switch {
	case f.projErr != nil:
		return nil, f.projErr
	case f.projResp != nil:
		return f.projResp, nil
	}
	return f.Reference.Project(ctx, req)
}

func TestRunSurvivesBrokenPolicies(t *testing.T) {
	suites, err := Load("testdata/runner/mixed.json")
	require.NoError(t, err)
	n := 0
	for _, s := range suites {
		n += len(s.Cases)
	}

	trap := fmt.Errorf("plugin x: canonicalize: %w: unreachable", host.ErrPluginTrap)
	r := Run(t.Context(), &failing{canonErr: trap}, suites)
	assert.Len(t, r.Results, n)
	checkReport(t, r, map[string]caseOutcome{
		"good canonical": {contains: []string{"canonicalize failed: plugin x: canonicalize: plugin trapped: unreachable"}},
		"good reject":    {contains: []string{"canonicalize failed", "a reject case needs a per-item error"}},
		"good project":   {passed: true}, // project alone does not canonicalize
	})

	r = Run(t.Context(), &failing{canonResp: &abi.CanonicalizeResponse{}}, suites)
	checkReport(t, r, map[string]caseOutcome{
		"good canonical": {contains: []string{"canonicalize: 0 results for 1 settings objects"}},
	})

	r = Run(t.Context(), &failing{panicMsg: "boom"}, suites)
	assert.Len(t, r.Results, n)
	checkReport(t, r, map[string]caseOutcome{
		"good canonical": {contains: []string{"the policy panicked: boom"}},
		"good project":   {passed: true},
	})

	timeout := fmt.Errorf("plugin x: project: %w", host.ErrPluginTimeout)
	r = Run(t.Context(), &failing{projErr: timeout}, suites)
	checkReport(t, r, map[string]caseOutcome{
		"good reject":  {contains: []string{"project failed instead of refusing the settings: plugin x: project: plugin call timed out"}},
		"good project": {contains: []string{"projection failed: plugin x: project: plugin call timed out"}},
	})

	r = Run(t.Context(), &failing{projErr: fmt.Errorf("%w: bad settings", abi.ErrRefused)}, suites)
	checkReport(t, r, map[string]caseOutcome{"good reject": {passed: true}})

	// An error that is not a refusal fails a reject case, whatever it says,
	// a host error such as a failed instance among them.
	for _, msg := range []string{"plugin refused the input: bad settings", `plugin "x.wasm": project: creating an instance: out of memory`} {
		r = Run(t.Context(), &failing{projErr: errors.New(msg)}, suites)
		checkReport(t, r, map[string]caseOutcome{
			"good reject": {contains: []string{"project failed instead of refusing the settings: " + msg}},
		})
	}

	r = Run(t.Context(), &failing{projResp: &abi.ProjectResponse{}}, suites)
	checkReport(t, r, map[string]caseOutcome{
		"good reject":  {contains: []string{"canonicalize refused the settings but project accepted them"}},
		"good project": {contains: []string{"projection differs"}},
	})

	r = Run(t.Context(), &failing{projResp: &abi.ProjectResponse{Tools: []abi.ToolDecision{{Index: 7}}}}, suites)
	checkReport(t, r, map[string]caseOutcome{
		"good project": {contains: []string{"index 7 out of range"}},
	})
}

func TestRunCancelledContext(t *testing.T) {
	suites, err := Load("testdata/runner/mixed.json")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	// The reference honours ctx, so the cases fail because the runner hands
	// the cancelled ctx to every call.
	r := Run(ctx, metakey.Reference{}, suites)
	assert.Zero(t, r.Passed)
}

// TestRunCatchesViewContractBreaks replaces view.Project with projections
// that break what the runner checks on its own.
func TestRunCatchesViewContractBreaks(t *testing.T) {
	suites, err := Load("testdata/runner/mixed.json")
	require.NoError(t, err)
	var good *Suite = suites[0]
	var goodProject *Case
	for _, c := range good.Cases {
		if c.Name == "good project" {
			goodProject = c
		}
	}
	require.NotNil(t, goodProject)

	for _, tc := range []struct {
		name  string
		alter func(snap *pool.Snapshot, p *view.Projection)
		msg   string
	}{
		{"mutates the snapshot", func(snap *pool.Snapshot, p *view.Projection) {
			snap.Tools[0].Description = "changed"
		}, "the snapshot passed to the projection was modified"},
		{"changes a clone", func(snap *pool.Snapshot, p *view.Projection) {
			p.Tools[0].Description = "changed"
		}, `projected tools[0] "read" differs from the snapshot in more than the session flags: want {`},
		{"drops other _meta", func(snap *pool.Snapshot, p *view.Projection) {
			delete(p.Tools[0].Meta, "vendor/x")
		}, "differs from the snapshot in more than the session flags"},
		{"shares the tool", func(snap *pool.Snapshot, p *view.Projection) {
			snap.Tools[0].Meta = p.Tools[0].Meta
			p.Tools[0] = snap.Tools[0]
		}, "the snapshot passed to the projection was modified"},
		{"loses a flag", func(snap *pool.Snapshot, p *view.Projection) {
			delete(p.Tools[0].Meta, view.MetaAlwaysLoad)
		}, `_meta lacks the session flag "wasmhost/alwaysLoad"`},
		{"flag of the wrong type", func(snap *pool.Snapshot, p *view.Projection) {
			p.Tools[0].Meta[view.MetaTrust] = "true"
		}, `_meta["wasmhost/trust"] is string, want a boolean`},
		{"changes a prompt", func(snap *pool.Snapshot, p *view.Projection) {
			c := *p.Prompts[0]
			c.Description = "new"
			p.Prompts[0] = &c
		}, `projected prompts[0] "read" differs`},
		{"invents a resource", func(snap *pool.Snapshot, p *view.Projection) {
			p.Resources[0] = &mcp.Resource{URI: "file:///a", Name: "new"}
		}, `projected resources[0] "file:///a" differs`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			projectFunc = func(ctx context.Context, p abi.Policy, settings json.RawMessage, snap *pool.Snapshot) (*view.Projection, error) {
				proj, err := view.Project(ctx, p, settings, snap)
				if err == nil {
					tc.alter(snap, proj)
				}
				return proj, err
			}
			t.Cleanup(func() { projectFunc = view.Project })
			res := RunCase(t.Context(), metakey.Reference{}, good, goodProject)
			assert.False(t, res.Passed)
			assert.Contains(t, res.String(), tc.msg)
		})
	}
}

func TestCheckUnchanged(t *testing.T) {
	name := func(tl *mcp.Tool) string { return tl.Name }
	a := &mcp.Tool{Name: "a", Description: "A", Meta: mcp.Meta{"k": "v"}}
	b := &mcp.Tool{Name: "b"}
	dupA := &mcp.Tool{Name: "a", Description: "second a"}
	clone := func(tl *mcp.Tool, trust bool) *mcp.Tool {
		c := *tl
		c.Meta = mcp.Meta{view.MetaTrust: trust, view.MetaAlwaysLoad: false}
		for k, v := range tl.Meta {
			c.Meta[k] = v
		}
		return &c
	}
	snap := []*mcp.Tool{a, b, dupA}

	assert.Nil(t, checkUnchanged("tools", snap, []*mcp.Tool{clone(a, true), clone(dupA, false)}, name, strippedTool))
	assert.Nil(t, checkUnchanged("tools", snap, []*mcp.Tool{clone(dupA, true)}, name, strippedTool))
	assert.Nil(t, checkUnchanged("tools", snap, nil, name, strippedTool))

	f := checkUnchanged("tools", snap, []*mcp.Tool{clone(dupA, true), clone(b, true)}, name, strippedTool)
	require.NotNil(t, f)
	assert.Contains(t, f.msg, `projected tools[1] "b" is not in the snapshot after the previous item`)

	// After b only the second "a" is left, and it is not the first one.
	f = checkUnchanged("tools", snap, []*mcp.Tool{clone(b, true), clone(a, true)}, name, strippedTool)
	require.NotNil(t, f)
	assert.Contains(t, f.msg, `projected tools[1] "a" differs from the snapshot in more than the session flags`)
	assert.Contains(t, f.want, "second a")

	f = checkUnchanged("tools", snap, []*mcp.Tool{a}, name, strippedTool)
	require.NotNil(t, f)
	assert.Contains(t, f.msg, "is the snapshot's own object, not a clone")

	f = checkUnchanged("tools", snap, []*mcp.Tool{{Name: "c"}}, name, strippedTool)
	require.NotNil(t, f)
	assert.Contains(t, f.msg, "not in the snapshot")
}

func TestJSONEqual(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		eq   bool
	}{
		{`{"a": 1, "b": [1, 2]}`, `{"b":[1,2],"a":1}`, true},
		{`{"a": 1}`, `{"a": 1.0}`, true},
		{`{"a": 100}`, `{"a": 1e2}`, true},
		{`[1, 2]`, `[2, 1]`, false},
		{`{"a": null}`, `{}`, false},
		{`{"a": []}`, `{"a": null}`, false},
		{`"x"`, `"x"`, true},
		{`"\u00e9"`, `"é"`, true},
		{`true`, `"true"`, false},
		{`-0`, `0.0e5`, true},
		{`1.50`, `15e-1`, true},
		{`1e1000001`, `1.0e1000001`, true},
		{`1e1000001`, `10E1000000`, true},
		{`1e-1000000`, `10e-1000001`, true},
		{`1e1000001`, `2e1000001`, false},
		{`-1e1000001`, `1e1000001`, false},
		{`123456789012345678901234567890`, `1.2345678901234567890123456789e29`, true},
	} {
		eq, err := jsonEqual([]byte(tc.a), []byte(tc.b))
		require.NoError(t, err)
		assert.Equal(t, tc.eq, eq, "%s vs %s", tc.a, tc.b)
	}
	_, err := jsonEqual([]byte(`{}`), []byte(`{} {}`))
	assert.Error(t, err)
	_, err = jsonEqual([]byte(`{"a":{"b":1,"b":2}}`), []byte(`{}`))
	assert.ErrorContains(t, err, `duplicate key "a"."b"`)
}

// TestCanonicalDuplicateKeysMalformed: a canonical case whose expected form
// has a key twice is malformed, not read as the last of them.
func TestCanonicalDuplicateKeysMalformed(t *testing.T) {
	s := ParseSuite([]byte(`{"suite":"dup","cases":[{"name":"d","settings":{},"canonical":{"trust":true,"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}}]}`))
	require.NoError(t, s.Err)
	require.Len(t, s.Cases, 1)
	assert.Equal(t, KindMalformed, s.Cases[0].Kind)
	assert.ErrorContains(t, s.Cases[0].Err, `canonical: duplicate key "trust"`)
}

func TestDecodeSnapshot(t *testing.T) {
	snap, err := DecodeSnapshot([]byte(`{
		"tools": [{"name": "t", "description": "d", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}, "_meta": {"x": 1}}],
		"prompts": [{"name": ""}],
		"resources": [{"uri": "file:///r", "mimeType": "text/plain"}]
	}`))
	require.NoError(t, err)
	require.Len(t, snap.Tools, 1)
	assert.Equal(t, "d", snap.Tools[0].Description)
	assert.True(t, snap.Tools[0].Annotations.ReadOnlyHint)
	assert.Equal(t, "", snap.Prompts[0].Name)
	assert.Equal(t, "text/plain", snap.Resources[0].MIMEType)

	snap, err = DecodeSnapshot([]byte(`{}`))
	require.NoError(t, err)
	assert.Empty(t, snap.Tools)

	_, err = DecodeSnapshot([]byte(`{"tools": [{"name": "a", "inputSchema": 3, "annotations": "x"}]}`))
	assert.ErrorContains(t, err, "tools[0]")
}

// The child half of TestRunPolicyTReportsEachCase: it runs only when the
// parent sets the variable, and is expected to fail.
func TestRunPolicyTChild(t *testing.T) {
	if os.Getenv("CONFORMANCE_CHILD") != "1" {
		t.Skip("run by TestRunPolicyTReportsEachCase")
	}
	RunPolicyT(t, metakey.Reference{}, "testdata/runner/mixed.json", "testdata/broken")
}

// failingChild runs the test named child in a fresh test binary with
// env=1, checks that it fails, and returns its verbose output.
func failingChild(t *testing.T, child, env string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the test binary again")
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run", "^"+child+"$", "-test.v")
	cmd.Env = append(os.Environ(), env+"=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the child must fail:\n%s", out)
	return string(out)
}

func TestRunPolicyTReportsEachCase(t *testing.T) {
	text := failingChild(t, "TestRunPolicyTChild", "CONFORMANCE_CHILD")
	for _, want := range []string{
		"--- PASS: TestRunPolicyTChild/mixed.json/good_canonical ",
		"--- FAIL: TestRunPolicyTChild/mixed.json/wrong_canonical ",
		"--- FAIL: TestRunPolicyTChild/mixed.json/typo ",
		"--- PASS: TestRunPolicyTChild/good.json/default ",
		"--- FAIL: TestRunPolicyTChild/broken.json ",
		"canonical form differs: want {",
	} {
		assert.Contains(t, text, want)
	}
}

func TestShowKey(t *testing.T) {
	assert.Equal(t, "`k{\"a\":1}`", showKey(`k{"a":1}`))
	assert.Equal(t, `"a\nb"`, showKey("a\nb"))
	assert.Equal(t, "\"a`b\"", showKey("a`b"))
}

// batchFake answers project and canonicalize calls as the reference does,
// and project_batch calls through answer.
type batchFake struct {
	metakey.Reference
	answer func(ctx context.Context, req *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error)
	calls  atomic.Int64
}

func (f *batchFake) ProjectBatch(ctx context.Context, req *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error) {
	f.calls.Add(1)
	return f.answer(ctx, req)
}

// altered answers like the reference, then lets change alter each result
// whose settings are s.
func altered(change func(s string, r *abi.BatchResult)) func(context.Context, *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error) {
	return func(ctx context.Context, req *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error) {
		resp, err := metakey.Reference{}.ProjectBatch(ctx, req)
		if err != nil {
			return nil, err
		}
		for i, it := range req.Items {
			change(string(req.Settings[it.Settings]), &resp.Results[i])
		}
		return resp, nil
	}
}

func TestRunBatchPath(t *testing.T) {
	suites, err := Load("testdata/runner/mixed.json")
	require.NoError(t, err)
	const goodProject = `{"includeTools": ["read"], "trust": true}`
	const goodReject = `{"trust": "false"}`

	// Answers equal to the reference's: one batch call for the suite, and
	// the report of the reference.
	f := &batchFake{answer: altered(func(string, *abi.BatchResult) {})}
	r := Run(t.Context(), f, suites)
	assert.EqualValues(t, 1, f.calls.Load(), "one batch for the suite's project and reject cases")
	assert.Equal(t, "7 passed, 9 failed", r.Summary())

	f = &batchFake{answer: altered(func(s string, r *abi.BatchResult) {
		if s == goodProject {
			r.Tools[0].Trust = false
		}
	})}
	r = Run(t.Context(), f, suites)
	checkReport(t, r, map[string]caseOutcome{
		"good project": {contains: []string{
			`(project): batch path (project_batch): projection differs: want {"tools":[{"name":"read","trust":true,"alwaysLoad":false}],"prompts":["read"],"resources":["file:///a"]}; got {"tools":[{"name":"read","trust":false,"alwaysLoad":false}],"prompts":["read"],"resources":["file:///a"]}`,
		}},
		"missing project keys mean empty": {passed: true},
		"good reject":                     {passed: true},
	})

	f = &batchFake{answer: altered(func(s string, r *abi.BatchResult) {
		switch s {
		case goodProject:
			*r = abi.BatchResult{Error: "project: settings refused: no"}
		case goodReject:
			*r = abi.BatchResult{ProjectResponse: &abi.ProjectResponse{}}
		}
	})}
	r = Run(t.Context(), f, suites)
	checkReport(t, r, map[string]caseOutcome{
		"good project":                    {contains: []string{`batch path (project_batch): the policy refused the settings: want {"tools":[{"name":"read"`, `got error "project: settings refused: no"`}},
		"good reject":                     {contains: []string{`batch path (project_batch): the policy accepted settings it must refuse: want an error; got {"tools":[],"prompts":[],"resources":[]}`}},
		"missing project keys mean empty": {passed: true},
	})

	// A whole-call failure that one case causes fails that case alone.
	f = &batchFake{answer: func(ctx context.Context, req *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error) {
		for _, s := range req.Settings {
			if string(s) == goodProject {
				return nil, fmt.Errorf("plugin x: project_batch: %w: unreachable", host.ErrPluginTrap)
			}
		}
		return metakey.Reference{}.ProjectBatch(ctx, req)
	}}
	r = Run(t.Context(), f, suites)
	checkReport(t, r, map[string]caseOutcome{
		"good project":                    {contains: []string{"batch path (project_batch): the call failed: plugin x: project_batch: plugin trapped: unreachable"}},
		"missing project keys mean empty": {passed: true},
		"good reject":                     {passed: true},
	})
	assert.EqualValues(t, 1+5, f.calls.Load(), "the suite's batch, then each of its five project and reject cases alone")

	// A failure no case causes alone fails every case of the batch.
	f = &batchFake{answer: func(ctx context.Context, req *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error) {
		if len(req.Items) > 1 {
			return &abi.ProjectBatchResponse{}, nil
		}
		return metakey.Reference{}.ProjectBatch(ctx, req)
	}}
	r = Run(t.Context(), f, suites)
	checkReport(t, r, map[string]caseOutcome{
		"good project":                    {contains: []string{"batch path (project_batch): the batch of the suite's 5 project and reject cases failed, though each case passes alone: project_batch: 0 results for 5 items"}},
		"missing project keys mean empty": {contains: []string{"each case passes alone"}},
		"good reject":                     {contains: []string{"each case passes alone"}},
		"good canonical":                  {passed: true},
	})

	f = &batchFake{answer: func(context.Context, *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error) { panic("boom") }}
	r = Run(t.Context(), f, suites)
	checkReport(t, r, map[string]caseOutcome{
		"good project": {contains: []string{"batch path (project_batch): the call failed: the policy panicked: boom"}},
		"good reject":  {contains: []string{"the policy panicked: boom"}},
	})

	// RunCase and RunPolicyT take the batch path too.
	f = &batchFake{answer: altered(func(s string, r *abi.BatchResult) {
		if s == goodProject {
			r.Prompts = nil
		}
	})}
	var good *Case
	for _, c := range suites[0].Cases {
		if c.Name == "good project" {
			good = c
		}
	}
	res := RunCase(t.Context(), f, suites[0], good)
	assert.False(t, res.Passed)
	assert.Contains(t, res.String(), `batch path (project_batch): projection differs`)
	assert.Contains(t, res.String(), `"prompts":[]`)
	assert.EqualValues(t, 1, f.calls.Load())
}

// The child half of TestRunPolicyTBatchPath: a policy whose batches drop
// every resource.
func TestRunPolicyTBatchChild(t *testing.T) {
	if os.Getenv("CONFORMANCE_BATCH_CHILD") != "1" {
		t.Skip("run by TestRunPolicyTBatchPath")
	}
	f := &batchFake{answer: altered(func(_ string, r *abi.BatchResult) {
		if r.ProjectResponse != nil {
			r.Resources = nil
		}
	})}
	RunPolicyT(t, f, "testdata/runner/mixed.json")
}

func TestRunPolicyTBatchPath(t *testing.T) {
	text := failingChild(t, "TestRunPolicyTBatchChild", "CONFORMANCE_BATCH_CHILD")
	for _, want := range []string{
		"FAIL testdata/runner/mixed.json: good project (project): batch path (project_batch): projection differs",
		"--- FAIL: TestRunPolicyTBatchChild/mixed.json/good_project ",
		"--- PASS: TestRunPolicyTBatchChild/mixed.json/missing_project_keys_mean_empty ",
		"--- PASS: TestRunPolicyTBatchChild/mixed.json/good_reject ",
	} {
		assert.Contains(t, text, want)
	}
}

func TestBatchPathOnlyWithTheExport(t *testing.T) {
	_, ok := batchProjector(metakey.Reference{})
	assert.True(t, ok)
	_, ok = batchProjector(&failing{})
	assert.True(t, ok, "embedding the reference brings its ProjectBatch")
	for _, tc := range []struct {
		wasm string
		want bool
	}{
		{"../testplugins/prefix-policy/prefix-policy.wasm", false},
		{"../testplugins/wat/script.wasm", true},
	} {
		p, err := host.LoadFile(t.Context(), tc.wasm, host.Options{CacheDir: os.Getenv(host.CacheDirEnv)})
		require.NoError(t, err)
		_, ok := batchProjector(p)
		assert.Equal(t, tc.want, ok, tc.wasm)
		require.NoError(t, p.Close(context.Background()))
	}
}

// TestRunBothWays checks that a case passing one way and failing the other
// fails, named as failing through Extism calls, and that nothing else
// changes.
func TestRunBothWays(t *testing.T) {
	suites, err := Load("testdata/runner/mixed.json")
	require.NoError(t, err)
	once := Run(t.Context(), metakey.Reference{}, suites)
	same := RunBothWays(t.Context(), metakey.Reference{}, metakey.Reference{}, suites)
	assert.Equal(t, once, same, "both ways alike: the report of one run")
	assert.Equal(t, once, RunBothWays(t.Context(), metakey.Reference{}, nil, suites), "nil: one run")

	broken := &failing{projErr: errors.New("extism path broken")}
	r := RunBothWays(t.Context(), metakey.Reference{}, broken, suites)
	assert.Equal(t, len(once.Results), r.Passed+r.Failed)
	var extismOnly int
	for i, res := range r.Results {
		if once.Results[i].Passed && !res.Passed {
			extismOnly++
			// A failure through Extism calls, or, for a reject case that
			// passes both ways, the two ways' refusals differing.
			assert.True(t, strings.HasPrefix(res.Message, "through Extism calls: ") ||
				strings.HasPrefix(res.Message, "direct calls answer differently from Extism calls"), res.String())
			assert.Contains(t, res.String(), "extism path broken")
		}
		if !once.Results[i].Passed {
			assert.Equal(t, once.Results[i], res, "a case failing directly keeps its own failure")
		}
	}
	assert.Positive(t, extismOnly, "the project cases pass directly and fail through Extism")
	assert.Equal(t, once.Failed+extismOnly, r.Failed)
}

// otherBatchRefusal is metakey.Reference whose project_batch refuses an
// item with a message of its own instead of project's.
type otherBatchRefusal struct{ metakey.Reference }

func (o otherBatchRefusal) ProjectBatch(ctx context.Context, req *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error) {
	resp, err := o.Reference.ProjectBatch(ctx, req)
	if err != nil {
		return nil, err
	}
	for i := range resp.Results {
		if resp.Results[i].Error != "" {
			resp.Results[i].Error = "different"
		}
	}
	return resp, nil
}

// TestBatchRefusalIsProjects: abi/SPEC.md section 5.1 has a refused batch
// item carry the message project refuses the settings with; a batch path
// that refuses with another message fails every reject case, and nothing
// else.
func TestBatchRefusalIsProjects(t *testing.T) {
	suites, err := Load(defaultSuite)
	require.NoError(t, err)
	r := Run(t.Context(), otherBatchRefusal{}, suites)
	require.Positive(t, r.Failed)
	for _, res := range r.Results {
		if res.Kind != KindReject {
			assert.True(t, res.Passed, res.String())
			continue
		}
		require.False(t, res.Passed, "%s: a reject case", res.Case)
		assert.Contains(t, res.Message, "batch path (project_batch): the refusal message is not project's")
		assert.Equal(t, `error "different"`, res.Got)
		assert.Contains(t, res.Want, `error "project: settings refused: `)
	}
	assert.Zero(t, Run(t.Context(), metakey.Reference{}, suites).Failed, "the reference refuses with one message both ways")
}

// TestLoadFollowsSymlinks: a suite directory reached through a symbolic
// link, given as the path or met inside a directory, is read like any
// other; a link cycle is read once and ends.
func TestLoadFollowsSymlinks(t *testing.T) {
	tmp := t.TempDir()
	suite := `{"suite":"s","cases":[{"name":"a","settings":{"trust":"x"},"reject":true}]}`
	require.NoError(t, os.MkdirAll(filepath.Join(tmp, "real", "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "real", "sub", "in.json"), []byte(suite), 0o644))
	require.NoError(t, os.Symlink("real", filepath.Join(tmp, "rootlink")))
	require.NoError(t, os.MkdirAll(filepath.Join(tmp, "d"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "d", "x.json"), []byte(suite), 0o644))
	require.NoError(t, os.Symlink(filepath.Join("..", "real"), filepath.Join(tmp, "d", "linked")))
	require.NoError(t, os.Symlink(".", filepath.Join(tmp, "d", "loop")))
	require.NoError(t, os.Symlink("nowhere", filepath.Join(tmp, "d", "dangling")))

	rels := func(suites []*Suite) []string {
		var out []string
		for _, s := range suites {
			out = append(out, s.Rel)
		}
		return out
	}
	suites, err := Load(filepath.Join(tmp, "rootlink"))
	require.NoError(t, err)
	assert.Equal(t, []string{"sub/in.json"}, rels(suites))

	suites, err = Load(filepath.Join(tmp, "d"))
	require.NoError(t, err)
	assert.Equal(t, []string{"linked/sub/in.json", "x.json"}, rels(suites))
	r := Run(t.Context(), metakey.Reference{}, suites)
	assert.Equal(t, 2, r.Passed)
}

// TestReportLinesStayOneLine: a case name, file name or message holding a
// line break or another control character cannot break a report line in
// two or forge one: names are quoted, messages escaped.
func TestReportLinesStayOneLine(t *testing.T) {
	for _, r := range []Result{
		{File: "nl.json", Case: "fake\nPASS nl.json: other (same)\n99 passed, 0 failed", Kind: KindSame, Message: "keys differ"},
		{File: "a\rb.json", Case: "cr\rname", Kind: KindDiffer, Message: "x\ry\u2028z\x1b[2K", Want: "w\nv", Got: "g"},
		{File: "ok.json", Case: "tab\tname", Kind: KindSame, Passed: true},
	} {
		line := r.String()
		assert.False(t, strings.ContainsFunc(line, unprintable), "%q", line)
		assert.NotContains(t, line, "\n")
		assert.True(t, strings.HasPrefix(line, "PASS ") || strings.HasPrefix(line, "FAIL "), "%q", line)
	}
	r := Result{File: "nl.json", Case: "a\nb", Kind: KindSame, Message: "m\rn"}
	assert.Equal(t, `FAIL nl.json: "a\nb" (same): m\u000dn`, r.String())
	r = Result{File: "plain.json", Case: "plain name", Kind: KindSame, Passed: true}
	assert.Equal(t, "PASS plain.json: plain name (same)", r.String(), "ordinary names stay as they are")
}

// TestParseIgnoresByteOrderMark: a suite saved with a UTF-8 byte order mark
// parses as without it.
func TestParseIgnoresByteOrderMark(t *testing.T) {
	s := ParseSuite([]byte("\uFEFF" + `{"suite":"bom","cases":[{"name":"a","same":[{},{}]}]}`))
	require.NoError(t, s.Err)
	assert.Equal(t, "bom", s.Name)
	require.Len(t, s.Cases, 1)
	assert.Equal(t, KindSame, s.Cases[0].Kind)
}

// TestSnapshotIntegralNumbers: MCP's integer fields take any JSON number
// that is an integer (1024.0, 1e3), as JSON Schema's "integer" does; a
// fractional one is refused with its JSON path.
func TestSnapshotIntegralNumbers(t *testing.T) {
	snap, err := DecodeSnapshot([]byte(`{"resources":[{"uri":"a","size":1024.0},{"uri":"b","size":1e3},{"uri":"c","size":7}]}`))
	require.NoError(t, err)
	require.Len(t, snap.Resources, 3)
	assert.Equal(t, []int64{1024, 1000, 7}, []int64{snap.Resources[0].Size, snap.Resources[1].Size, snap.Resources[2].Size})

	_, err = DecodeSnapshot([]byte(`{"resources":[{"uri":"a","size":1.5}]}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "resources[0].size: expected an integer, got a JSON number 1.5")
	_, err = DecodeSnapshot([]byte(`{"tools":[{"name":"t","title":7}]}`))
	assert.ErrorContains(t, err, "tools[0].title: expected a string, got a JSON number")
}

// TestSnapshotTypeErrorPaths checks that a snapshot field of the wrong type
// is reported at its exact JSON path, array indexes included, not at the
// path of its Go struct field (encoding/json's UnmarshalTypeError.Field,
// which drops indexes and stops at a free-form field).
func TestSnapshotTypeErrorPaths(t *testing.T) {
	for _, tc := range []struct{ snap, want string }{
		{`{"tools":[{"name":"a","icons":[{"src":"x"},{"src":"y","sizes":"48x48"}]}]}`,
			`tools[0].icons[1].sizes: expected an array, got a JSON string`},
		{`{"tools":[{"name":"a","icons":[{"src":"x","sizes":["1x1",48]}]}]}`,
			`tools[0].icons[0].sizes[1]: expected a string, got a JSON number`},
		{`{"prompts":[{"name":"a"},{"name":"b","arguments":[{"name":"x"},{"name":"y", "required": 1}]}]}`,
			`prompts[1].arguments[1].required: expected a boolean, got a JSON number`},
		{`{"resources":[{"uri":"a","annotations":{"audience":["user",5]}}]}`,
			`resources[0].annotations.audience[1]: expected a string, got a JSON number`},
		{`{"resources":[{"uri":"a","annotations":{"priority":1e400}}]}`,
			`resources[0].annotations.priority: expected a number, got a JSON number 1e400`},
		{`{"tools":[{"name":"a","inputSchema":{"properties":{"x":{"maximum":1e400,"minimum":0}}}}]}`,
			`tools[0].inputSchema.properties.x.maximum: expected a number, got a JSON number 1e400`},
		{`{"tools":[{"name":"a","_meta":{"a b":[1, 1e400 ]}}]}`,
			`tools[0]._meta["a b"][1]: expected a number, got a JSON number 1e400`},
		{`{"tools":[{"name":"a","annotations":{"readOnlyHint":[true]}}]}`,
			`tools[0].annotations.readOnlyHint: expected a boolean, got a JSON array`},
		{"{\"tools\": [ {\"name\": \"a\",\n \"icons\": [ {\"src\": \"x\", \"sizes\": [ \"1x1\" , 48 ] } ] } ] }",
			`tools[0].icons[0].sizes[1]: expected a string, got a JSON number`},
		{"{\"tools\": [{\"name\": \"a\", \"inputSchema\": {\"x\": [ 1e400\n , 2 ], \"y\": 1e400}}]}",
			`tools[0].inputSchema.x[0]: expected a number, got a JSON number 1e400`},
		{`{"tools":[{"name":"t","title":7}]}`,
			`tools[0].title: expected a string, got a JSON number`},
		{`{"resources":[{"uri":"a","size":1.5}]}`,
			`resources[0].size: expected an integer, got a JSON number 1.5`},
	} {
		_, err := DecodeSnapshot([]byte(tc.snap))
		if assert.Error(t, err, tc.snap) {
			assert.Equal(t, tc.want, err.Error(), tc.snap)
		}
	}
}

// TestLoadRefusesAHugeSuiteFile: a suite file past the bound is refused,
// not read whole (the file is sparse: it takes no disk).
func TestLoadRefusesAHugeSuiteFile(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "huge.json"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(maxSuiteFileBytes+1))
	require.NoError(t, f.Close())
	_, err = Load(dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "more than 64 MiB")
}
