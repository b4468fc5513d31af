package view_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

// newSnapshot builds a snapshot with tools carrying descriptions, input
// schemas, annotations and their own _meta. Calling it twice gives two
// deep-equal, pointer-disjoint snapshots.
func newSnapshot(version uint64, tools ...string) *pool.Snapshot {
	s := &pool.Snapshot{Version: version}
	for i, name := range tools {
		s.Tools = append(s.Tools, &mcp.Tool{
			Name:        name,
			Description: "tool " + name,
			InputSchema: map[string]any{
				"type":       "object",
				"properties": map[string]any{"path": map[string]any{"type": "string"}},
			},
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: i%2 == 0, Title: "T " + name},
			Meta:        mcp.Meta{"upstream/rank": float64(i)},
		})
	}
	s.Prompts = []*mcp.Prompt{{Name: "greet", Description: "say hi"}, {Name: "read", Description: "prompt named like a tool"}}
	s.Resources = []*mcp.Resource{{URI: "file:///a", Name: "a"}, {URI: "file:///b", Name: "b"}}
	return s
}

var quiet = slog.New(slog.DiscardHandler)

type flags struct{ Trust, AlwaysLoad bool }

// toolFlags returns each projected tool's session flags by name.
func toolFlags(t *testing.T, p *view.Projection) map[string]flags {
	t.Helper()
	out := make(map[string]flags)
	for _, tool := range p.Tools {
		tr, ok1 := tool.Meta[view.MetaTrust].(bool)
		al, ok2 := tool.Meta[view.MetaAlwaysLoad].(bool)
		require.True(t, ok1 && ok2, "tool %q lacks the session flags: %v", tool.Name, tool.Meta)
		out[tool.Name] = flags{tr, al}
	}
	return out
}

func names[T any](items []*T, key func(*T) string) []string {
	out := []string{}
	for _, x := range items {
		out = append(out, key(x))
	}
	return out
}

func toolNames(p *view.Projection) []string {
	return names(p.Tools, func(t *mcp.Tool) string { return t.Name })
}

func promptNames(p *view.Projection) []string {
	return names(p.Prompts, func(x *mcp.Prompt) string { return x.Name })
}

func TestProject(t *testing.T) {
	ctx := context.Background()
	all := []string{"read", "write", "list", "delete"}
	tests := []struct {
		name     string
		settings string
		tools    []string
		prompts  []string
		flags    flags
	}{
		{"defaults", `{}`, all, []string{"greet", "read"}, flags{}},
		{"trust and alwaysLoad", `{"trust":true,"alwaysLoadTools":true}`, all, []string{"greet", "read"}, flags{true, true}},
		{"trust false", `{"trust":false}`, all, []string{"greet", "read"}, flags{}},
		{"include with args", `{"includeTools":["write(path)","read"]}`, []string{"read", "write"}, []string{"read"}, flags{}},
		{"exclude wins", `{"includeTools":["read","write"],"excludeTools":["read"]}`, []string{"write"}, []string{}, flags{}},
		{"empty include", `{"includeTools":[]}`, []string{}, []string{}, flags{}},
		{"null include", `{"includeTools":null}`, all, []string{"greet", "read"}, flags{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := newSnapshot(1, all...)
			p, err := view.Project(ctx, metakey.Reference{}, json.RawMessage(tc.settings), snap)
			require.NoError(t, err)
			assert.Equal(t, tc.tools, toolNames(p))
			assert.Equal(t, tc.prompts, promptNames(p))
			assert.Equal(t, snap.Resources, p.Resources, "resources are never filtered and are shared")
			for name, f := range toolFlags(t, p) {
				assert.Equal(t, tc.flags, f, name)
			}
			// Everything but the two flags reaches the session unchanged.
			byName := make(map[string]*mcp.Tool)
			for _, tool := range snap.Tools {
				byName[tool.Name] = tool
			}
			for _, tool := range p.Tools {
				orig := byName[tool.Name]
				require.NotSame(t, orig, tool, "projected tools are clones")
				assert.Equal(t, orig.Description, tool.Description)
				assert.Equal(t, orig.InputSchema, tool.InputSchema)
				assert.Same(t, orig.Annotations, tool.Annotations)
				assert.Equal(t, orig.Meta["upstream/rank"], tool.Meta["upstream/rank"])
			}
		})
	}
}

