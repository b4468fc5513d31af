package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// These tests run natively (go test ./...). The golden suite in golden/
// checks the built .wasm through wasmhost, with the same configuration
// (testdata/plugin-config.json): make test runs both.

func setup(t *testing.T) {
	t.Helper()
	cfg, err := os.ReadFile("testdata/plugin-config.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := configure([]byte(`{"abi":1,"config":` + string(cfg) + `}`)); err != nil {
		t.Fatal(err)
	}
}

func TestConfigureRefuses(t *testing.T) {
	for in, want := range map[string]string{
		``:                      "no configuration",
		`{"abi":1,"config":{}}`: "no team",
		`{"abi":1,"config":{"teams":{"a":[""]}}}`:        "allows no tool or every tool",
		`{"abi":1,"config":{"teams":{"a":["*"]}}}`:       "allows no tool or every tool",
		`{"abi":1,"config":{"teams":{"a":["x*y"]}}}`:     "may only end an entry",
		`{"abi":1,"config":{"teams":{"a":["x"]},"x":1}}`: "unknown field",
		`{"abi":1,"config":{"teams":{"a":"x"}}}`:         "cannot unmarshal",
	} {
		err := configure([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("configure(%s) = %v, want an error saying %q", in, err, want)
		}
	}
}

func TestCanonicalizeEquivalentSettings(t *testing.T) {
	setup(t)
	resp := canonicalizeAll(&canonicalizeRequest{Settings: []json.RawMessage{
		json.RawMessage(`{"team": "ops", "excludeTools": ["b", "a", "b"]}`),
		json.RawMessage(`{"team": "ops", "excludeTools": ["a", "b"], "readOnly": false, "trust": null}`),
	}})
	a, b := resp.Results[0], resp.Results[1]
	if a.Error != "" || b.Error != "" {
		t.Fatalf("unexpected refusal: %q, %q", a.Error, b.Error)
	}
	if a.Key != b.Key {
		t.Errorf("keys differ: %s vs %s", a.Key, b.Key)
	}
	if want := `{"team":"ops","readOnly":false,"include":null,"exclude":["a","b"],"trust":false,"alwaysLoad":false}`; string(a.Canonical) != want {
		t.Errorf("canonical = %s, want %s", a.Canonical, want)
	}
}

func TestCanonicalizeRefusesUnknownTeam(t *testing.T) {
	setup(t)
	resp := canonicalizeAll(&canonicalizeRequest{Settings: []json.RawMessage{json.RawMessage(`{"team": "opz"}`)}})
	if want := `team: "opz" is not a team of the plugin's configuration (notes, ops)`; resp.Results[0].Error != want {
		t.Errorf("got %q, want %q", resp.Results[0].Error, want)
	}
}

func TestProjectTeamReadOnly(t *testing.T) {
	setup(t)
	resp, err := projectAll(&projectRequest{
		Settings:        json.RawMessage(`{"team": "notes", "readOnly": true}`),
		Tools:           []string{"read_note", "write_note", "pid"},
		ToolAnnotations: []json.RawMessage{json.RawMessage(`{"readOnlyHint": true}`), json.RawMessage(`null`), json.RawMessage(`{"readOnlyHint": true}`)},
		Prompts:         []string{"summarize", "greet"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Tools) != 1 || resp.Tools[0].I != 0 || len(resp.Prompts) != 1 || resp.Prompts[0] != 0 {
		t.Errorf("got %+v, want tool 0 (read_note) and prompt 0 (summarize)", resp)
	}
}
