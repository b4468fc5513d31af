// Package prefix is the logic of the prefix-policy test plugin: a policy
// with rules of its own, written against the same ABI v1 as the default
// policy, to show that the ABI does not assume the default rules.
//
// The rules, deny by default:
//
//   - Only includeTools is read, as a list of name prefixes. A tool or
//     prompt is visible when its name is not empty and starts with one of
//     them; a missing or null includeTools shows no tool and no prompt.
//     Resources are always visible.
//   - trust, excludeTools, alwaysLoadTools and every other key are ignored.
//   - A visible tool whose MCP annotations have readOnlyHint true is
//     trusted, and only a trusted tool is loaded eagerly (alwaysLoad).
//   - The canonical form is {"prefixes": [...]} with the prefixes sorted by
//     bytes and deduplicated, or {"prefixes": null}; the key is its compact
//     JSON.
//
// Speed does not matter here, so it uses encoding/json throughout.
package prefix

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/wasmhost/wasmhost/abi"
)

// Handshake is the plugin's handshake: it wants tool annotations.
var Handshake = abi.Handshake{
	ABI:     abi.Version,
	Name:    "prefix-policy",
	Version: "1.0.0",
	Wants:   []string{abi.WantToolAnnotations},
}

// A Canonical is the canonical form of a settings object.
type Canonical struct {
	// Prefixes is nil when includeTools is missing or null (nothing
	// visible); otherwise sorted and free of duplicates.
	Prefixes []string `json:"prefixes"`
}

// Visible reports whether a tool or prompt called name is shown.
func (c Canonical) Visible(name string) bool {
	if name == "" {
		return false
	}
	for _, p := range c.Prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// kind names the JSON type of a valid JSON value, for refusal messages.
func kind(raw json.RawMessage) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// ParseSettings reads one raw settings object. It refuses invalid JSON, a
// value that is not an object, a repeated includeTools key and an
// includeTools that is not null or an array of strings.
func ParseSettings(raw json.RawMessage) (Canonical, error) {
	if !json.Valid(raw) {
		return Canonical{}, errors.New("invalid JSON")
	}
	if k := kind(raw); k != "an object" {
		return Canonical{}, fmt.Errorf("expected an object, got %s", k)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // '{'
		return Canonical{}, err
	}
	var (
		c    Canonical
		seen bool
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return Canonical{}, err
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return Canonical{}, err
		}
		if tok != "includeTools" {
			continue
		}
		if seen {
			return Canonical{}, errors.New(`duplicate key "includeTools"`)
		}
		seen = true
		if c.Prefixes, err = prefixes(value); err != nil {
			return Canonical{}, err
		}
	}
	return c, nil
}

// prefixes reads the includeTools value: null, or an array of strings,
// returned sorted and deduplicated.
func prefixes(value json.RawMessage) ([]string, error) {
	switch kind(value) {
	case "null":
		return nil, nil
	case "an array":
	default:
		return nil, fmt.Errorf("includeTools: expected an array of strings or null, got %s", kind(value))
	}
	var items []json.RawMessage
	if err := json.Unmarshal(value, &items); err != nil {
		return nil, fmt.Errorf("includeTools: %w", err)
	}
	list := make([]string, 0, len(items))
	for i, item := range items {
		if k := kind(item); k != "a string" {
			return nil, fmt.Errorf("includeTools[%d]: expected a string, got %s", i, k)
		}
		var s string
		if err := json.Unmarshal(item, &s); err != nil {
			return nil, fmt.Errorf("includeTools[%d]: %w", i, err)
		}
		list = append(list, s)
	}
	slices.Sort(list)
	return slices.Compact(list), nil
}

// Canonicalize answers a canonicalize request (abi.CanonicalizeRequest as
// JSON) with an abi.CanonicalizeResponse as JSON.
func Canonicalize(in []byte) ([]byte, error) {
	var req abi.CanonicalizeRequest
	if err := json.Unmarshal(in, &req); err != nil {
		return nil, fmt.Errorf("canonicalize request: %w", err)
	}
	resp := abi.CanonicalizeResponse{Results: make([]abi.CanonicalResult, len(req.Settings))}
	for i, raw := range req.Settings {
		c, err := ParseSettings(raw)
		if err != nil {
			resp.Results[i].Error = err.Error()
			continue
		}
		key, err := json.Marshal(c)
		if err != nil {
			return nil, fmt.Errorf("canonicalize: settings[%d]: %w", i, err)
		}
		if len(key) > abi.MaxKeyBytes {
			resp.Results[i].Error = fmt.Sprintf("canonical form is %d bytes, more than the %d bytes a key may hold", len(key), abi.MaxKeyBytes)
			continue
		}
		resp.Results[i] = abi.CanonicalResult{Canonical: key, Key: string(key)}
	}
	return json.Marshal(&resp)
}

// readOnly reports whether an MCP tool annotations object says
// readOnlyHint: true. Anything else, including null, a missing hint or an
// annotation that cannot be read, counts as not read-only.
func readOnly(annotations json.RawMessage) bool {
	var a struct {
		ReadOnlyHint *bool `json:"readOnlyHint"`
	}
	if kind(annotations) != "an object" || json.Unmarshal(annotations, &a) != nil {
		return false
	}
	return a.ReadOnlyHint != nil && *a.ReadOnlyHint
}

// Project answers a project request (abi.ProjectRequest as JSON) with an
// abi.ProjectResponse as JSON. Refused settings refuse the call. A tool
// without an annotations entry is not trusted.
func Project(in []byte) ([]byte, error) {
	var req abi.ProjectRequest
	if err := json.Unmarshal(in, &req); err != nil {
		return nil, fmt.Errorf("project request: %w", err)
	}
	c, err := ParseSettings(req.Settings)
	if err != nil {
		return nil, fmt.Errorf("project: settings refused: %w", err)
	}
	resp := abi.ProjectResponse{Tools: []abi.ToolDecision{}, Prompts: []int{}, Resources: []int{}}
	for i, name := range req.Tools {
		if !c.Visible(name) {
			continue
		}
		trusted := i < len(req.ToolAnnotations) && readOnly(req.ToolAnnotations[i])
		resp.Tools = append(resp.Tools, abi.ToolDecision{Index: i, Trust: trusted, AlwaysLoad: trusted})
	}
	for i, name := range req.Prompts {
		if c.Visible(name) {
			resp.Prompts = append(resp.Prompts, i)
		}
	}
	for i := range req.Resources {
		resp.Resources = append(resp.Resources, i)
	}
	return json.Marshal(&resp)
}