// TestSharedSnapshotIsolation projects one snapshot for two sessions with
// opposite flags and checks the snapshot is deep-equal to an untouched copy
// afterwards, and that each session keeps its own values.
func TestSharedSnapshotIsolation(t *testing.T) {
	ctx := context.Background()
	snap := newSnapshot(1, "a", "b")
	pristine := newSnapshot(1, "a", "b")

	on, err := view.Project(ctx, metakey.Reference{}, json.RawMessage(`{"trust":true,"alwaysLoadTools":true}`), snap)
	require.NoError(t, err)
	off, err := view.Project(ctx, metakey.Reference{}, json.RawMessage(`{"trust":false}`), snap)
	require.NoError(t, err)

	if diff := cmp.Diff(pristine, snap); diff != "" {
		t.Fatalf("snapshot mutated by projection (-want +got):\n%s", diff)
	}
	assert.Equal(t, map[string]flags{"a": {true, true}, "b": {true, true}}, toolFlags(t, on))
	assert.Equal(t, map[string]flags{"a": {}, "b": {}}, toolFlags(t, off))
	for _, tool := range snap.Tools {
		assert.NotContains(t, tool.Meta, view.MetaTrust)
		assert.NotContains(t, tool.Meta, view.MetaAlwaysLoad)
	}
}

// recordingPolicy records project requests and can say it wants
// annotations.
type recordingPolicy struct {
	metakey.Reference
	wants []string
	mu    *sync.Mutex
	reqs  *[]*abi.ProjectRequest
}

func (p recordingPolicy) Handshake() abi.Handshake {
	h := p.Reference.Handshake()
	h.Wants = p.wants
	return h
}

func (p recordingPolicy) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	p.mu.Lock()
	*p.reqs = append(*p.reqs, req)
	p.mu.Unlock()
	return p.Reference.Project(ctx, req)
}

func TestProjectNamesOnlyAndAnnotations(t *testing.T) {
	ctx := context.Background()
	snap := newSnapshot(1, "a", "b")
	snap.Tools[1].Annotations = nil
	for _, wants := range [][]string{nil, {abi.WantToolAnnotations}} {
		var reqs []*abi.ProjectRequest
		p := recordingPolicy{wants: wants, mu: &sync.Mutex{}, reqs: &reqs}
		_, err := view.Project(ctx, p, json.RawMessage(`{}`), snap)
		require.NoError(t, err)
		require.Len(t, reqs, 1)
		req := reqs[0]
		assert.Equal(t, []string{"a", "b"}, req.Tools)
		assert.Equal(t, []string{"greet", "read"}, req.Prompts)
		assert.Equal(t, []string{"file:///a", "file:///b"}, req.Resources)
		if wants == nil {
			assert.Nil(t, req.ToolAnnotations, "annotations only cross when wanted")
			continue
		}
		want0, err := json.Marshal(snap.Tools[0].Annotations)
		require.NoError(t, err)
		assert.Equal(t, []json.RawMessage{want0, json.RawMessage("null")}, req.ToolAnnotations)
	}
}

// badPolicy answers project with an index out of range.
type badPolicy struct{ metakey.Reference }

func (badPolicy) Project(context.Context, *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	return &abi.ProjectResponse{Tools: []abi.ToolDecision{{Index: 99}}}, nil
}

func TestProjectValidatesResponse(t *testing.T) {
	_, err := view.Project(context.Background(), badPolicy{}, json.RawMessage(`{}`), newSnapshot(1, "a"))
	require.ErrorContains(t, err, "out of range")
}

// togglePolicy fails every call while fail is set, for one server only
// when server is non-empty (it sees the server through the tool names: the
// tests give each server distinct tool names).
type togglePolicy struct {
	metakey.Reference
	fail *atomic.Bool
}

var errPluginDown = errors.New("plugin trapped")

func (p togglePolicy) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	if p.fail.Load() {
		return nil, errPluginDown
	}
	return p.Reference.Canonicalize(ctx, req)
}

func (p togglePolicy) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	if p.fail.Load() {
		return nil, errPluginDown
	}
	return p.Reference.Project(ctx, req)
}

type fixture struct {
	counters *opcount.Counters
	reg      *viewtest.Registry
	view     *view.View
	att      *view.Attachment
}

func newFixture(t *testing.T, policy abi.Policy, settings string, snap *pool.Snapshot) *fixture {
	t.Helper()
	f := &fixture{counters: &opcount.Counters{}, reg: viewtest.NewRegistry()}
	f.view = view.New(view.Config{Session: "s1", Server: "fs", Registry: f.reg, Counters: f.counters, Policy: policy, Settings: json.RawMessage(settings), Logger: quiet})
	att, err := f.view.Attach(view.NewMemo())
	require.NoError(t, err)
	f.att = att
	if snap != nil {
		require.NoError(t, att.Apply(context.Background(), snap))
	}
	return f
}

