package abi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestToolDecisionUnmarshal(t *testing.T) {
	tests := []struct {
		in   string
		want ToolDecision
		err  string
	}{
		{`{"i":3,"trust":true,"alwaysLoad":true}`, ToolDecision{Index: 3, Trust: true, AlwaysLoad: true}, ""},
		{`{"i":0}`, ToolDecision{}, ""},
		{`{"trust":true}`, ToolDecision{}, `"i" is missing`},
		{`{"i":1,"extra":1}`, ToolDecision{}, `unknown field "extra"`},
		{`{"i":"1"}`, ToolDecision{}, "cannot unmarshal string"},
		{`[1]`, ToolDecision{}, "cannot unmarshal array"},
		// Flags in any order and spelling; the last of a repeated member wins.
		{`{"i":12}`, ToolDecision{Index: 12}, ""},
		{`{"i":7,"trust":true}`, ToolDecision{Index: 7, Trust: true}, ""},
		{`{"i":7,"alwaysLoad":true}`, ToolDecision{Index: 7, AlwaysLoad: true}, ""},
		{`{"i":0,"trust":false,"alwaysLoad":true}`, ToolDecision{AlwaysLoad: true}, ""},
		{`{"i":123456789,"trust":true,"alwaysLoad":false}`, ToolDecision{Index: 123456789, Trust: true}, ""},
		{`{"i":1234567890}`, ToolDecision{Index: 1234567890}, ""},
		{`{"alwaysLoad":true,"trust":true,"i":4}`, ToolDecision{Index: 4, Trust: true, AlwaysLoad: true}, ""},
		{`{"i":4,"trust":true,"trust":false}`, ToolDecision{Index: 4}, ""},
		{`{"i": 4}`, ToolDecision{Index: 4}, ""},
		{`{"i":-4}`, ToolDecision{Index: -4}, ""},
		{`{"i":4,"trust":null}`, ToolDecision{Index: 4}, ""},
		{`{"i":4,"trust":true,"x":1}`, ToolDecision{}, `unknown field "x"`},
		{`{"i":4,"trust":1}`, ToolDecision{}, "cannot unmarshal number"},
		{`{"i":4.5}`, ToolDecision{}, "cannot unmarshal number 4.5"},
		{`{"i":1e2}`, ToolDecision{}, "cannot unmarshal number 1e2"},
		{`{"i":4,"trust":truex}`, ToolDecision{}, "invalid character"},
	}
	for _, tt := range tests {
		var d ToolDecision
		err := json.Unmarshal([]byte(tt.in), &d)
		if tt.err != "" {
			require.Error(t, err, tt.in)
			assert.Contains(t, err.Error(), tt.err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		assert.Equal(t, tt.want, d, tt.in)
	}
}

func TestValidateHandshake(t *testing.T) {
	require.NoError(t, ValidateHandshake(&Handshake{ABI: Version, Name: "p"}))
	require.NoError(t, ValidateHandshake(&Handshake{ABI: Version, Name: "p", Wants: []string{WantToolAnnotations}}))
	err := ValidateHandshake(&Handshake{ABI: 2, Name: "p"})
	require.Error(t, err)
	assert.Equal(t, `plugin "p" speaks wasmhost ABI v2, this host speaks ABI v1`, err.Error())
	assert.ErrorContains(t, ValidateHandshake(&Handshake{ABI: Version}), "name is empty")
	assert.ErrorContains(t, ValidateHandshake(&Handshake{ABI: Version, Name: "p", Wants: []string{"schemas"}}), `wants[0]: unknown input "schemas"`)
}

func TestValidateCanonicalize(t *testing.T) {
	req := &CanonicalizeRequest{Settings: []json.RawMessage{[]byte(`{}`), []byte(`{}`)}}
	ok := &CanonicalizeResponse{Results: []CanonicalResult{{Key: "a"}, {Error: "no"}}}
	require.NoError(t, ValidateCanonicalize(req, ok))
	for name, resp := range map[string]*CanonicalizeResponse{
		"1 results for 2":        {Results: []CanonicalResult{{Key: "a"}}},
		"both error and key set": {Results: []CanonicalResult{{Key: "a"}, {Key: "b", Error: "x"}}},
		"neither a key (keys are never empty) nor an error": {Results: []CanonicalResult{{Key: "a"}, {}}},
		"limit 65536": {Results: []CanonicalResult{{Key: "a"}, {Key: strings.Repeat("k", MaxKeyBytes+1)}}},
	} {
		assert.ErrorContains(t, ValidateCanonicalize(req, resp), name)
	}
}

func TestValidateProject(t *testing.T) {
	req := &ProjectRequest{Tools: []string{"a", "b", "c"}, Prompts: []string{"p"}, Resources: []string{"r1", "r2"}}
	ok := &ProjectResponse{Tools: []ToolDecision{{Index: 0}, {Index: 2, Trust: true}}, Prompts: []int{0}, Resources: []int{0, 1}}
	require.NoError(t, ValidateProject(req, ok))
	require.NoError(t, ValidateProject(req, &ProjectResponse{}), "an empty projection is valid")
	for name, resp := range map[string]*ProjectResponse{
		"tools[1]: index 3 out of range [0,3)":         {Tools: []ToolDecision{{Index: 0}, {Index: 3}}},
		"tools[0]: index -1 out of range":              {Tools: []ToolDecision{{Index: -1}}},
		"tools[1]: index 1 not after previous index 1": {Tools: []ToolDecision{{Index: 1}, {Index: 1}}},
		"prompts[0]: index 1 out of range [0,1)":       {Prompts: []int{1}},
		"resources[1]: index 0 not after previous":     {Resources: []int{1, 0}},
	} {
		assert.ErrorContains(t, ValidateProject(req, resp), name)
	}
}
