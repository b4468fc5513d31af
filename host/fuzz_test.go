package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/metakey"
)

// The fuzz targets below feed arbitrary bytes as a plugin's output to the
// host's decoding and validation: decodeChecked (the compact decoder or
// decodeStrict, then abi.ValidateCanonicalize or abi.ValidateProject), which
// Plugin.Canonicalize and Plugin.Project hand to Plugin.call. An
// output that is valid JSON (not a JSON string, which would be one of the
// script plugin's directives) also goes end to end through a real plugin
// call: the script.wat echo plugin returns its settings as its output, so
// the host decodes exactly those bytes in Plugin.call. The two paths must
// agree, and the call must return either a valid response or an error
// wrapping ErrBadOutput, never panic.

// seedCanonicalizeOutputs are real canonicalize outputs (the reference
// policy's, byte for byte what the default plugin answers) and broken ones.
func seedCanonicalizeOutputs(t testing.TB) [][]byte {
	settings := raws(`{}`, `{"trust":true,"includeTools":["read_file(path)","list_dir","list_dir"]}`,
		`{"trust":"yes"}`, `{"excludeTools":["<b>&"],"alwaysLoadTools":true}`, `[]`)
	var out [][]byte
	for i := range settings {
		resp, err := metakey.Reference{}.Canonicalize(context.Background(), &abi.CanonicalizeRequest{Settings: settings[:i+1]})
		require.NoError(t, err)
		b, err := json.Marshal(resp)
		require.NoError(t, err)
		out = append(out, b)
	}
	for _, s := range []string{
		``, `null`, `[]`, `{}`, `"x"`, `{"results":null}`, `{"results":[]}`,
		`{"results":[{"key":"a"}]} `, `{"results":[{"key":"a"}]}{}`, `{"results":[{"key":"a"}]}x`,
		`{"results":[{"key":"a","error":"b"}]}`, `{"results":[{}]}`, `{"results":[{"canonical":1}]}`,
		`{"results":[{"key":1}]}`, `{"results":[{"key":"a","extra":true}]}`, `{"Results":[{"Key":"a"}]}`,
		`{"results":[{"key":"a"}],"results":[]}`, "\ufeff{\"results\":[]}", `{"results":[{"key":"\ud800"}]}`,
		`{"results":[{"key":"a","canonical":{"x":[1,2,{"y":null}]}}]}`, `{"results":[null]}`,
		`{"results":[{"error":"no"},{"key":"k","canonical":"c"}]}`,
	} {
		out = append(out, []byte(s))
	}
	return out
}

// checkCanonicalizeResponse checks, independently of abi.ValidateCanonicalize,
// that resp is a valid answer to a request of n settings objects.
func checkCanonicalizeResponse(t *testing.T, n int, resp *abi.CanonicalizeResponse) {
	t.Helper()
	require.Len(t, resp.Results, n)
	for i, r := range resp.Results {
		assert.True(t, (r.Key == "") != (r.Error == ""), "results[%d] %+v: exactly one of key and error", i, r)
		assert.LessOrEqual(t, len(r.Key), abi.MaxKeyBytes)
		if len(r.Canonical) > 0 {
			assert.True(t, json.Valid(r.Canonical), "results[%d]: canonical %q is not JSON", i, r.Canonical)
		}
	}
}

// echoable reports whether the script plugin echoes out as its output (a
// JSON value that is not a string; project needs an object or array).
func echoable(out []byte, container bool) bool {
	if !json.Valid(out) {
		return false
	}
	trimmed := bytes.TrimLeft(out, " \t\r\n")
	if container {
		return trimmed[0] == '{' || trimmed[0] == '['
	}
	return trimmed[0] != '"'
}

// onTheWire returns settings as the host sends them to a plugin (compact,
// HTML-escaped, as encoding/json marshals a json.RawMessage).
func onTheWire(t *testing.T, settings []byte) []byte {
	b, err := json.Marshal(json.RawMessage(settings))
	require.NoError(t, err)
	return b
}

func FuzzDecodeCanonicalizeOutput(f *testing.F) {
	for _, out := range seedCanonicalizeOutputs(f) {
		f.Add(out, uint8(1))
		f.Add(out, uint8(2))
	}
	script := loadWat(f, "script", Options{})
	f.Fuzz(func(t *testing.T, out []byte, n uint8) {
		req := &abi.CanonicalizeRequest{Settings: make([]json.RawMessage, n%6)}
		for i := range req.Settings {
			req.Settings[i] = json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
		}
		if resp, err := decodeChecked(req, out, decodeCanonicalizeCompact, abi.ValidateCanonicalize); err == nil {
			checkCanonicalizeResponse(t, len(req.Settings), resp)
		}

		if !echoable(out, false) {
			return
		}
		// The script plugin answers {"results":[S]} for the settings S.
		wire := append(append([]byte(`{"results":[`), onTheWire(t, out)...), "]}"...)
		one := &abi.CanonicalizeRequest{Settings: []json.RawMessage{out}}
		want, wantErr := decodeChecked(one, wire, decodeCanonicalizeCompact, abi.ValidateCanonicalize)
		got, err := script.Canonicalize(context.Background(), one)
		if err != nil {
			require.ErrorIs(t, err, ErrBadOutput, "output %q", wire)
			require.Error(t, wantErr, "the call failed, decoding the same output does not: %v", err)
			return
		}
		require.NoError(t, wantErr, "the call succeeded, decoding the same output does not")
		checkCanonicalizeResponse(t, 1, got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("output %q (-decoded +call):\n%s", wire, diff)
		}
	})
}