// requireRegistered checks the registry holds exactly the projection of
// snap under settings (computed independently with the reference policy).
func requireRegistered(t *testing.T, reg *viewtest.Registry, server, settings string, snap *pool.Snapshot) {
	t.Helper()
	want, err := view.Project(context.Background(), metakey.Reference{}, json.RawMessage(settings), snap)
	require.NoError(t, err)
	if diff := cmp.Diff(viewtest.StateOf(want), reg.State(server)); diff != "" {
		t.Fatalf("registry for %s (-want +got):\n%s", server, diff)
	}
}

func TestApplyRegistersProjection(t *testing.T) {
	snap := newSnapshot(1, "a", "b", "c")
	f := newFixture(t, metakey.Reference{}, `{"excludeTools":["b"],"trust":true}`, snap)
	requireRegistered(t, f.reg, "fs", `{"excludeTools":["b"],"trust":true}`, snap)
	assert.Equal(t, []string{"a", "c"}, f.reg.ToolNames("fs"))
	assert.Equal(t, `{"trust":true,"alwaysLoadTools":false,"includeTools":null,"excludeTools":["b"]}`, f.view.Key())
	// One put per kind.
	assert.Len(t, f.reg.Ops(), 3)
	d := f.counters.Snapshot()
	assert.Equal(t, int64(3), d.RegistryOps)
	assert.Equal(t, int64(2), d.PolicyCalls, "one canonicalize, one project")
	assert.Equal(t, int64(1), d.Replays)
}

// TestEquivalentFilterNormalization: canonically equal settings change
// nothing at all (no replay, no registry operation); different ones do.
func TestEquivalentFilterNormalization(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		from, to string
		same     bool // equal keys: no replay at all
		ops      bool // the replay changes registrations
	}{
		{"include order and duplicates", `{"includeTools":["b","a"]}`, `{"includeTools":["a","b","a"]}`, true, false},
		{"include args cut", `{"includeTools":["a(x, y)","b"]}`, `{"includeTools":["b","a"]}`, true, false},
		{"exclude missing vs empty", `{}`, `{"excludeTools":[]}`, true, false},
		{"exclude null vs empty", `{"excludeTools":null}`, `{"excludeTools":[]}`, true, false},
		{"exclude order", `{"excludeTools":["c","b"]}`, `{"excludeTools":["b","c","b"]}`, true, false},
		{"alwaysLoad missing vs false", `{}`, `{"alwaysLoadTools":false}`, true, false},
		{"include missing vs null", `{}`, `{"includeTools":null}`, true, false},
		{"unknown keys ignored", `{"trust":true}`, `{"trust":true,"description":"x"}`, true, false},
		{"whitespace", `{"trust":true}`, "{ \"trust\" : true }", true, false},
		// Distinct keys, same projection: a replay whose diff is empty.
		{"trust missing vs false", `{}`, `{"trust":false}`, false, false},
		{"exclude an unknown name", `{}`, `{"excludeTools":["zz"]}`, false, false},
		{"exclude is exact", `{"excludeTools":["a"]}`, `{"excludeTools":["a(x)"]}`, false, true},
		{"alwaysLoad true", `{}`, `{"alwaysLoadTools":true}`, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := newSnapshot(1, "a", "b", "c")
			f := newFixture(t, metakey.Reference{}, tc.from, snap)
			before := f.counters.Snapshot()
			opsBefore := f.reg.OpCount()
			changed, err := f.view.SetSettings(ctx, json.RawMessage(tc.to))
			require.NoError(t, err)
			d := f.counters.Snapshot().Sub(before)
			if tc.same {
				assert.False(t, changed)
				assert.Equal(t, opcount.Values{Refreshes: 1, PolicyCalls: 1}, d, "only the canonicalize call")
				assert.Equal(t, opsBefore, f.reg.OpCount())
			} else {
				assert.True(t, changed)
				assert.Equal(t, int64(1), d.Replays)
				assert.Equal(t, tc.ops, d.RegistryOps > 0, "registry ops: %d", d.RegistryOps)
			}
			requireRegistered(t, f.reg, "fs", tc.to, snap)
		})
	}
}

