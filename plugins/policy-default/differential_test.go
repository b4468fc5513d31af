//go:build !wasip1

package policydefault_test

// The differential test: the embedded wasm default policy, run through the
// real plugin runtime, against the native reference in package metakey.
// Both must give byte-identical canonical forms and keys, the same
// refusals with the same messages, and the same projections, through the
// project export and through the batched project_batch export. The bounded
// runs below are part of make test; FuzzWasmAgainstReference explores
// further with go test -fuzz.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/metakey"
)

// differentialRuns is how many generated settings objects, and how many
// generated (settings, snapshot) pairs, the bounded run compares: 10,000,
// or 2,000 in -short.
func differentialRuns() int {
	if testing.Short() {
		return 2_000
	}
	return 10_000
}

var (
	wasmOnce sync.Once
	wasmP    *host.Plugin
	wasmErr  error
)

// wasmPolicy loads the embedded default once per test binary, with a
// compilation cache shared between runs (host.DefaultCacheDir) and a call timeout generous enough for -race.
func wasmPolicy(tb testing.TB) *host.Plugin {
	tb.Helper()
	wasmOnce.Do(func() {
		wasmP, wasmErr = host.LoadEmbedded(context.Background(), policydefault.Name, policydefault.Wasm, policydefault.SHA256, host.Options{CacheDir: host.DefaultCacheDir(), CallTimeout: time.Minute})
	})
	require.NoError(tb, wasmErr)
	return wasmP
}

// names exercises the rules: cutting at '(', case, white space, empty
// names, HTML characters, escapes, non-ASCII text and invalid UTF-8.
var names = []string{
	"read_file", "read_file(path)", "write_file", "search", "Search", " search", "search ",
	"", "(", "(x)", "a(b)(c)", "a", "b", "ab", "a(", "x<y>&z", `q"uote`, `back\slash`,
	"é", "e\u0301", "日本", "😀", "\u2028", "tab\t", "\xff", "\xed\xa0\x80",
}

func genName(rng *rand.Rand) string { return names[rng.Intn(len(names))] }

func quote(rng *rand.Rand, s string) string {
	if rng.Intn(5) == 0 { // a \u-escaped spelling of the same string
		var b strings.Builder
		b.WriteByte('"')
		for _, r := range s {
			if r < 0x10000 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				q, _ := json.Marshal(string(r))
				b.Write(q[1 : len(q)-1])
			}
		}
		b.WriteByte('"')
		return b.String()
	}
	q, _ := json.Marshal(s)
	return string(q)
}

