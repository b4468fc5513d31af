package main

import "encoding/json"

// The JSON messages of wasmhost's plugin ABI v1. They are copied here (and
// kept minimal) so this project depends on nothing but the Extism Go PDK;
// wasmhost's abi package has the documented originals.

// handshakeMessage is the output of the handshake export: the plugin's
// name and version, shown to operators, the ABI version the host checks,
// the optional inputs it wants in project calls and the per-server
// settings keys it owns.
type handshakeMessage struct {
	ABI          int      `json:"abi"`
	Name         string   `json:"name"`
	Version      string   `json:"version"`
	Wants        []string `json:"wants,omitempty"`
	SettingsKeys []string `json:"settingsKeys,omitempty"`
	// Renames opts into exposed names (and descriptions) in project
	// answers: toolDecision.Name, promptDecision.Name.
	Renames bool `json:"renames,omitempty"`
}

// canonicalizeRequest holds raw settings objects, exactly as configured.
type canonicalizeRequest struct {
	Settings []json.RawMessage `json:"settings"`
}

// canonicalizeResponse has one result per settings object, in order.
type canonicalizeResponse struct {
	Results []canonicalResult `json:"results"`
}

// A canonicalResult carries either a canonical form and its key, or the
// reason the settings object was refused.
type canonicalResult struct {
	Canonical json.RawMessage `json:"canonical,omitempty"`
	Key       string          `json:"key,omitempty"`
	Error     string          `json:"error,omitempty"`
}

// projectRequest holds one session's settings and the names in one server's
// snapshot, in snapshot order. ToolAnnotations, parallel to Tools, holds
// each tool's MCP annotations object (or null): the host sends it because
// the handshake wants "toolAnnotations".
type projectRequest struct {
	Settings        json.RawMessage   `json:"settings"`
	Tools           []string          `json:"tools"`
	ToolAnnotations []json.RawMessage `json:"toolAnnotations"`
	Prompts         []string          `json:"prompts"`
	Resources       []string          `json:"resources"`
}

// projectResponse lists, by strictly increasing index into the request's
// lists, what the session sees.
type projectResponse struct {
	Tools     []toolDecision   `json:"tools"`
	Prompts   []promptDecision `json:"prompts"`
	Resources []int            `json:"resources"`
}

// A toolDecision makes the tool at index I visible with its session flags
// and, when Name is set, under that name instead of the upstream's.
type toolDecision struct {
	I          int    `json:"i"`
	Trust      bool   `json:"trust"`
	AlwaysLoad bool   `json:"alwaysLoad"`
	Name       string `json:"name,omitempty"`
}

// A promptDecision makes the prompt at index I visible, under Name when
// it is set. On the wire it is the bare index, or {"i": I, "name": Name}.
type promptDecision struct {
	I    int
	Name string
}

// MarshalJSON writes the prompt as its index, or as an object when it is
// renamed.
func (d promptDecision) MarshalJSON() ([]byte, error) {
	if d.Name == "" {
		return json.Marshal(d.I)
	}
	return json.Marshal(struct {
		I    int    `json:"i"`
		Name string `json:"name"`
	}{d.I, d.Name})
}