// TestAdoptSettings: a view takes equivalent settings without a policy
// call, replay or registry operation, and declines what it cannot vouch
// for: another key, another policy (or one held by value), no key yet, or
// a failed view.
func TestAdoptSettings(t *testing.T) {
	ctx := context.Background()
	ref := &metakey.Reference{}
	keyOf := func(settings string) string {
		key, err := view.CanonicalKey(ctx, ref, json.RawMessage(settings))
		require.NoError(t, err)
		return key
	}
	snap := newSnapshot(1, "a", "b", "c")
	f := newFixture(t, ref, `{"excludeTools":["b","a"]}`, snap)
	before, ops := f.counters.Snapshot(), f.reg.OpCount()
	equivalent := `{"excludeTools":["a","b","a"]}`
	require.True(t, f.view.AdoptSettings(json.RawMessage(equivalent), ref, keyOf(equivalent)))
	assert.Equal(t, equivalent, string(f.view.Settings()))
	assert.Equal(t, opcount.Values{Refreshes: 1}, f.counters.Snapshot().Sub(before), "no policy call, replay or registry operation")
	assert.Equal(t, ops, f.reg.OpCount())

	other := `{"excludeTools":["c"]}`
	assert.False(t, f.view.AdoptSettings(json.RawMessage(other), ref, keyOf(other)), "another key")
	assert.False(t, f.view.AdoptSettings(json.RawMessage(`{}`), &otherRef{}, keyOf(equivalent)), "another policy")
	assert.Equal(t, equivalent, string(f.view.Settings()), "declining changes nothing")

	byValue := newFixture(t, metakey.Reference{}, `{}`, snap)
	assert.False(t, byValue.view.AdoptSettings(json.RawMessage(`{ }`), metakey.Reference{}, keyOf(`{}`)), "a policy held by value")

	fresh := view.New(view.Config{Session: "s1", Server: "fs", Registry: viewtest.NewRegistry(), Counters: &opcount.Counters{}, Policy: ref, Settings: json.RawMessage(`{}`), Logger: quiet})
	assert.False(t, fresh.AdoptSettings(json.RawMessage(`{ }`), ref, keyOf(`{}`)), "no key computed yet")

	var fail atomic.Bool
	toggle := &togglePolicy{fail: &fail}
	bad := newFixture(t, toggle, `{}`, snap)
	key := bad.view.Key()
	require.True(t, bad.view.AdoptSettings(json.RawMessage(`{ }`), toggle, key), "healthy")
	fail.Store(true)
	_, err := bad.view.SetSettings(ctx, json.RawMessage(`{"trust":null}`))
	require.Error(t, err)
	fail.Store(false)
	assert.False(t, bad.view.AdoptSettings(json.RawMessage(`{}`), toggle, key), "a failed view")
}

// otherRef is the reference policy as another policy.
type otherRef struct{ metakey.Reference }

// bytesRef is the reference policy keying settings by their bytes: it
// tells apart every two forms of the same meaning.
type bytesRef struct{ metakey.Reference }

func (bytesRef) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	resp, err := metakey.Reference{}.Canonicalize(ctx, req)
	if err != nil {
		return nil, err
	}
	for i := range resp.Results {
		if resp.Results[i].Error == "" {
			resp.Results[i].Key = "bytes:" + string(req.Settings[i])
		}
	}
	return resp, nil
}

// TestSetPolicyWith: an owner that kept newer settings of the same meaning
// hands them over with a policy swap, which keys and projects the view by
// them; the view keeps them as given, and a nil policy changes nothing.
func TestSetPolicyWith(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, metakey.Reference{}, `{"excludeTools":["b","a"]}`, newSnapshot(1, "a", "b", "c"))
	newer := json.RawMessage(`{"excludeTools":["a","b","a"],"trust":true}`)
	require.NoError(t, f.view.SetPolicyWith(ctx, bytesRef{}, newer))
	assert.Equal(t, "bytes:"+string(newer), f.view.Key())
	assert.Equal(t, string(newer), string(f.view.Settings()))
	assert.Equal(t, []string{"c"}, f.reg.ToolNames("fs"))
	assert.Equal(t, map[string]flags{"c": {Trust: true}}, toolFlags(t, f.view.Applied()), "projected with the new settings")

	require.Error(t, f.view.SetPolicyWith(ctx, nil, json.RawMessage(`{}`)))
	assert.Equal(t, string(newer), string(f.view.Settings()), "a nil policy changes nothing")

	require.NoError(t, f.view.SetPolicyWith(ctx, bytesRef{}, nil))
	assert.Equal(t, "bytes:{}", f.view.Key(), "nil settings are {}")
	assert.Equal(t, []string{"a", "b", "c"}, f.reg.ToolNames("fs"))
}

