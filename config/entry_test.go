package config

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMergePatchRFC7386 runs the examples of RFC 7386, appendix A.
func TestMergePatchRFC7386(t *testing.T) {
	for _, tc := range []struct{ target, patch, want string }{
		{`{"a":"b"}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"b"}`, `{"b":"c"}`, `{"a":"b","b":"c"}`},
		{`{"a":"b"}`, `{"a":null}`, `{}`},
		{`{"a":"b","b":"c"}`, `{"a":null}`, `{"b":"c"}`},
		{`{"a":["b"]}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"c"}`, `{"a":["b"]}`, `{"a":["b"]}`},
		{`{"a":{"b":"c"}}`, `{"a":{"b":"d","c":null}}`, `{"a":{"b":"d"}}`},
		{`{"a":[{"b":"c"}]}`, `{"a":[1]}`, `{"a":[1]}`},
		{`["a","b"]`, `["c","d"]`, `["c","d"]`},
		{`{"a":"b"}`, `["c"]`, `["c"]`},
		{`{"a":"foo"}`, `null`, `null`},
		{`{"a":"foo"}`, `"bar"`, `"bar"`},
		{`{"e":null}`, `{"a":1}`, `{"e":null,"a":1}`},
		{`[1,2]`, `{"a":"b","c":null}`, `{"a":"b"}`},
		{`{}`, `{"a":{"bb":{"ccc":null}}}`, `{"a":{"bb":{}}}`},
		{``, `{"a":{"b":null}}`, `{"a":{}}`},
	} {
		got, err := MergePatch([]byte(tc.target), []byte(tc.patch))
		require.NoError(t, err, "%s + %s", tc.target, tc.patch)
		assert.JSONEq(t, tc.want, string(got), "%s + %s", tc.target, tc.patch)
	}
	_, err := MergePatch([]byte(`{}`), []byte(`{"a":1,`))
	assert.ErrorIs(t, err, ErrPatch)
	_, err = MergePatch([]byte(`{}`), []byte(`{"a":1,"a":2}`))
	assert.ErrorIs(t, err, ErrPatch)
	assert.Contains(t, err.Error(), `duplicate key`)
}

// TestServerEntryRoundTrip: every server of the full example, written
// with Entry and read back, is the same server.
func TestServerEntryRoundTrip(t *testing.T) {
	cfg, _ := parseFull(t)
	for name, srv := range cfg.Servers {
		doc, err := json.Marshal(map[string]any{"mcpServers": map[string]json.RawMessage{name: srv.Entry()}})
		require.NoError(t, err)
		back, _, err := Parse(cfg.File, doc, fakeEnv(nil), failRead)
		require.NoError(t, err, "%s: %s", name, srv.Entry())
		want := srv.Clone()
		if want.Cwd != "" {
			want.Cwd, err = filepath.Abs(want.Cwd)
			require.NoError(t, err)
		}
		if diff := cmp.Diff(want, back.Servers[name], cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: round trip mismatch (-want +got):\n%s", name, diff)
		}
	}
	srv := &Server{Name: "x", Command: "c", Settings: Settings{Extra: map[string]json.RawMessage{"maxRows": json.RawMessage(`3`)}}}
	assert.JSONEq(t, `{"command":"c","pooled":false,"maxRows":3}`, string(srv.Entry()))
}

// TestServerEntryRoundTripNewKeys: "maxListingBytes", "prefix" and
// "instructions" survive Entry, so that an overlay PATCH, which applies to
// the entry Entry writes, keeps them: a PATCH {"trust": true} must not put
// a listing cap back to its default (a new connection with a wider cap) or
// drop the server's prefix.
func TestServerEntryRoundTripNewKeys(t *testing.T) {
	doc := []byte(`{"mcpServers":{"fs":{"command":"c","maxListingBytes":65536,"prefix":"","instructions":true}},
		"sessions":{"a":{"token":"aaaaaaaaaaaaaaaaaaaa","servers":["fs"]}}}`)
	cfg, _, err := Parse("/x/c.json", doc, fakeEnv(nil), failRead)
	require.NoError(t, err)
	srv := cfg.Servers["fs"]
	require.Equal(t, int64(65536), srv.MaxListingBytes)
	back, _, err := Parse("/x/c.json", []byte(`{"mcpServers":{"fs":`+string(srv.Entry())+`}}`), fakeEnv(nil), failRead)
	require.NoError(t, err, "%s", srv.Entry())
	if diff := cmp.Diff(srv.Clone(), back.Servers["fs"], cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("round trip mismatch (-want +got):\n%s\nentry: %s", diff, srv.Entry())
	}
}