// genValue returns a JSON value for one of the four settings: well-typed
// most of the time, ill-typed often enough to exercise every refusal.
func genValue(rng *rand.Rand, list bool) string {
	switch n := rng.Intn(12); {
	case n == 0:
		return "null"
	case n == 1:
		return []string{"true", "false"}[rng.Intn(2)]
	case n == 2:
		return []string{`"false"`, `1`, `0`, `{}`, `{"a":1}`, `"x"`, `[null]`, `["a",7]`, `[true]`, `[[]]`}[rng.Intn(10)]
	case !list:
		return []string{"true", "false", "null"}[rng.Intn(3)]
	default:
		k := rng.Intn(6)
		parts := make([]string, k)
		for i := range parts {
			parts[i] = quote(rng, genName(rng))
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
}

var settingKeys = []string{"trust", "alwaysLoadTools", "includeTools", "excludeTools"}

// genSettings returns one raw settings object (rarely not an object, or with
// a duplicate or unknown key).
func genSettings(rng *rand.Rand) json.RawMessage {
	switch rng.Intn(60) {
	case 0:
		return json.RawMessage(`[]`)
	case 1:
		return json.RawMessage(`null`)
	case 2:
		return json.RawMessage(`"trust"`)
	}
	var parts []string
	for i, k := range settingKeys {
		if rng.Intn(3) == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%q:%s", k, genValue(rng, i >= 2)))
	}
	switch rng.Intn(30) {
	case 0:
		parts = append(parts, `"trust":true`)
	case 1:
		parts = append(parts, `"description":"ignored"`)
	}
	rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	sep := ","
	if rng.Intn(4) == 0 {
		sep = " ,\n "
	}
	return json.RawMessage("{" + strings.Join(parts, sep) + "}")
}

func genProject(rng *rand.Rand) *abi.ProjectRequest {
	req := &abi.ProjectRequest{Settings: genSettings(rng), Tools: []string{}, Prompts: []string{}, Resources: []string{}}
	for range rng.Intn(12) {
		req.Tools = append(req.Tools, genName(rng))
	}
	for range rng.Intn(4) {
		req.Prompts = append(req.Prompts, genName(rng))
	}
	for i := range rng.Intn(3) {
		req.Resources = append(req.Resources, fmt.Sprintf("file:///r%d", i))
	}
	return req
}

// roundTrip gives the reference the strings the plugin actually receives
// in a request: a JSON round trip turns invalid UTF-8 into U+FFFD on the
// way in.
func roundTrip[T any](t testing.TB, req *T) *T {
	t.Helper()
	b, err := json.Marshal(req)
	require.NoError(t, err)
	var out T
	require.NoError(t, json.Unmarshal(b, &out))
	return &out
}

// compareCanonicalize compares one batch and returns how many settings
// objects both sides refused.
func compareCanonicalize(t testing.TB, settings []json.RawMessage) (refused int) {
	t.Helper()
	ctx := context.Background()
	req := &abi.CanonicalizeRequest{Settings: settings}
	got, err := wasmPolicy(t).Canonicalize(ctx, req)
	require.NoError(t, err)
	want, err := metakey.Reference{}.Canonicalize(ctx, req)
	require.NoError(t, err)
	for i := range settings {
		w, g := want.Results[i], got.Results[i]
		if w.Key != g.Key || w.Error != g.Error || string(w.Canonical) != string(g.Canonical) {
			t.Fatalf("settings %s:\n reference: key=%q canonical=%s error=%q\n wasm:      key=%q canonical=%s error=%q",
				settings[i], w.Key, w.Canonical, w.Error, g.Key, g.Canonical, g.Error)
		}
		if w.Error != "" {
			refused++
		}
	}
	return refused
}

// compareProject compares one projection and returns how many tools the
// session sees (-1 when both sides refused the settings).
func compareProject(t testing.TB, req *abi.ProjectRequest) (visible int) {
	t.Helper()
	ctx := context.Background()
	got, gerr := wasmPolicy(t).Project(ctx, req)
	want, werr := metakey.Reference{}.Project(ctx, roundTrip(t, req))
	if (gerr != nil) != (werr != nil) {
		t.Fatalf("settings %s: reference error %v, wasm error %v", req.Settings, werr, gerr)
	}
	if werr != nil {
		require.ErrorIs(t, gerr, host.ErrPluginRefused, "settings %s", req.Settings)
		return -1
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("project %s over tools %q prompts %q: (-reference +wasm)\n%s", req.Settings, req.Tools, req.Prompts, diff)
	}
	return len(got.Tools)
}

func TestWasmMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewSource(20261130))
	settings := make([]json.RawMessage, differentialRuns())
	for i := range settings {
		settings[i] = genSettings(rng)
	}
	// One batch through the real host (split into ABI-sized calls there).
	refused := compareCanonicalize(t, settings)
	var projRefused, empty, shown int
	for range differentialRuns() {
		switch n := compareProject(t, genProject(rng)); {
		case n < 0:
			projRefused++
		case n == 0:
			empty++
		default:
			shown++
		}
	}
	// The generator must exercise both sides of every rule, or the
	// comparison says little.
	t.Logf("canonicalize: %d of %d refused; project: %d refused, %d empty, %d with visible tools",
		refused, differentialRuns(), projRefused, empty, shown)
	require.Greater(t, refused, differentialRuns()/10, "too few refused settings")
	require.Less(t, refused, differentialRuns()*9/10, "too few accepted settings")
	require.Greater(t, shown, differentialRuns()/5, "too few projections with visible tools")
	require.Greater(t, empty+projRefused, differentialRuns()/10, "too few projections hiding everything")
}