// TestAbsentVersusEmptyInclude: a missing includeTools allows every tool, []
// allows none, and switching between them replays.
func TestAbsentVersusEmptyInclude(t *testing.T) {
	ctx := context.Background()
	snap := newSnapshot(1, "a", "b")
	f := newFixture(t, metakey.Reference{}, `{}`, snap)
	assert.Equal(t, []string{"a", "b"}, f.reg.ToolNames("fs"))
	assert.Equal(t, []string{"greet", "read"}, f.reg.PromptNames("fs"))

	changed, err := f.view.SetSettings(ctx, json.RawMessage(`{"includeTools":[]}`))
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Empty(t, f.reg.ToolNames("fs"))
	assert.Empty(t, f.reg.PromptNames("fs"))
	assert.Equal(t, []string{"file:///a", "file:///b"}, f.reg.ResourceURIs("fs"), "resources are never filtered")

	changed, err = f.view.SetSettings(ctx, json.RawMessage(`{"includeTools":null}`))
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, []string{"a", "b"}, f.reg.ToolNames("fs"))
}

// TestInPlaceSettingsMutation: the view copies the settings and keeps the
// key it computed, so mutating the caller's bytes changes nothing until
// they are set again, and then the change is detected.
func TestInPlaceSettingsMutation(t *testing.T) {
	ctx := context.Background()
	snap := newSnapshot(1, "a", "b")
	buf := []byte(`{"trust":true ,"excludeTools":["a"]}`)
	f := newFixture(t, metakey.Reference{}, `{}`, snap)
	changed, err := f.view.SetSettings(ctx, buf)
	require.NoError(t, err)
	require.True(t, changed)
	key := f.view.Key()
	ops := f.reg.OpCount()

	copy(buf, `{"trust":false,"excludeTools":["b"]}`)
	assert.Equal(t, `{"trust":true ,"excludeTools":["a"]}`, string(f.view.Settings()), "the view holds a private copy")
	assert.Equal(t, key, f.view.Key())
	assert.Equal(t, ops, f.reg.OpCount())
	requireRegistered(t, f.reg, "fs", `{"trust":true,"excludeTools":["a"]}`, snap)

	changed, err = f.view.SetSettings(ctx, buf)
	require.NoError(t, err)
	assert.True(t, changed, "the mutated object is compared with the captured key")
	requireRegistered(t, f.reg, "fs", string(buf), snap)
}

func TestDiffIsMinimal(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, metakey.Reference{}, `{"trust":true}`, newSnapshot(1, "a", "b"))
	n := f.reg.OpCount()

	// Same content in a new snapshot: new clones, deep-equal: no call.
	require.NoError(t, f.att.Apply(ctx, newSnapshot(2, "a", "b")))
	assert.Equal(t, n, f.reg.OpCount())

	// One tool added, one changed, one removed.
	s3 := newSnapshot(3, "b", "c")
	s3.Tools[0].Description = "changed"
	require.NoError(t, f.att.Apply(ctx, s3))
	assert.Equal(t, []viewtest.Op{
		{Method: "DeleteTools", Server: "fs", Keys: []string{"a"}},
		{Method: "PutTools", Server: "fs", Keys: []string{"b", "c"}},
	}, f.reg.Ops()[n:])
	requireRegistered(t, f.reg, "fs", `{"trust":true}`, s3)
}

func TestApplyIgnoresOlderSnapshot(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, metakey.Reference{}, `{}`, newSnapshot(5, "new"))
	require.NoError(t, f.att.Apply(ctx, newSnapshot(4, "old")))
	assert.Equal(t, []string{"new"}, f.reg.ToolNames("fs"))
}

// TestPolicyFailureFailsClosed: a failing policy removes everything from
// the server in this session and records why; other views are untouched; a
// later successful refresh restores the registrations.
func TestPolicyFailureFailsClosed(t *testing.T) {
	ctx := context.Background()
	snap := newSnapshot(1, "a", "b")
	var fail atomic.Bool
	bad := newFixture(t, togglePolicy{fail: &fail}, `{}`, snap)
	good := newFixture(t, metakey.Reference{}, `{}`, snap)
	require.Equal(t, []string{"a", "b"}, bad.reg.ToolNames("fs"))

	fail.Store(true)
	_, err := bad.view.SetSettings(ctx, json.RawMessage(`{"trust":true}`))
	require.ErrorIs(t, err, errPluginDown)
	assert.ErrorIs(t, bad.view.Err(), errPluginDown)
	assert.Empty(t, bad.reg.Servers(), "nothing from the server stays registered")
	assert.Nil(t, bad.view.Applied())
	assert.Equal(t, []string{"a", "b"}, good.reg.ToolNames("fs"))

	// pool.Snapshot fan-out while the plugin is still down keeps it closed.
	require.ErrorIs(t, bad.att.Apply(ctx, newSnapshot(2, "a", "b", "c")), errPluginDown)
	assert.Empty(t, bad.reg.Servers())

	fail.Store(false)
	changed, err := bad.view.SetSettings(ctx, json.RawMessage(`{"trust":true}`))
	require.NoError(t, err)
	assert.True(t, changed, "the key was forgotten on failure")
	assert.NoError(t, bad.view.Err())
	requireRegistered(t, bad.reg, "fs", `{"trust":true}`, newSnapshot(2, "a", "b", "c"))
}

