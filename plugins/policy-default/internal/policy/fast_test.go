package policy

import (
	"encoding/json"
	"math/rand"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parseBoth reads raw with the fast path allowed and with the general parser
// only. It reports whether the fast path took the object.
func parseBoth(t *testing.T, raw []byte) (fastTook bool) {
	t.Helper()
	fp := parser{scanner: scanner{buf: raw, alias: true}}
	fc, fok := fp.fast()
	gp := parser{scanner: scanner{buf: raw, alias: true}, general: true}
	gc, refused, err := gp.settings()
	if !fok {
		require.Equal(t, 0, fp.pos, "%q: a refused fast path must consume nothing", raw)
		return false
	}
	require.NoError(t, err, "%q: the fast path took what the general parser finds malformed", raw)
	require.NoError(t, refused, "%q: the fast path took what the general parser refuses", raw)
	require.Equal(t, gp.pos, fp.pos, "%q", raw)
	if diff := quickDiff(gc, fc, cmp.AllowUnexported(canon{})); diff != "" {
		t.Fatalf("%q: canon (-general +fast):\n%s", raw, diff)
	}
	return true
}

func TestFastPathMatchesGeneralParser(t *testing.T) {
	for _, raw := range []string{
		`{}`, `{"trust":true}`, `{"trust":false,"alwaysLoadTools":true}`, `{"trust":null,"alwaysLoadTools":null,"includeTools":null,"excludeTools":null}`,
		`{"includeTools":[]}`, `{"includeTools":["b","a(x)","a","(y)",""]}`, `{"excludeTools":["z(x)","a","a"]}`,
		`{"includeTools":["<&>"],"excludeTools":["x<y"]}`, `{"command":"npx","url":null,"x":true,"y":false}`,
		// Forms the fast path leaves to the general parser.
		`{ }`, `{"trust" :true}`, `{"trust":1}`, `{"trust":"x"}`, `{"trust":true,"trust":true}`, `{"a":1,"a":2}`,
		`{"a":1}`, `{"a":[]}`, `{"a":{}}`, `{"includeTools":["\u0061"]}`, `{"includeTools":["é"]}`, `{"includeTools":[1]}`,
		`{"includeTools":"x"}`, `{"tr\u0075st":true}`, `{"trust":tru}`, `{"trust":true`, `{"includeTools":["a"`, `{"includeTools":["a",]}`,
		`{"trust":true,}`, `[]`, `null`, `{"a":"x","a":"y"}`, `{"excludeTools":["a"],"excludeTools":[]}`,
		// Other keys with flat values, as server entries have them.
		`{"command":"npx","args":["-y","@modelcontextprotocol/server-1"],"trust":true,"includeTools":["grep(pattern, path)"]}`,
		`{"env":{"A":"b","C":null},"timeout":30,"n":-1,"z":0,"args":[],"o":{}}`,
		`{"a":[1,]}`, `{"a":01}`, `{"a":-}`, `{"a":-0}`, `{"a":1.5}`, `{"a":1e3}`, `{"a":{"b":1,"b":2}}`, `{"a":[[1]]}`,
		`{"a":{"b":}}`, `{"a":{1:2}}`, `{"a":[1 2]}`, `{"a":{"b" :1}}`, `{"a":["x"`, `{"a":{"b":"c"`, `{"a":[true,false,null,"s",7]}`,
	} {
		parseBoth(t, []byte(raw))
	}
	rng := rand.New(rand.NewSource(13))
	for range diffInputs() {
		raw := randomSettings(rng)
		parseBoth(t, raw)
		if json.Valid(raw) {
			// The same in the host's compact form.
			b, err := json.Marshal(json.RawMessage(raw))
			require.NoError(t, err)
			parseBoth(t, b)
		}
	}
	// Settings as the host sends them mostly: marshaled by encoding/json,
	// well typed, plain names. The fast path must take nearly all.
	ascii := namePool[:16] // no character encoding/json escapes
	took := 0
	for range diffInputs() {
		m := map[string]any{}
		for _, k := range settingKeys {
			switch rng.Intn(3) {
			case 0:
				continue
			case 1:
				m[k] = nil
			default:
				if k == "trust" || k == "alwaysLoadTools" {
					m[k] = rng.Intn(2) == 0
				} else {
					var names []string
					for range rng.Intn(6) {
						names = append(names, ascii[rng.Intn(len(ascii))])
					}
					m[k] = names
				}
			}
		}
		raw, err := json.Marshal(m)
		require.NoError(t, err)
		// Inside a request, more JSON always follows the object.
		if parseBoth(t, append(raw, ",{}]}"...)) {
			took++
		}
	}
	assert.Greater(t, took, diffInputs()*9/10, "the fast path must take the host's usual form")
}

// FuzzFastPath checks that the fast path either leaves an input alone or
// reads it exactly as the general parser does.
func FuzzFastPath(f *testing.F) {
	for _, s := range []string{`{}`, `{"trust":true,"includeTools":["a(b)","c"],"excludeTools":["<"],"x":"y"}`, `{"includeTools":["a",1]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		parseBoth(t, raw)
	})
}