// seedProjectOutputs are real project outputs (the reference policy's) and
// broken ones, for projectFuzzReq(4, 3, 2).
func seedProjectOutputs(t testing.TB) [][]byte {
	var out [][]byte
	for _, s := range []string{`{}`, `{"includeTools":["b","d"],"trust":true,"alwaysLoadTools":true}`, `{"includeTools":[]}`, `{"excludeTools":["a","b","c","d"]}`} {
		resp, err := metakey.Reference{}.Project(context.Background(), projectFuzzReq(json.RawMessage(s), 4, 3, 2))
		require.NoError(t, err)
		b, err := json.Marshal(resp)
		require.NoError(t, err)
		out = append(out, b)
	}
	for _, s := range []string{
		``, `null`, `[]`, `{}`, `"x"`, `{"tools":null,"prompts":null,"resources":null}`,
		`{"tools":[{"i":5,"trust":true,"alwaysLoad":false}],"prompts":[],"resources":[]}`,
		`{"tools":[],"prompts":[-1],"resources":[]}`, `{"tools":[],"prompts":[],"resources":[1,0]}`,
		`{"tools":[],"prompts":[],"resources":[1,1]}`, `{"tools":[],"extra":true}`, `{"tools":{"i":0}}`,
		`{"prompts":[0.5]}`, `{"prompts":[1e400]}`, `{"prompts":[9223372036854775808]}`, `{"tools":[{"i":-0}]}`,
		`{"tools":[{"i":0,"trust":"yes"}]}`, `{"tools":[{}]}`, `{"tools":[{"i":1},{"i":0}]}`,
		`{"tools":[],"tools":[{"i":3}]}`, `{"resources":[0,1]}x`, `{"resources":[0,1]} {}`,
		`{"tools":[{"i":0,"I":1}]}`, `[{"i":0}]`, `{"prompts":[0,1,2,3]}`,
	} {
		out = append(out, []byte(s))
	}
	return out
}

// projectFuzzReq is a project request with nt tools, np prompts and nr
// resources.
func projectFuzzReq(settings json.RawMessage, nt, np, nr int) *abi.ProjectRequest {
	req := &abi.ProjectRequest{Settings: settings, Tools: []string{}, Prompts: []string{}, Resources: []string{}}
	for i := range nt {
		req.Tools = append(req.Tools, string(rune('a'+i)))
	}
	for i := range np {
		req.Prompts = append(req.Prompts, fmt.Sprintf("p%d", i))
	}
	for i := range nr {
		req.Resources = append(req.Resources, fmt.Sprintf("file:///r%d", i))
	}
	return req
}

// checkProjectResponse checks, independently of abi.ValidateProject, that
// every index of resp is in range and strictly increasing in its list.
func checkProjectResponse(t *testing.T, req *abi.ProjectRequest, resp *abi.ProjectResponse) {
	t.Helper()
	var tools []int
	for _, d := range resp.Tools {
		tools = append(tools, d.Index)
	}
	for _, l := range []struct {
		name string
		idx  []int
		n    int
	}{{"tools", tools, len(req.Tools)}, {"prompts", resp.Prompts, len(req.Prompts)}, {"resources", resp.Resources, len(req.Resources)}} {
		for j, i := range l.idx {
			require.True(t, i >= 0 && i < l.n, "%s[%d] = %d out of range [0,%d)", l.name, j, i, l.n)
			if j > 0 {
				require.Greater(t, i, l.idx[j-1], "%s[%d] not increasing", l.name, j)
			}
		}
	}
}

func FuzzDecodeProjectOutput(f *testing.F) {
	for _, out := range seedProjectOutputs(f) {
		f.Add(out, uint8(4), uint8(3), uint8(2))
		f.Add(out, uint8(1), uint8(0), uint8(5))
	}
	script := loadWat(f, "script", Options{})
	f.Fuzz(func(t *testing.T, out []byte, nt, np, nr uint8) {
		req := projectFuzzReq(nil, int(nt%8), int(np%8), int(nr%8))
		if resp, err := decodeChecked(req, out, decodeProjectCompact, abi.ValidateProject); err == nil {
			checkProjectResponse(t, req, resp)
		}

		if !echoable(out, true) {
			return
		}
		// The script plugin answers its settings.
		req.Settings = out
		wire := onTheWire(t, out)
		want, wantErr := decodeChecked(req, wire, decodeProjectCompact, abi.ValidateProject)
		got, err := script.Project(context.Background(), req)
		if err != nil {
			require.ErrorIs(t, err, ErrBadOutput, "output %q", wire)
			require.Error(t, wantErr, "the call failed, decoding the same output does not: %v", err)
			return
		}
		require.NoError(t, wantErr, "the call succeeded, decoding the same output does not")
		checkProjectResponse(t, req, got)
		if diff := cmp.Diff(nonNilResponse(want), got); diff != "" {
			t.Fatalf("output %q (-decoded +call):\n%s", wire, diff)
		}
	})
}