func TestRefusedSettingsFailClosed(t *testing.T) {
	ctx := context.Background()
	snap := newSnapshot(1, "a")
	f := newFixture(t, metakey.Reference{}, `{}`, snap)
	_, err := f.view.SetSettings(ctx, json.RawMessage(`{"includeTools":["a",7]}`))
	require.ErrorIs(t, err, view.ErrRefused)
	assert.ErrorContains(t, err, "includeTools[1]")
	assert.ErrorContains(t, err, `session "s1", server "fs"`)
	assert.Empty(t, f.reg.Servers())

	// The same refused settings again: still closed, still an error.
	_, err = f.view.SetSettings(ctx, json.RawMessage(`{"includeTools":["a",7]}`))
	require.ErrorIs(t, err, view.ErrRefused)
	assert.Empty(t, f.reg.Servers())

	_, err = f.view.SetSettings(ctx, json.RawMessage(`{"includeTools":["a"]}`))
	require.NoError(t, err)
	requireRegistered(t, f.reg, "fs", `{"includeTools":["a"]}`, snap)
}

func TestNewViewWithRefusedSettingsShowsNothing(t *testing.T) {
	f := newFixture(t, metakey.Reference{}, `{"trust":"yes"}`, nil)
	err := f.att.Apply(context.Background(), newSnapshot(1, "a"))
	require.ErrorIs(t, err, view.ErrRefused)
	assert.Empty(t, f.reg.Servers())
}

// TestSetPolicyReprojects: a policy swap always re-projects (keys of two
// plugins are not comparable) but an unchanged outcome sends nothing.
func TestSetPolicyReprojects(t *testing.T) {
	ctx := context.Background()
	var fail atomic.Bool
	f := newFixture(t, metakey.Reference{}, `{"trust":true}`, newSnapshot(1, "a"))
	before := f.counters.Snapshot()
	require.NoError(t, f.view.SetPolicy(ctx, togglePolicy{fail: &fail}))
	d := f.counters.Snapshot().Sub(before)
	assert.Equal(t, opcount.Values{Replays: 1, PolicyCalls: 2}, d)

	fail.Store(true)
	require.ErrorIs(t, f.view.SetPolicy(ctx, togglePolicy{fail: &fail}), errPluginDown)
	assert.Empty(t, f.reg.Servers())
	require.NoError(t, f.view.SetPolicy(ctx, metakey.Reference{}))
	assert.Equal(t, []string{"a"}, f.reg.ToolNames("fs"))
}

// TestHoldDefersToNextApply: while held (a restart in progress) a settings
// change is captured but not replayed; the next Apply uses it.
func TestHoldDefersToNextApply(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, metakey.Reference{}, `{}`, newSnapshot(1, "a", "b"))
	f.att.Hold()
	ops := f.reg.OpCount()
	changed, err := f.view.SetSettings(ctx, json.RawMessage(`{"includeTools":["b","c"]}`))
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, ops, f.reg.OpCount(), "held: nothing replayed yet")
	assert.Equal(t, []string{"a", "b"}, f.reg.ToolNames("fs"))

	s2 := newSnapshot(2, "a", "b", "c")
	require.NoError(t, f.att.Apply(ctx, s2))
	requireRegistered(t, f.reg, "fs", `{"includeTools":["b","c"]}`, s2)
}

