package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strings"
)

// team-access gives each session the tools of one team. The teams and
// the tools each may use come from the plugin's configuration (the
// handshake's input, "policy": {"config": ...} in the wasmhost config):
//
//	{"teams": {"ops": ["deploy_*", "get_logs"], "support": ["get_logs", "search_tickets"]}}
//
// An entry ending in "*" allows every name that starts with what comes
// before it. A server entry or a session override picks the team with the
// settings key "team", which this plugin owns (settingsKeys), and may make
// the session read-only with "readOnly": true, the other key it owns: then
// only tools annotated readOnlyHint: true are visible (the handshake wants
// "toolAnnotations").
//
// Names longer than the configuration's "maxNameLength" (default 64, the
// longest name many model APIs take; set it lower to leave room for the
// "server__" prefix a session may add) are shortened: their first
// characters, "_" and 8 hex digits of a hash of the whole name, so that
// two long names stay apart. "names" gives exact exposed names instead:
//
//	{"teams": {...}, "maxNameLength": 48, "names": {"search_all_tickets_in_every_project": "search_tickets"}}
//
// Teams, includeTools and excludeTools name tools by their upstream names.
// Two visible tools (or prompts) that would get one name refuse the
// projection, naming both.
//
// wasmhost's own settings narrow that further: includeTools (when set) and
// excludeTools, exact names, and trust and alwaysLoadTools flag every
// visible tool. Prompts follow the same allow list, without the read-only
// rule. Without a team, a session sees nothing of the server; a team the
// configuration does not name, and a setting of the wrong JSON type, are
// refused, so a typo never loads.

// A teamRules is one team's allow list.
type teamRules struct {
	exact    map[string]bool
	prefixes []string // of entries ending in "*", without it
}

