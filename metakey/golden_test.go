package metakey

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
)

// This file holds a small interpreter for golden case files (format v1, see
// the golden-cases spec) so the public suite is checked against the
// Reference directly, without the wasm runtime. The public runner lives in
// conformance/; this one exists to keep the suite and the oracle honest with
// each other, and it is strict about the files themselves.

const goldenDir = "../conformance/golden/default"

// The five case kinds.
const (
	kindCanonical = "canonical"
	kindSame      = "same"
	kindDiffer    = "differ"
	kindProject   = "project"
	kindReject    = "reject"
)

// goldenKinds lists, for each kind, every key its cases have besides name.
var goldenKinds = map[string][]string{
	kindCanonical: {"settings", "canonical"},
	kindSame:      {"same"},
	kindDiffer:    {"differ"},
	kindProject:   {"settings", "snapshot", "project"},
	kindReject:    {"settings", "reject"},
}

// goldenMarkers maps the keys that tell a kind apart to that kind; settings
// is shared and tells nothing.
var goldenMarkers = map[string]string{
	"canonical": kindCanonical,
	"same":      kindSame,
	"differ":    kindDiffer,
	"snapshot":  kindProject,
	"project":   kindProject,
	"reject":    kindReject,
}

type goldenFile struct {
	Suite string
	Cases []goldenCase
}

type goldenCase struct {
	Name      string
	Kind      string
	Settings  json.RawMessage
	Canonical json.RawMessage   // kind canonical
	Group     []json.RawMessage // kinds same and differ
	Snapshot  goldenSnapshot    // kind project
	Project   goldenView        // kind project
}

// A goldenSnapshot keeps what crosses the ABI: names and URIs.
type goldenSnapshot struct {
	Tools, Prompts, Resources []string
}

// A goldenView is what one session sees, as a project case writes it.
type goldenView struct {
	Tools     []goldenTool
	Prompts   []string
	Resources []string
}

type goldenTool struct {
	Name       string
	Trust      bool
	AlwaysLoad bool
}

type jsonField struct {
	key string
	val json.RawMessage
}

// objectFields splits a JSON object into its fields in document order,
// refusing anything else and duplicate keys.
func objectFields(raw []byte) ([]jsonField, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf("expected an object, got %s", bytes.TrimSpace(raw))
	}
	var out []jsonField
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string)
		if seen[key] {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		out = append(out, jsonField{key, val})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the object")
	}
	return out, nil
}

func fieldMap(raw []byte, allowed ...string) (map[string]json.RawMessage, error) {
	fields, err := objectFields(raw)
	if err != nil {
		return nil, err
	}
	m := make(map[string]json.RawMessage, len(fields))
	for _, f := range fields {
		if len(allowed) > 0 && !slices.Contains(allowed, f.key) {
			return nil, fmt.Errorf("unknown key %q", f.key)
		}
		m[f.key] = f.val
	}
	return m, nil
}

func strictString(raw json.RawMessage) (string, error) {
	var s string
	if len(raw) == 0 || raw[0] != '"' {
		return "", fmt.Errorf("expected a string, got %s", raw)
	}
	return s, json.Unmarshal(raw, &s)
}

func strictBool(raw json.RawMessage) (bool, error) {
	switch string(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("expected a boolean, got %s", raw)
}

func strictArray(raw json.RawMessage) ([]json.RawMessage, error) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, fmt.Errorf("expected an array, got %s", raw)
	}
	var out []json.RawMessage
	return out, json.Unmarshal(raw, &out)
}