// genBatch returns a project_batch request of about n items over a few
// generated settings objects and snapshots.
func genBatch(rng *rand.Rand, n int) *abi.ProjectBatchRequest {
	req := &abi.ProjectBatchRequest{}
	for range 1 + rng.Intn(n/4+1) {
		req.Settings = append(req.Settings, genSettings(rng))
	}
	for range 1 + rng.Intn(n/8+1) {
		p := genProject(rng)
		req.Snapshots = append(req.Snapshots, abi.BatchSnapshot{Tools: p.Tools, Prompts: p.Prompts, Resources: p.Resources})
	}
	for range n {
		req.Items = append(req.Items, abi.BatchItem{Settings: rng.Intn(len(req.Settings)), Snapshot: rng.Intn(len(req.Snapshots))})
	}
	return req
}

// compareProjectBatch compares one batch through the project_batch export
// with the reference's batch and with the wasm plugin's project export item
// by item, and returns how many items were refused.
func compareProjectBatch(t testing.TB, req *abi.ProjectBatchRequest) (refused int) {
	t.Helper()
	ctx := context.Background()
	p := wasmPolicy(t)
	// Without the export the host would answer item by item with project.
	require.True(t, p.HasProjectBatch(), "the plugin has no project_batch export")
	got, err := p.ProjectBatch(ctx, req)
	require.NoError(t, err)
	want, err := metakey.Reference{}.ProjectBatch(ctx, roundTrip(t, req))
	require.NoError(t, err)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("project_batch %s: (-reference +wasm)\n%s", mustJSON(t, req), diff)
	}
	for i, r := range got.Results {
		single, err := p.Project(ctx, req.ItemRequest(i))
		if r.Error != "" {
			refused++
			require.ErrorIs(t, err, host.ErrPluginRefused, "items[%d]: refused in a batch, not alone", i)
			require.True(t, strings.HasSuffix(err.Error(), ": "+r.Error), "items[%d]: %q is not the message of %v", i, r.Error, err)
			continue
		}
		require.NoError(t, err, "items[%d]", i)
		if diff := cmp.Diff(single, r.ProjectResponse); diff != "" {
			t.Fatalf("items[%d] of %s: (-project +project_batch)\n%s", i, mustJSON(t, req), diff)
		}
	}
	return refused
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestWasmBatchMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewSource(20261201))
	var items, refused int
	for items < differentialRuns() {
		req := genBatch(rng, 1+rng.Intn(400))
		refused += compareProjectBatch(t, req)
		items += len(req.Items)
	}
	t.Logf("project_batch: %d of %d items refused", refused, items)
	require.Greater(t, refused, items/20, "too few refused items")
	require.Less(t, refused, items*9/10, "too few projected items")
}

func FuzzWasmAgainstReference(f *testing.F) {
	f.Add([]byte(`{}`), "read_file\x00b(x)\x00")
	f.Add([]byte(`{"includeTools":["a(b)","a"],"excludeTools":["b"],"trust":true}`), "a\x00b\x00\x00")
	f.Add([]byte(`{"includeTools":["a",7]}`), "a")
	f.Add([]byte(`{"trust":true,"trust":false}`), "")
	f.Fuzz(func(t *testing.T, settings []byte, tools string) {
		if !json.Valid(settings) {
			// The host only sends valid JSON; compare what it can send.
			return
		}
		compareCanonicalize(t, []json.RawMessage{settings})
		req := &abi.ProjectRequest{
			Settings: settings, Tools: strings.Split(tools, "\x00"),
			Prompts: []string{}, Resources: []string{"file:///x"},
		}
		compareProject(t, req)
		compareProjectBatch(t, &abi.ProjectBatchRequest{
			Settings: []json.RawMessage{settings, json.RawMessage(`{"excludeTools":["a"]}`)},
			Snapshots: []abi.BatchSnapshot{
				{Tools: req.Tools, Prompts: req.Tools, Resources: req.Resources},
				{Tools: []string{"a", "b"}, Prompts: []string{}, Resources: []string{}},
			},
			Items: []abi.BatchItem{{Settings: 0, Snapshot: 0}, {Settings: 1, Snapshot: 0}, {Settings: 0, Snapshot: 1}, {Settings: 1, Snapshot: 1}},
		})
	})
}