func TestWithdrawAndDetach(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, metakey.Reference{}, `{}`, newSnapshot(1, "a"))
	cause := errors.New("transport failed")
	f.att.Withdraw(cause)
	assert.Empty(t, f.reg.Servers())
	assert.ErrorIs(t, f.view.Err(), cause)
	require.NoError(t, f.att.Apply(ctx, newSnapshot(2, "a")))
	assert.Equal(t, []string{"a"}, f.reg.ToolNames("fs"))
	assert.NoError(t, f.view.Err())

	_, err := f.view.Attach(nil)
	require.ErrorIs(t, err, view.ErrAttached)

	f.att.Detach()
	assert.Empty(t, f.reg.Servers())
	assert.False(t, f.view.Attached())
	// A detached attachment is inert: a late fan-out registers nothing.
	require.NoError(t, f.att.Apply(ctx, newSnapshot(3, "a")))
	f.att.Hold()
	assert.Empty(t, f.reg.Servers())

	// Settings changes on a detached view are captured for the next attach.
	_, err = f.view.SetSettings(ctx, json.RawMessage(`{"trust":true}`))
	require.NoError(t, err)
	assert.Empty(t, f.reg.Servers())
	att, err := f.view.Attach(nil)
	require.NoError(t, err)
	require.NoError(t, att.Apply(ctx, newSnapshot(1, "z")))
	requireRegistered(t, f.reg, "fs", `{"trust":true}`, newSnapshot(1, "z"))

	// The old attachment stays inert after the view is attached again: a
	// late fan-out from the previous owner cannot reach the new one.
	require.NoError(t, f.att.Apply(ctx, newSnapshot(9, "from-old-owner")))
	f.att.Withdraw(errors.New("old owner failed"))
	f.att.Detach()
	requireRegistered(t, f.reg, "fs", `{"trust":true}`, newSnapshot(1, "z"))
	assert.True(t, f.view.Attached())
	assert.NoError(t, f.view.Err())
}

// TestHandover: a view handed to another owner keeps its registrations
// until that owner's first Apply, which sends only the difference; the old
// owner's attachment is inert from then on.
func TestHandover(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, metakey.Reference{}, `{}`, newSnapshot(7, "a", "b"))
	n := f.reg.OpCount()
	next := f.att.Handover(view.NewMemo())
	require.NotNil(t, next)
	assert.Equal(t, n, f.reg.OpCount(), "a handover alone changes no registration")
	assert.Equal(t, []string{"a", "b"}, f.reg.ToolNames("fs"))
	assert.True(t, f.view.Attached())

	// The old owner can no longer reach the view, nor hand it over again.
	require.NoError(t, f.att.Apply(ctx, newSnapshot(9, "from-old-owner")))
	f.att.Withdraw(errors.New("old owner failed"))
	f.att.Detach()
	assert.Nil(t, f.att.Handover(nil))
	assert.Equal(t, n, f.reg.OpCount())
	assert.NoError(t, f.view.Err())

	// The new owner's first snapshot (a lower version: a new connection
	// counts from 1) is applied as a diff: "b" is unchanged, "a" goes, "c"
	// comes.
	require.NoError(t, next.Apply(ctx, newSnapshot(1, "c", "b")))
	assert.Equal(t, []viewtest.Op{
		{Method: "DeleteTools", Server: "fs", Keys: []string{"a"}},
		{Method: "PutTools", Server: "fs", Keys: []string{"c"}},
	}, f.reg.Ops()[n:])
	requireRegistered(t, f.reg, "fs", `{}`, newSnapshot(1, "c", "b"))
}

// TestMemoSharesProjections: a fan-out to views with k distinct keys makes
// k project calls, and views with equal keys register the same projection.
func TestMemoSharesProjections(t *testing.T) {
	ctx := context.Background()
	c := &opcount.Counters{}
	memo := view.NewMemo()
	settings := []string{`{"trust":true}`, `{"trust":true,"excludeTools":[]}`, `{"trust":true}`, `{}`, `{"excludeTools":null}`}
	var views []*view.View
	var atts []*view.Attachment
	for i, s := range settings {
		v := view.New(view.Config{Session: fmt.Sprint("s", i), Server: "fs", Registry: viewtest.NewRegistry(), Counters: c, Policy: metakey.Reference{}, Settings: json.RawMessage(s), Logger: quiet})
		_, err := v.SetSettings(ctx, json.RawMessage(s))
		require.NoError(t, err)
		att, err := v.Attach(memo)
		require.NoError(t, err)
		views = append(views, v)
		atts = append(atts, att)
	}
	snap := newSnapshot(1, "a", "b")
	before := c.Snapshot()
	var wg sync.WaitGroup
	for _, att := range atts {
		wg.Go(func() { assert.NoError(t, att.Apply(ctx, snap)) })
	}
	wg.Wait()
	d := c.Snapshot().Sub(before)
	assert.Equal(t, int64(2), d.PolicyCalls, "two distinct keys")
	assert.Equal(t, int64(5), d.Replays)
	assert.Same(t, views[0].Applied(), views[1].Applied())
	assert.Same(t, views[3].Applied(), views[4].Applied())
	assert.NotSame(t, views[0].Applied(), views[3].Applied())

	// A memo keys on the policy too: another policy value does not share.
	var fail atomic.Bool
	require.NoError(t, views[2].SetPolicy(ctx, togglePolicy{fail: &fail}))
	assert.NotSame(t, views[0].Applied(), views[2].Applied())
}