func (r teamRules) allows(name string) bool {
	if r.exact[name] {
		return true
	}
	for _, p := range r.prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// The configuration, set by configure: the allow list of each team, the
// longest name exposed as it is and the exact renames.
var (
	teams         map[string]teamRules
	maxNameLength int
	names         map[string]string
)

// Bounds of "maxNameLength": a shortened name keeps at least one
// character of the upstream's before its 9-character hash suffix, and MCP
// allows names of up to 128 characters.
const (
	minNameLength     = 10
	maxMCPNameLength  = 128
	defaultNameLength = 64
)

// validName reports whether name follows MCP's rule for tool names (ASCII
// letters, digits, '_', '-' and '.') and fits limit.
func validName(name string, limit int) bool {
	if name == "" || len(name) > limit {
		return false
	}
	for _, r := range name {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// exposedName is the name a session sees for the upstream's name, or ""
// to keep it.
func exposedName(name string) string {
	if n, ok := names[name]; ok {
		return n
	}
	if len(name) <= maxNameLength {
		return ""
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("%s_%08x", name[:maxNameLength-9], h.Sum32())
}

// configure reads the handshake's input, {"abi": 1, "config": {...}}, and
// sets teams. The plugin cannot work without a configuration, so a missing
// or unreadable one refuses the handshake, and with it the plugin.
func configure(input []byte) error {
	if len(bytes.TrimSpace(input)) == 0 {
		return errors.New(`no configuration: give the plugin {"teams": {"TEAM": ["tool", "prefix*", ...]}} as "policy": {"config": ...}`)
	}
	var req struct {
		Config json.RawMessage `json:"config"`
	}
	if err := json.Unmarshal(input, &req); err != nil {
		return fmt.Errorf("handshake input: %w", err)
	}
	var cfg struct {
		Teams         map[string][]string `json:"teams"`
		MaxNameLength *int                `json:"maxNameLength"`
		Names         map[string]string   `json:"names"`
	}
	dec := json.NewDecoder(bytes.NewReader(req.Config))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if len(cfg.Teams) == 0 {
		return errors.New("config.teams: no team")
	}
	t := make(map[string]teamRules, len(cfg.Teams))
	for team, names := range cfg.Teams {
		if team == "" {
			return errors.New("config.teams: a team with an empty name")
		}
		r := teamRules{exact: map[string]bool{}}
		for i, n := range names {
			base, wildcard := strings.CutSuffix(n, "*")
			switch {
			case n == "" || n == "*":
				return fmt.Errorf("config.teams.%s[%d]: %q allows no tool or every tool; name them", team, i, n)
			case strings.Contains(base, "*"):
				return fmt.Errorf("config.teams.%s[%d]: %q: '*' may only end an entry", team, i, n)
			case wildcard:
				r.prefixes = append(r.prefixes, base)
			default:
				r.exact[n] = true
			}
		}
		t[team] = r
	}
	limit := defaultNameLength
	if cfg.MaxNameLength != nil {
		limit = *cfg.MaxNameLength
		if limit < minNameLength || limit > maxMCPNameLength {
			return fmt.Errorf("config.maxNameLength: %d, want %d to %d", limit, minNameLength, maxMCPNameLength)
		}
	}
	for from, to := range cfg.Names {
		if !validName(to, limit) {
			return fmt.Errorf("config.names.%s: %q is not a name of 1 to %d ASCII letters, digits, '_', '-' and '.'", from, to, limit)
		}
	}
	teams, maxNameLength, names = t, limit, cfg.Names
	return nil
}

// A policy is one session's settings, reduced to what matters.
type policy struct {
	team       string   // "" for none
	readOnly   bool     // only tools annotated readOnlyHint
	include    []string // nil: no narrowing; sorted, deduplicated
	exclude    []string // sorted, deduplicated
	trust      bool
	alwaysLoad bool
}

// canonical is the canonical form: equal for settings that mean the same,
// different otherwise.
type canonical struct {
	Team       *string  `json:"team"`
	ReadOnly   bool     `json:"readOnly"`
	Include    []string `json:"include"`
	Exclude    []string `json:"exclude"`
	Trust      bool     `json:"trust"`
	AlwaysLoad bool     `json:"alwaysLoad"`
}

// parsePolicy strictly decodes one raw settings object.
func parsePolicy(raw json.RawMessage) (policy, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return policy{}, err
	}
	if tok != json.Delim('{') {
		return policy{}, fmt.Errorf("expected an object, got %s", kindOf(raw))
	}
	var p policy
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return policy{}, err
		}
		key, _ := tok.(string)
		if seen[key] {
			return policy{}, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return policy{}, fmt.Errorf("%s: %w", key, err)
		}
		switch key {
		case "team":
			p.team, err = parseTeam(value)
		case "readOnly":
			p.readOnly, err = parseBool(key, value)
		case "trust":
			p.trust, err = parseBool(key, value)
		case "alwaysLoadTools":
			p.alwaysLoad, err = parseBool(key, value)
		case "includeTools":
			p.include, err = parseNames(key, value)
			if err == nil && p.include == nil && kindOf(value) == "an array" {
				p.include = []string{} // [] allows nothing; null narrows nothing
			}
		case "excludeTools":
			p.exclude, err = parseNames(key, value)
		}
		if err != nil {
			return policy{}, err
		}
	}
	if _, err := dec.Token(); err != nil {
		return policy{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return policy{}, errors.New("data after the settings object")
	}
	if p.include != nil {
		slices.Sort(p.include)
		p.include = slices.Compact(p.include)
	}
	slices.Sort(p.exclude)
	p.exclude = slices.Compact(p.exclude)
	if p.exclude == nil {
		p.exclude = []string{}
	}
	return p, nil
}

// parseTeam reads "team": null or the name of a configured team.
func parseTeam(raw json.RawMessage) (string, error) {
	switch kind := kindOf(raw); kind {
	case "null":
		return "", nil
	case "a string":
	default:
		return "", fmt.Errorf("team: expected a string or null, got %s", kind)
	}
	var team string
	if err := json.Unmarshal(raw, &team); err != nil {
		return "", fmt.Errorf("team: %w", err)
	}
	if _, ok := teams[team]; !ok {
		known := make([]string, 0, len(teams))
		for t := range teams {
			known = append(known, t)
		}
		slices.Sort(known)
		return "", fmt.Errorf("team: %q is not a team of the plugin's configuration (%s)", team, strings.Join(known, ", "))
	}
	return team, nil
}

func parseBool(key string, raw json.RawMessage) (bool, error) {
	var b *bool
	if kind := kindOf(raw); kind != "a boolean" && kind != "null" {
		return false, fmt.Errorf("%s: expected a boolean or null, got %s", key, kind)
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, fmt.Errorf("%s: %w", key, err)
	}
	return b != nil && *b, nil
}

func parseNames(key string, raw json.RawMessage) ([]string, error) {
	switch kind := kindOf(raw); kind {
	case "null":
		return nil, nil
	case "an array":
	default:
		return nil, fmt.Errorf("%s: expected an array of strings or null, got %s", key, kind)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	names := make([]string, len(items))
	for i, item := range items {
		if kind := kindOf(item); kind != "a string" {
			return nil, fmt.Errorf("%s[%d]: expected a string, got %s", key, i, kind)
		}
		if err := json.Unmarshal(item, &names[i]); err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", key, i, err)
		}
		if names[i] == "" {
			return nil, fmt.Errorf("%s[%d]: empty name", key, i)
		}
	}
	return names, nil
}

// kindOf names the JSON type of a valid JSON value.
func kindOf(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
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

// canonicalizeAll answers a canonicalize call: one result per settings
// object, a refusal for one never fails the others.
func canonicalizeAll(req *canonicalizeRequest) canonicalizeResponse {
	resp := canonicalizeResponse{Results: make([]canonicalResult, len(req.Settings))}
	for i, raw := range req.Settings {
		p, err := parsePolicy(raw)
		if err != nil {
			resp.Results[i] = canonicalResult{Error: err.Error()}
			continue
		}
		c := canonical{ReadOnly: p.readOnly, Include: p.include, Exclude: p.exclude, Trust: p.trust, AlwaysLoad: p.alwaysLoad}
		if p.team != "" {
			c.Team = &p.team
		}
		form, err := json.Marshal(c)
		if err != nil {
			resp.Results[i] = canonicalResult{Error: err.Error()}
			continue
		}
		// The canonical JSON is a key: equal for equal forms, different
		// otherwise. (A change of the configuration loads the plugin
		// again, and wasmhost computes every key afresh.)
		resp.Results[i] = canonicalResult{Canonical: form, Key: "team-access/1:" + string(form)}
	}
	return resp
}

// projectAll answers a project call. Settings the policy refuses fail the
// whole call, so the session sees nothing from the server.
func projectAll(req *projectRequest) (projectResponse, error) {
	p, err := parsePolicy(req.Settings)
	if err != nil {
		return projectResponse{}, fmt.Errorf("project: settings refused: %w", err)
	}
	resp := projectResponse{Tools: []toolDecision{}, Prompts: []promptDecision{}, Resources: []int{}}
	if p.team == "" {
		return resp, nil
	}
	var toolNames, toolRenames []string
	for i, name := range req.Tools {
		if p.allows(name) && (!p.readOnly || readOnlyHint(req.ToolAnnotations, i)) {
			d := toolDecision{I: i, Trust: p.trust, AlwaysLoad: p.alwaysLoad, Name: exposedName(name)}
			resp.Tools = append(resp.Tools, d)
			toolNames, toolRenames = append(toolNames, name), append(toolRenames, d.Name)
		}
	}
	if err := checkNames("tools", toolNames, toolRenames); err != nil {
		return projectResponse{}, err
	}
	var promptNames, promptRenames []string
	for i, name := range req.Prompts {
		if p.allows(name) {
			d := promptDecision{I: i, Name: exposedName(name)}
			resp.Prompts = append(resp.Prompts, d)
			promptNames, promptRenames = append(promptNames, name), append(promptRenames, d.Name)
		}
	}
	if err := checkNames("prompts", promptNames, promptRenames); err != nil {
		return projectResponse{}, err
	}
	for i := range req.Resources {
		resp.Resources = append(resp.Resources, i)
	}
	return resp, nil
}

// checkNames refuses a projection in which a visible item of the kind
// (upstream names names, renames[i] "" for one not renamed) would be
// exposed under a name another visible item has, or under the upstream
// name of another visible item, as wasmhost refuses it.
func checkNames(kind string, names, renames []string) error {
	upstream := make(map[string]int, len(names))
	for i, n := range names {
		upstream[n] = i
	}
	exposed := make(map[string]string, len(names))
	for i, n := range names {
		e := renames[i]
		if e == "" {
			e = n
		} else if j, ok := upstream[e]; ok && j != i {
			return fmt.Errorf("project: %s %q would be exposed as %q, the name of another visible one: rename one in the config's names", kind, n, e)
		}
		if other, ok := exposed[e]; ok {
			return fmt.Errorf("project: %s %q and %q would both be exposed as %q: rename one in the config's names", kind, other, n, e)
		}
		exposed[e] = n
	}
	return nil
}

// allows reports whether the session may see the tool or prompt name:
// its team allows it, includeTools (when set) names it and excludeTools
// does not.
func (p policy) allows(name string) bool {
	if !teams[p.team].allows(name) {
		return false
	}
	if _, found := slices.BinarySearch(p.exclude, name); found {
		return false
	}
	if p.include == nil {
		return true
	}
	_, found := slices.BinarySearch(p.include, name)
	return found
}

// readOnlyHint reports whether the annotations of tool i say readOnlyHint:
// true. A tool without annotations, or whose annotations cannot be read,
// is not read-only: a policy that is unsure hides the tool.
func readOnlyHint(annotations []json.RawMessage, i int) bool {
	if i >= len(annotations) {
		return false
	}
	var a struct {
		ReadOnlyHint bool `json:"readOnlyHint"`
	}
	return json.Unmarshal(annotations[i], &a) == nil && a.ReadOnlyHint
}