// parseGoldenFile decodes and checks one golden file. Every problem with the
// file is an error naming the case and key.
func parseGoldenFile(data []byte) (*goldenFile, error) {
	if !json.Valid(data) {
		return nil, errors.New("not valid JSON")
	}
	top, err := fieldMap(data, "suite", "description", "cases")
	if err != nil {
		return nil, err
	}
	var f goldenFile
	if f.Suite, err = strictString(top["suite"]); err != nil || f.Suite == "" {
		return nil, fmt.Errorf("suite: must be a non-empty string (%v)", err)
	}
	if d, ok := top["description"]; ok {
		if _, err := strictString(d); err != nil {
			return nil, fmt.Errorf("description: %w", err)
		}
	}
	cases, err := strictArray(top["cases"])
	if err != nil {
		return nil, fmt.Errorf("cases: %w", err)
	}
	if len(cases) == 0 {
		return nil, errors.New("cases: empty")
	}
	names := map[string]bool{}
	for i, raw := range cases {
		c, err := parseGoldenCase(raw)
		if err != nil {
			return nil, fmt.Errorf("cases[%d] %q: %w", i, c.Name, err)
		}
		if names[c.Name] {
			return nil, fmt.Errorf("cases[%d]: duplicate case name %q", i, c.Name)
		}
		names[c.Name] = true
		f.Cases = append(f.Cases, c)
	}
	return &f, nil
}

