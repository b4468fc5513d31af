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
		`{"abi":1,"config":{"teams":{"a":[""]}}}`:                                                 "allows no tool or every tool",
		`{"abi":1,"config":{"teams":{"a":["*"]}}}`:                                                "allows no tool or every tool",
		`{"abi":1,"config":{"teams":{"a":["x*y"]}}}`:                                              "may only end an entry",
		`{"abi":1,"config":{"teams":{"a":["x"]},"x":1}}`:                                          "unknown field",
		`{"abi":1,"config":{"teams":{"a":"x"}}}`:                                                  "cannot unmarshal",
		`{"abi":1,"config":{"teams":{"a":["x"]},"maxNameLength":9}}`:                              "config.maxNameLength: 9, want 10 to 128",
		`{"abi":1,"config":{"teams":{"a":["x"]},"names":{"x":"a b"}}}`:                            `config.names.x: "a b" is not a name`,
		`{"abi":1,"config":{"teams":{"a":["x"]},"maxNameLength":10,"names":{"x":"elevenchars"}}}`: "1 to 10 ASCII",
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
	if len(resp.Tools) != 1 || resp.Tools[0].I != 0 || len(resp.Prompts) != 1 || resp.Prompts[0].I != 0 {
		t.Errorf("got %+v, want tool 0 (read_note) and prompt 0 (summarize)", resp)
	}
}

func TestProjectRenames(t *testing.T) {
	setup(t)
	long := "deploy_" + strings.Repeat("x", 70)
	resp, err := projectAll(&projectRequest{
		Settings: json.RawMessage(`{"team": "ops"}`),
		Tools:    []string{long, "deploy_" + strings.Repeat("x", 69) + "y", "pid"},
		Prompts:  []string{"greet"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Tools) != 3 {
		t.Fatalf("got %+v, want three tools", resp.Tools)
	}
	a, b := resp.Tools[0].Name, resp.Tools[1].Name
	if len(a) != 48 || len(b) != 48 || a == b || !strings.HasPrefix(a, "deploy_xxx") {
		t.Errorf("shortened names %q, %q: want two different names of 48 characters (testdata's maxNameLength)", a, b)
	}
	if resp.Tools[2].Name != "" {
		t.Errorf("pid renamed to %q", resp.Tools[2].Name)
	}
	if got, _ := json.Marshal(resp.Prompts); string(got) != `[{"i":0,"name":"hello"}]` {
		t.Errorf("prompts = %s, want greet renamed hello (testdata's names)", got)
	}
	names["pid"] = "deploy_pid"
	_, err = projectAll(&projectRequest{Settings: json.RawMessage(`{"team": "ops"}`), Tools: []string{"pid", "deploy_pid"}})
	if want := `project: tools "pid" would be exposed as "deploy_pid", the name of another visible one`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %v, want %s", err, want)
	}
	names["deploy_a"], names["deploy_b"] = "deploy_c", "deploy_c"
	_, err = projectAll(&projectRequest{Settings: json.RawMessage(`{"team": "ops"}`), Tools: []string{"deploy_a", "deploy_b"}})
	if want := `project: tools "deploy_a" and "deploy_b" would both be exposed as "deploy_c"`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %v, want %s", err, want)
	}
}