// putRecorder is a registry that keeps the tool slices PutTools gets.
type putRecorder struct {
	*viewtest.Registry
	mu   sync.Mutex
	puts [][]*mcp.Tool
}

func (r *putRecorder) PutTools(server string, tools []*mcp.Tool) {
	r.mu.Lock()
	r.puts = append(r.puts, tools)
	r.mu.Unlock()
	r.Registry.PutTools(server, tools)
}

// TestMemoSharesDeltas: views with the same key move from the same
// projection to the same new one at a new snapshot, and the delta sent to
// their registries (which compares the tools deeply) is computed once and
// shared; each registry still gets exactly its own changes.
func TestMemoSharesDeltas(t *testing.T) {
	ctx := context.Background()
	c := &opcount.Counters{}
	memo := view.NewMemo()
	var regs []*putRecorder
	var atts []*view.Attachment
	for i := range 3 {
		reg := &putRecorder{Registry: viewtest.NewRegistry()}
		v := view.New(view.Config{Session: fmt.Sprint("s", i), Server: "fs", Registry: reg, Counters: c, Policy: metakey.Reference{}, Settings: json.RawMessage(`{"trust":true}`), Logger: quiet})
		att, err := v.Attach(memo)
		require.NoError(t, err)
		regs = append(regs, reg)
		atts = append(atts, att)
	}
	s1 := newSnapshot(1, "a", "b")
	for _, att := range atts {
		require.NoError(t, att.Apply(ctx, s1))
	}
	s2 := newSnapshot(2, "a", "b", "c")
	s2.Tools[1].Description = "changed"
	for _, att := range atts {
		require.NoError(t, att.Apply(ctx, s2))
	}
	for i, reg := range regs {
		require.Len(t, reg.puts, 2, "session %d: the first apply and the change", i)
		assert.Equal(t, []string{"b", "c"}, names(reg.puts[1], func(t *mcp.Tool) string { return t.Name }))
		assert.Same(t, &regs[0].puts[1][0], &reg.puts[1][0], "session %d: the delta is shared", i)
		requireRegistered(t, reg.Registry, "fs", `{"trust":true}`, s2)
	}
}

// TestViewConcurrency runs settings changes and applies from many
// goroutines; the final registry holds the projection of the final
// settings on the newest snapshot.
func TestViewConcurrency(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, metakey.Reference{}, `{}`, newSnapshot(1, "a"))
	settings := []string{`{}`, `{"trust":true}`, `{"includeTools":["b"]}`, `{"excludeTools":["a"]}`}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				if g%2 == 0 {
					_, err := f.view.SetSettings(ctx, json.RawMessage(settings[(g+i)%len(settings)]))
					assert.NoError(t, err)
				} else {
					assert.NoError(t, f.att.Apply(ctx, newSnapshot(uint64(i+2), "a", "b")))
				}
			}
		})
	}
	wg.Wait()
	final := `{"alwaysLoadTools":true}`
	_, err := f.view.SetSettings(ctx, json.RawMessage(final))
	require.NoError(t, err)
	requireRegistered(t, f.reg, "fs", final, newSnapshot(51, "a", "b"))
}

func TestCanonicalKey(t *testing.T) {
	ctx := context.Background()
	def, err := view.CanonicalKey(ctx, metakey.Reference{}, nil)
	require.NoError(t, err)
	assert.Equal(t, `{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}`, def)
	same, err := view.CanonicalKey(ctx, metakey.Reference{}, json.RawMessage(`{"excludeTools":null,"alwaysLoadTools":false}`))
	require.NoError(t, err)
	assert.Equal(t, def, same)
	_, err = view.CanonicalKey(ctx, metakey.Reference{}, json.RawMessage(`[]`))
	require.ErrorIs(t, err, view.ErrRefused)
	var fail atomic.Bool
	fail.Store(true)
	_, err = view.CanonicalKey(ctx, togglePolicy{fail: &fail}, json.RawMessage(`{}`))
	require.ErrorIs(t, err, errPluginDown)
}