func parseGoldenCase(raw json.RawMessage) (goldenCase, error) {
	var c goldenCase
	m, err := fieldMap(raw)
	if err != nil {
		return c, err
	}
	if c.Name, err = strictString(m["name"]); err != nil || c.Name == "" {
		return c, fmt.Errorf("name: must be a non-empty string (%v)", err)
	}
	kinds := map[string]bool{}
	for key := range m {
		if key == "name" || key == "settings" {
			continue
		}
		kind, ok := goldenMarkers[key]
		if !ok {
			return c, fmt.Errorf("malformed: unknown key %q", key)
		}
		kinds[kind] = true
	}
	switch len(kinds) {
	case 0:
		return c, errors.New("malformed: the keys of no kind")
	case 1:
	default:
		var ks []string
		for k := range kinds {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return c, fmt.Errorf("malformed: the keys of %d kinds (%s)", len(ks), strings.Join(ks, ", "))
	}
	for k := range kinds {
		c.Kind = k
	}
	want := goldenKinds[c.Kind]
	for _, key := range want {
		if _, ok := m[key]; !ok {
			return c, fmt.Errorf("malformed: a %s case needs %q", c.Kind, key)
		}
	}
	if len(m) != len(want)+1 {
		return c, fmt.Errorf("malformed: a %s case has only the keys name, %s", c.Kind, strings.Join(want, ", "))
	}
	c.Settings = m["settings"]
	switch c.Kind {
	case kindCanonical:
		c.Canonical = m["canonical"]
	case kindSame, kindDiffer:
		if c.Group, err = strictArray(m[c.Kind]); err != nil {
			return c, fmt.Errorf("%s: %w", c.Kind, err)
		}
		if len(c.Group) < 2 {
			return c, fmt.Errorf("%s: needs two or more settings objects, has %d", c.Kind, len(c.Group))
		}
	case kindProject:
		if c.Snapshot, err = parseSnapshot(m["snapshot"]); err != nil {
			return c, fmt.Errorf("snapshot: %w", err)
		}
		if c.Project, err = parseView(m["project"]); err != nil {
			return c, fmt.Errorf("project: %w", err)
		}
	case kindReject:
		if string(m["reject"]) != "true" {
			return c, fmt.Errorf("malformed: reject must be true, got %s", m["reject"])
		}
	}
	return c, nil
}

// nameList reads key from the objects of a list, such as the names of tools.
func nameList(raw json.RawMessage, key string) ([]string, error) {
	items, err := strictArray(raw)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for i, item := range items {
		m, err := fieldMap(item)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		v, ok := m[key]
		if !ok {
			return nil, fmt.Errorf("[%d]: no %q", i, key)
		}
		s, err := strictString(v)
		if err != nil {
			return nil, fmt.Errorf("[%d].%s: %w", i, key, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func parseSnapshot(raw json.RawMessage) (goldenSnapshot, error) {
	var s goldenSnapshot
	m, err := fieldMap(raw, "tools", "prompts", "resources")
	if err != nil {
		return s, err
	}
	for _, l := range []struct {
		key, field string
		dst        *[]string
	}{{"tools", "name", &s.Tools}, {"prompts", "name", &s.Prompts}, {"resources", "uri", &s.Resources}} {
		*l.dst = []string{}
		if v, ok := m[l.key]; ok {
			if *l.dst, err = nameList(v, l.field); err != nil {
				return s, fmt.Errorf("%s%w", l.key, err)
			}
		}
	}
	return s, nil
}

func parseView(raw json.RawMessage) (goldenView, error) {
	var v goldenView
	m, err := fieldMap(raw, "tools", "prompts", "resources")
	if err != nil {
		return v, err
	}
	if t, ok := m["tools"]; ok {
		items, err := strictArray(t)
		if err != nil {
			return v, fmt.Errorf("tools: %w", err)
		}
		for i, item := range items {
			tm, err := fieldMap(item, "name", "trust", "alwaysLoad")
			if err != nil {
				return v, fmt.Errorf("tools[%d]: %w", i, err)
			}
			if len(tm) != 3 {
				return v, fmt.Errorf("tools[%d]: needs name, trust and alwaysLoad", i)
			}
			var tool goldenTool
			if tool.Name, err = strictString(tm["name"]); err != nil {
				return v, fmt.Errorf("tools[%d].name: %w", i, err)
			}
			if tool.Trust, err = strictBool(tm["trust"]); err != nil {
				return v, fmt.Errorf("tools[%d].trust: %w", i, err)
			}
			if tool.AlwaysLoad, err = strictBool(tm["alwaysLoad"]); err != nil {
				return v, fmt.Errorf("tools[%d].alwaysLoad: %w", i, err)
			}
			v.Tools = append(v.Tools, tool)
		}
	}
	for _, l := range []struct {
		key string
		dst *[]string
	}{{"prompts", &v.Prompts}, {"resources", &v.Resources}} {
		if raw, ok := m[l.key]; ok {
			items, err := strictArray(raw)
			if err != nil {
				return v, fmt.Errorf("%s: %w", l.key, err)
			}
			for i, item := range items {
				s, err := strictString(item)
				if err != nil {
					return v, fmt.Errorf("%s[%d]: %w", l.key, i, err)
				}
				*l.dst = append(*l.dst, s)
			}
		}
	}
	return v, nil
}

// canonicalizeTwice runs one canonicalize call for settings twice and
// refuses answers that change between the calls.
func canonicalizeTwice(ctx context.Context, p abi.Policy, settings []json.RawMessage) ([]abi.CanonicalResult, error) {
	var runs [2][]abi.CanonicalResult
	for i := range runs {
		req := &abi.CanonicalizeRequest{Settings: settings}
		resp, err := p.Canonicalize(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("canonicalize: %w", err)
		}
		if err := abi.ValidateCanonicalize(req, resp); err != nil {
			return nil, err
		}
		runs[i] = resp.Results
	}
	for i := range runs[0] {
		a, b := runs[0][i], runs[1][i]
		if a.Key != b.Key || (a.Error == "") != (b.Error == "") {
			return nil, fmt.Errorf("nondeterministic: settings %s gave key %q, then %q", settings[i], a.Key, b.Key)
		}
	}
	return runs[0], nil
}

// checkGoldenCase runs one case against p and says what differed.
func checkGoldenCase(ctx context.Context, p abi.Policy, c goldenCase) error {
	switch c.Kind {
	case kindCanonical:
		res, err := canonicalizeTwice(ctx, p, []json.RawMessage{c.Settings})
		if err != nil {
			return err
		}
		if res[0].Error != "" {
			return fmt.Errorf("settings %s refused: %s; want canonical %s", c.Settings, res[0].Error, c.Canonical)
		}
		var want, got any
		if err := json.Unmarshal(c.Canonical, &want); err != nil {
			return fmt.Errorf("canonical in case: %w", err)
		}
		if err := json.Unmarshal(res[0].Canonical, &got); err != nil {
			return fmt.Errorf("canonical from policy is not JSON: %w: %s", err, res[0].Canonical)
		}
		if !reflect.DeepEqual(want, got) {
			return fmt.Errorf("canonical: want %s, got %s", compact(c.Canonical), res[0].Canonical)
		}
	case kindSame, kindDiffer:
		res, err := canonicalizeTwice(ctx, p, c.Group)
		if err != nil {
			return err
		}
		for i, r := range res {
			if r.Error != "" {
				return fmt.Errorf("%s[%d] %s refused: %s", c.Kind, i, c.Group[i], r.Error)
			}
		}
		for i := range res {
			for j := i + 1; j < len(res); j++ {
				equal := res[i].Key == res[j].Key
				if c.Kind == kindSame && !equal {
					return fmt.Errorf("same: %s and %s have different keys %q and %q", c.Group[i], c.Group[j], res[i].Key, res[j].Key)
				}
				if c.Kind == kindDiffer && equal {
					return fmt.Errorf("differ: %s and %s share the key %q", c.Group[i], c.Group[j], res[i].Key)
				}
			}
		}
	case kindProject:
		req := &abi.ProjectRequest{
			Settings:  c.Settings,
			Tools:     slices.Clone(c.Snapshot.Tools),
			Prompts:   slices.Clone(c.Snapshot.Prompts),
			Resources: slices.Clone(c.Snapshot.Resources),
		}
		resp, err := p.Project(ctx, req)
		if err != nil {
			return fmt.Errorf("project: %w", err)
		}
		if err := abi.ValidateProject(req, resp); err != nil {
			return err
		}
		var got goldenView
		for _, d := range resp.Tools {
			got.Tools = append(got.Tools, goldenTool{Name: req.Tools[d.Index], Trust: d.Trust, AlwaysLoad: d.AlwaysLoad})
		}
		for _, i := range resp.Prompts {
			got.Prompts = append(got.Prompts, req.Prompts[i])
		}
		for _, i := range resp.Resources {
			got.Resources = append(got.Resources, req.Resources[i])
		}
		if diff := cmp.Diff(c.Project, got, cmpopts.EquateEmpty()); diff != "" {
			return fmt.Errorf("project mismatch (-want +got):\n%s", diff)
		}
	case kindReject:
		res, err := canonicalizeTwice(ctx, p, []json.RawMessage{c.Settings})
		if err != nil {
			return err
		}
		if res[0].Error == "" {
			return fmt.Errorf("settings %s accepted with key %q; want a refusal", c.Settings, res[0].Key)
		}
		if _, err := p.Project(ctx, &abi.ProjectRequest{Settings: c.Settings, Tools: []string{"t"}, Prompts: []string{"p"}, Resources: []string{"r"}}); err == nil {
			return fmt.Errorf("project with settings %s succeeded; want a refusal", c.Settings)
		}
	default:
		return fmt.Errorf("unknown kind %q", c.Kind)
	}
	return nil
}

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// goldenFiles lists the *.json files under dir, recursively, in name order.
func goldenFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".json") {
			files = append(files, path)
		}
		return nil
	})
	require.NoError(t, err)
	sort.Strings(files)
	return files
}

func TestGoldenSuiteReference(t *testing.T) {
	ctx := context.Background()
	files := goldenFiles(t, goldenDir)
	require.NotEmpty(t, files, "no golden files in %s", goldenDir)
	kinds := map[string]int{}
	suites := map[string]string{}
	total := 0
	for _, path := range files {
		rel, err := filepath.Rel(goldenDir, path)
		require.NoError(t, err)
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		gf, err := parseGoldenFile(data)
		if err != nil {
			t.Errorf("%s: malformed: %v", rel, err)
			continue
		}
		if other, dup := suites[gf.Suite]; dup {
			t.Errorf("%s: suite name %q already used by %s", rel, gf.Suite, other)
		}
		suites[gf.Suite] = rel
		for _, c := range gf.Cases {
			kinds[c.Kind]++
			total++
			t.Run(rel+"/"+c.Name, func(t *testing.T) {
				if err := checkGoldenCase(ctx, Reference{}, c); err != nil {
					t.Errorf("%s: case %q (%s): %v", rel, c.Name, c.Kind, err)
				}
			})
		}
	}
	// The suite exercises every kind and stays substantial.
	for kind := range goldenKinds {
		assert.NotZero(t, kinds[kind], "no %s case in the suite", kind)
	}
	assert.GreaterOrEqual(t, total, 80, "cases in the suite")
	t.Logf("%d golden cases in %d files: %v", total, len(files), kinds)
}

func TestGoldenMalformedCases(t *testing.T) {
	file := func(cases ...string) string {
		return `{"suite":"s","cases":[` + strings.Join(cases, ",") + `]}`
	}
	tests := []struct {
		name string
		data string
		want string
	}{
		{"not JSON", `{"suite":`, "not valid JSON"},
		{"not an object", `[]`, "expected an object"},
		{"unknown file key", `{"suite":"s","cases":[{"name":"a","same":[{},{}]}],"extra":1}`, `unknown key "extra"`},
		{"no suite", `{"cases":[{"name":"a","same":[{},{}]}]}`, "suite"},
		{"no cases", `{"suite":"s"}`, "cases"},
		{"empty cases", `{"suite":"s","cases":[]}`, "cases: empty"},
		{"duplicate file key", `{"suite":"s","suite":"t","cases":[]}`, `duplicate key "suite"`},
		{"unknown case key", file(`{"name":"a","settings":{},"canonical":{},"note":"x"}`), `unknown key "note"`},
		{"typo in a kind key", file(`{"name":"a","settings":{},"rejects":true}`), `unknown key "rejects"`},
		{"no kind", file(`{"name":"a","settings":{}}`), "the keys of no kind"},
		{"name only", file(`{"name":"a"}`), "the keys of no kind"},
		{"two kinds", file(`{"name":"a","settings":{},"canonical":{},"reject":true}`), "the keys of 2 kinds (canonical, reject)"},
		{"same and differ", file(`{"name":"a","same":[{},{}],"differ":[{},{}]}`), "the keys of 2 kinds (differ, same)"},
		{"settings in a same case", file(`{"name":"a","settings":{},"same":[{},{}]}`), "has only the keys name, same"},
		{"canonical without settings", file(`{"name":"a","canonical":{}}`), `needs "settings"`},
		{"project without snapshot", file(`{"name":"a","settings":{},"project":{}}`), `needs "snapshot"`},
		{"project without project", file(`{"name":"a","settings":{},"snapshot":{}}`), `needs "project"`},
		{"reject false", file(`{"name":"a","settings":{},"reject":false}`), "reject must be true"},
		{"same of one", file(`{"name":"a","same":[{}]}`), "needs two or more"},
		{"differ not an array", file(`{"name":"a","differ":{}}`), "expected an array"},
		{"no name", file(`{"same":[{},{}]}`), "name"},
		{"empty name", file(`{"name":"","same":[{},{}]}`), "name"},
		{"duplicate case name", file(`{"name":"a","same":[{},{}]}`, `{"name":"a","differ":[{},{"trust":true}]}`), `duplicate case name "a"`},
		{"duplicate case key", file(`{"name":"a","same":[{},{}],"same":[{},{}]}`), `duplicate key "same"`},
		{"unknown snapshot key", file(`{"name":"a","settings":{},"snapshot":{"tool":[]},"project":{}}`), `unknown key "tool"`},
		{"snapshot tool without name", file(`{"name":"a","settings":{},"snapshot":{"tools":[{"title":"x"}]},"project":{}}`), `no "name"`},
		{"snapshot resource without uri", file(`{"name":"a","settings":{},"snapshot":{"resources":[{"name":"x"}]},"project":{}}`), `no "uri"`},
		{"snapshot tool name not a string", file(`{"name":"a","settings":{},"snapshot":{"tools":[{"name":1}]},"project":{}}`), "expected a string"},
		{"unknown project key", file(`{"name":"a","settings":{},"snapshot":{},"project":{"tool":[]}}`), `unknown key "tool"`},
		{"project tool without flags", file(`{"name":"a","settings":{},"snapshot":{},"project":{"tools":[{"name":"x"}]}}`), "needs name, trust and alwaysLoad"},
		{"project tool extra key", file(`{"name":"a","settings":{},"snapshot":{},"project":{"tools":[{"name":"x","trust":true,"alwaysLoad":false,"t":1}]}}`), `unknown key "t"`},
		{"project tool flag not a boolean", file(`{"name":"a","settings":{},"snapshot":{},"project":{"tools":[{"name":"x","trust":"true","alwaysLoad":false}]}}`), "expected a boolean"},
		{"project prompts not names", file(`{"name":"a","settings":{},"snapshot":{},"project":{"prompts":[{"name":"p"}]}}`), "expected a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseGoldenFile([]byte(tt.data))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// flakyPolicy gives a different key on every call.
type flakyPolicy struct {
	Reference
	calls int
}

func (p *flakyPolicy) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	resp, err := p.Reference.Canonicalize(ctx, req)
	if err == nil {
		p.calls++
		for i := range resp.Results {
			if resp.Results[i].Error == "" {
				resp.Results[i].Key += fmt.Sprint(p.calls)
			}
		}
	}
	return resp, err
}

// lenientPolicy accepts every settings object in project calls, as a buggy
// plugin might.
type lenientPolicy struct{ Reference }

func (lenientPolicy) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	return &abi.ProjectResponse{}, nil
}

func TestGoldenCheckerCatchesFailures(t *testing.T) {
	tests := []struct {
		name   string
		policy abi.Policy
		c      string
		want   string
	}{
		{"wrong canonical", Reference{}, `{"name":"x","settings":{"trust":true},"canonical":{"trust":false,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}}`, "canonical: want"},
		{"array order matters", Reference{}, `{"name":"x","settings":{"includeTools":["a","b"]},"canonical":{"trust":null,"alwaysLoadTools":false,"includeTools":["b","a"],"excludeTools":[]}}`, "canonical: want"},
		{"canonical of refused settings", Reference{}, `{"name":"x","settings":{"trust":1},"canonical":{}}`, "refused"},
		{"same that differ", Reference{}, `{"name":"x","same":[{},{"trust":false}]}`, "different keys"},
		{"differ that are same", Reference{}, `{"name":"x","differ":[{"trust":true},{"alwaysLoadTools":false},{"alwaysLoadTools":null}]}`, "share the key"},
		{"same with a refused member", Reference{}, `{"name":"x","same":[{},{"trust":"x"}]}`, "refused"},
		{"wrong flags", Reference{}, `{"name":"x","settings":{"trust":true},"snapshot":{"tools":[{"name":"a"}]},"project":{"tools":[{"name":"a","trust":false,"alwaysLoad":false}]}}`, "project mismatch"},
		{"wrong order", Reference{}, `{"name":"x","settings":{},"snapshot":{"tools":[{"name":"a"},{"name":"b"}]},"project":{"tools":[{"name":"b","trust":false,"alwaysLoad":false},{"name":"a","trust":false,"alwaysLoad":false}]}}`, "project mismatch"},
		{"missing resources", Reference{}, `{"name":"x","settings":{},"snapshot":{"resources":[{"uri":"u"}]},"project":{}}`, "project mismatch"},
		{"extra prompt", Reference{}, `{"name":"x","settings":{"includeTools":[]},"snapshot":{"prompts":[{"name":"p"}]},"project":{"prompts":["p"]}}`, "project mismatch"},
		{"project of refused settings", Reference{}, `{"name":"x","settings":{"trust":"x"},"snapshot":{},"project":{}}`, "settings refused"},
		{"reject of good settings", Reference{}, `{"name":"x","settings":{"trust":true},"reject":true}`, "want a refusal"},
		{"reject that project accepts", lenientPolicy{}, `{"name":"x","settings":{"trust":"x"},"reject":true}`, "project with settings"},
		{"nondeterministic keys", &flakyPolicy{}, `{"name":"x","same":[{},{}]}`, "nondeterministic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseGoldenCase(json.RawMessage(tt.c))
			require.NoError(t, err)
			err = checkGoldenCase(context.Background(), tt.policy, c)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
