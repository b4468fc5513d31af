package conformance

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/metakey"
)

// wantsPolicy is the reference policy with a handshake of the test's
// choosing.
type wantsPolicy struct {
	metakey.Reference
	h abi.Handshake
}

func (w wantsPolicy) Handshake() abi.Handshake { return w.h }

const wantsSuite = `{"suite": "wants", "cases": [
  {"name": "annotated", "settings": {}, "snapshot": {"tools": [
     {"name": "plain", "inputSchema": {"type": "object"}},
     {"name": "ro", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}]},
   "project": {"tools": [{"name": "plain", "trust": false, "alwaysLoad": false}, {"name": "ro", "trust": false, "alwaysLoad": false}]}},
  {"name": "plugin key", "canonical": {"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]},
   "settings": {"readOnlyOnly": true}},
  {"name": "refused key", "settings": {"trust": "yes", "other": 1}, "reject": true},
  {"name": "plain", "settings": {"trust": true}, "snapshot": {"tools": [{"name": "a", "inputSchema": {"type": "object"}}]},
   "project": {"tools": [{"name": "a", "trust": true, "alwaysLoad": false}]}}
]}`

// The runner warns when a case's snapshot gives inputs the plugin did not
// ask for: tool annotations without wants ["toolAnnotations"]. A warning
// does not fail the case, and a plugin that asks for them gets none.
func TestRunWarnsAboutInputsNotWanted(t *testing.T) {
	s := ParseSuite([]byte(wantsSuite))
	s.File = "wants.json"
	require.NoError(t, s.Err)
	plain := wantsPolicy{h: abi.Handshake{ABI: abi.Version, Name: "plain", Version: "1"}}
	r := Run(t.Context(), plain, []*Suite{s})
	require.Len(t, r.Results, 4)
	for _, res := range r.Results {
		assert.True(t, res.Passed, "warnings do not fail a case: %s", res.String())
	}
	assert.Equal(t, []string{`snapshot.tools[1] "ro" has annotations, but the plugin's handshake does not want "toolAnnotations", so project never sees them`}, r.Results[0].Warnings)
	assert.Empty(t, r.Results[1].Warnings)
	assert.Empty(t, r.Results[2].Warnings)
	assert.Empty(t, r.Results[3].Warnings)

	var out bytes.Buffer
	require.NoError(t, r.WriteText(&out, false))
	assert.Contains(t, out.String(), `WARN wants.json: annotated: snapshot.tools[1] "ro" has annotations`)
	assert.Equal(t, 1, strings.Count(out.String(), "WARN "), out.String())

	asks := wantsPolicy{h: abi.Handshake{ABI: abi.Version, Name: "asks", Version: "1",
		Wants: []string{abi.WantToolAnnotations}, SettingsKeys: []string{"readOnlyOnly"}}}
	r = Run(t.Context(), asks, []*Suite{s})
	for _, res := range r.Results {
		assert.Empty(t, res.Warnings, res.Case)
	}
}
