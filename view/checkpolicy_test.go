package view_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/view"
)

// requiresInclude is a policy that refuses settings without includeTools,
// {} among them, as the ABI allows, and fails its calls when broken is set.
type requiresInclude struct{ broken bool }

func (requiresInclude) Handshake() abi.Handshake {
	return abi.Handshake{ABI: abi.Version, Name: "requires-include", Version: "1"}
}

func (r requiresInclude) Canonicalize(_ context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	if r.broken {
		return nil, errors.New("canonicalize: plugin trapped")
	}
	resp := &abi.CanonicalizeResponse{Results: make([]abi.CanonicalResult, len(req.Settings))}
	for i, raw := range req.Settings {
		var s map[string]json.RawMessage
		if err := json.Unmarshal(raw, &s); err != nil || s["includeTools"] == nil {
			resp.Results[i].Error = "includeTools: required"
			continue
		}
		resp.Results[i].Key = string(raw)
	}
	return resp, nil
}

func (requiresInclude) Project(_ context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	var s map[string]json.RawMessage
	if err := json.Unmarshal(req.Settings, &s); err != nil || s["includeTools"] == nil {
		return nil, fmt.Errorf("%w: includeTools: required", abi.ErrRefused)
	}
	return &abi.ProjectResponse{}, nil
}

// The trial calls ask a policy about {}: a policy that refuses {} (the ABI
// lets it) answered, and is not broken; one whose call fails is.
func TestCheckPolicyAcceptsARefusalOfEmptySettings(t *testing.T) {
	require.NoError(t, view.CheckPolicy(t.Context(), requiresInclude{}))
	assert.ErrorContains(t, view.CheckPolicy(t.Context(), requiresInclude{broken: true}), "plugin trapped")
}
