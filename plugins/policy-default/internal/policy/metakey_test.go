package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/metakey"
)

// The tests in this file compare this package, written independently of the
// native reference in package metakey, with that reference: same canonical
// bytes, same keys, same refusals with the same messages, same projections.

// namePool holds tool names and list entries that exercise the rules:
// cutting at '(', duplicates, case, white space, escapes, non-ASCII text and
// invalid UTF-8.
var namePool = []string{
	"read_file", "write_file", "read_file(path)", "search", "Search", " search", "search ",
	"", "(", "(x)", "a(b)(c)", "a", "b", "c", "ab", "a(", "x<y>&z", `q"uote`, `back\slash`,
	"é", "e\u0301", "日本", "😀", "\u2028", "\x00", "tab\t", "\xff", "bad\xc3", "\xed\xa0\x80",
}

// jsonString writes s as a JSON string literal in one of several equivalent
// spellings, or, with invalid UTF-8, raw.
func jsonString(rng *rand.Rand, s string) string {
	switch rng.Intn(4) {
	case 0: // every character as \u escapes
		var b strings.Builder
		b.WriteByte('"')
		for _, r := range s {
			if r > 0xffff {
				r1, r2 := 0xd800+((r-0x10000)>>10), 0xdc00+((r-0x10000)&0x3ff)
				fmt.Fprintf(&b, `\u%04x\u%04X`, r1, r2)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		}
		b.WriteByte('"')
		return b.String()
	case 1: // raw bytes where JSON allows them (invalid UTF-8 included)
		var b strings.Builder
		b.WriteByte('"')
		for i := 0; i < len(s); i++ {
			switch c := s[i]; {
			case c == '"' || c == '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case c < 0x20:
				fmt.Fprintf(&b, `\u%04x`, c)
			default:
				b.WriteByte(c)
			}
		}
		b.WriteByte('"')
		return b.String()
	default:
		q, _ := json.Marshal(s)
		return string(q)
	}
}

// randomValue writes an arbitrary JSON value, nested up to depth.
func randomValue(rng *rand.Rand, depth int) string {
	n := 7
	if depth <= 0 {
		n = 5
	}
	switch rng.Intn(n) {
	case 0:
		return "null"
	case 1:
		return []string{"true", "false"}[rng.Intn(2)]
	case 2:
		return []string{"0", "-1", "7", "1.5e3", "-0.25"}[rng.Intn(5)]
	case 3, 4:
		return jsonString(rng, namePool[rng.Intn(len(namePool))])
	case 5:
		var parts []string
		for range rng.Intn(4) {
			parts = append(parts, randomValue(rng, depth-1))
		}
		return "[" + strings.Join(parts, ",") + "]"
	default:
		var parts []string
		for range rng.Intn(4) {
			parts = append(parts, jsonString(rng, namePool[rng.Intn(len(namePool))])+":"+randomValue(rng, depth-1))
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
}

// randomList writes a value for includeTools or excludeTools: mostly an
// array of names, sometimes null, sometimes ill-typed.
func randomList(rng *rand.Rand) string {
	switch rng.Intn(12) {
	case 0:
		return "null"
	case 1:
		return randomValue(rng, 1) // often ill-typed
	}
	var parts []string
	for range rng.Intn(6) {
		if rng.Intn(25) == 0 {
			parts = append(parts, randomValue(rng, 1)) // an ill-typed entry, most likely
		} else {
			parts = append(parts, jsonString(rng, namePool[rng.Intn(len(namePool))]))
		}
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// randomBool writes a value for trust or alwaysLoadTools.
func randomBool(rng *rand.Rand) string {
	if rng.Intn(15) == 0 {
		return randomValue(rng, 1)
	}
	return []string{"true", "false", "null"}[rng.Intn(3)]
}

var settingKeys = []string{"trust", "alwaysLoadTools", "includeTools", "excludeTools"}

// randomSettings writes a raw settings object: mostly well-typed, with
// white space, escaped keys, other keys, and now and then a duplicate key,
// an ill-typed value, a value that is not an object, or broken JSON.
func randomSettings(rng *rand.Rand) []byte {
	ws := func() string {
		if rng.Intn(4) == 0 {
			return []string{" ", "\n", "\t", "\r\n  "}[rng.Intn(4)]
		}
		return ""
	}
	if rng.Intn(40) == 0 {
		return []byte(ws() + randomValue(rng, 2) + ws())
	}
	var members []string
	for _, i := range rng.Perm(len(settingKeys) + 2) {
		if rng.Intn(3) == 0 {
			continue
		}
		var key, val string
		if i >= len(settingKeys) {
			key = []string{"command", "args", "env", "Trust", "INCLUDETOOLS", "url", "trust "}[rng.Intn(7)]
			val = randomValue(rng, 2)
		} else {
			key = settingKeys[i]
			if i < 2 {
				val = randomBool(rng)
			} else {
				val = randomList(rng)
			}
		}
		keyLit := jsonString(rng, key)
		members = append(members, ws()+keyLit+ws()+":"+ws()+val+ws())
		if rng.Intn(40) == 0 {
			members = append(members, ws()+jsonString(rng, key)+":"+val)
		}
	}
	doc := []byte(ws() + "{" + strings.Join(members, ",") + "}" + ws())
	if rng.Intn(40) == 0 && len(doc) > 0 {
		// Break it: cut it short, or drop or change one byte.
		i := rng.Intn(len(doc))
		switch rng.Intn(3) {
		case 0:
			doc = doc[:i]
		case 1:
			doc = append(doc[:i:i], doc[i+1:]...)
		default:
			const junk = "{}[],:\"\\x0 "
			doc[i] = junk[rng.Intn(len(junk))]
		}
	}
	return doc
}

// diffInputs is how many generated inputs each differential test
// compares: 10,000, or 2,000 in -short.
func diffInputs() int {
	if testing.Short() {
		return 2000
	}
	return 10000
}

func TestDifferentialParseSettings(t *testing.T) {
	rng := rand.New(rand.NewSource(20240611))
	var refused, malformed int
	for n := range diffInputs() {
		raw := randomSettings(rng)
		got, gotErr := ParseSettings(raw)
		ref, refErr := metakey.ParseSettings(raw)
		if refErr != nil {
			if json.Valid(raw) {
				refused++
			} else {
				malformed++
			}
			require.Errorf(t, gotErr, "input %d %q: reference refuses with %q", n, raw, refErr)
			require.Equalf(t, refErr.Error(), gotErr.Error(), "input %d %q", n, raw)
			continue
		}
		require.NoErrorf(t, gotErr, "input %d %q", n, raw)
		refCanonical := ref.Canonical()
		want, err := refCanonical.MarshalJSON()
		require.NoError(t, err)
		require.Equalf(t, string(want), string(got.AppendJSON(nil)), "input %d %q", n, raw)
		require.Equalf(t, refCanonical.Key(), got.Key(), "input %d %q", n, raw)
		if diff := quickDiff(refCanonical, metakey.Canonical(got)); diff != "" {
			t.Fatalf("input %d %q: canonical (-reference +plugin logic):\n%s", n, raw, diff)
		}
		for _, name := range namePool {
			require.Equalf(t, refCanonical.Visible(name), got.Visible(name), "input %d %q, name %q", n, raw, name)
		}
	}
	// The generator must reach every outcome often enough to matter.
	t.Logf("%d inputs: %d refused, %d malformed", diffInputs(), refused, malformed)
	assert.Greater(t, refused, diffInputs()/20)
	assert.Greater(t, malformed, diffInputs()/100)
	assert.Less(t, refused+malformed, diffInputs()/2)
}

func TestDifferentialCanonicalize(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	ctx := context.Background()
	total := 0
	for total < diffInputs() {
		var req abi.CanonicalizeRequest
		for range 1 + rng.Intn(300) {
			raw := randomSettings(rng)
			if json.Valid(raw) { // only valid JSON can be sent in a request
				req.Settings = append(req.Settings, raw)
			}
		}
		total += len(req.Settings)
		want, err := metakey.Reference{}.Canonicalize(ctx, &req)
		require.NoError(t, err)
		in, err := json.Marshal(&req)
		require.NoError(t, err)
		out, err := Canonicalize(in)
		require.NoError(t, err)
		var got abi.CanonicalizeResponse
		require.NoError(t, json.Unmarshal(out, &got))
		got = withKeys(t, got)
		require.NoError(t, abi.ValidateCanonicalize(&req, &got))
		if diff := quickDiff(want, &got); diff != "" {
			t.Fatalf("canonicalize (-reference +plugin logic):\n%s", diff)
		}
	}
}

func TestDifferentialProject(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	ctx := context.Background()
	names := func() []string {
		var out []string
		for range rng.Intn(30) {
			out = append(out, namePool[rng.Intn(len(namePool))])
		}
		return out
	}
	var refusedCount int
	for n := range diffInputs() {
		raw := randomSettings(rng)
		if !json.Valid(raw) {
			continue
		}
		req := abi.ProjectRequest{Settings: raw, Tools: names(), Prompts: names()}
		for i := range rng.Intn(4) {
			req.Resources = append(req.Resources, "file:///r"+strconv.Itoa(i))
		}
		if rng.Intn(3) == 0 {
			for range req.Tools {
				req.ToolAnnotations = append(req.ToolAnnotations, json.RawMessage(`{"readOnlyHint":true}`))
			}
		}
		in, err := json.Marshal(&req)
		require.NoError(t, err)
		// The reference gets the request as the plugin sees it: names with
		// invalid UTF-8 reach a plugin with U+FFFD in place of the bad bytes.
		var sent abi.ProjectRequest
		require.NoError(t, json.Unmarshal(in, &sent))
		want, refErr := metakey.Reference{}.Project(ctx, &sent)
		out, gotErr := Project(in)
		if refErr != nil {
			refusedCount++
			require.Errorf(t, gotErr, "input %d %q: reference refuses with %v", n, raw, refErr)
			continue
		}
		require.NoErrorf(t, gotErr, "input %d %q", n, raw)
		var got abi.ProjectResponse
		require.NoError(t, json.Unmarshal(out, &got))
		require.NoError(t, abi.ValidateProject(&req, &got))
		if diff := quickDiff(want, &got); diff != "" {
			t.Fatalf("input %d %q: project (-reference +plugin logic):\n%s", n, raw, diff)
		}
	}
	assert.Greater(t, refusedCount, diffInputs()/20)
}

// FuzzAgainstReference checks ParseSettings against metakey.ParseSettings
// on arbitrary bytes: the same refusals with the same messages, or the same
// canonical bytes.
func FuzzAgainstReference(f *testing.F) {
	rng := rand.New(rand.NewSource(17))
	for range 50 {
		f.Add(randomSettings(rng))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, gotErr := ParseSettings(raw)
		ref, refErr := metakey.ParseSettings(raw)
		if refErr != nil || gotErr != nil {
			if refErr == nil || gotErr == nil || refErr.Error() != gotErr.Error() {
				t.Fatalf("%q: reference error %v, plugin logic error %v", raw, refErr, gotErr)
			}
			return
		}
		want, _ := ref.Canonical().MarshalJSON()
		if string(want) != string(got.AppendJSON(nil)) {
			t.Fatalf("%q: reference %s, plugin logic %s", raw, want, got.AppendJSON(nil))
		}
	})
}
