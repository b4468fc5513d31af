package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	fuzzEnvSecret  = "fuzz-env-secret-7f3a9c"
	fuzzFileSecret = "fuzz-file-secret-c41d0e"
)

// FuzzParse checks that Parse never panics, that it either returns a config
// or an error wrapping ErrInvalid made only of *Error values naming the
// file, that no resolved token leaks into errors or warnings, and that an
// accepted config only hands well-typed settings objects to the policy.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"bad", "good"} {
		files, err := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte(`{"mcpServers":{"s":{"command":"c","includeTools":["a(b)"]}},"sessions":{"a":{"tokenEnv":"T","overrides":{"s":{"trust":null}}},"b":{"tokenFile":"t"}}}`))

	env := fakeEnv(map[string]string{"T": fuzzEnvSecret, "A_TOKEN": fuzzEnvSecret + "-2"})
	read := func(name string) ([]byte, error) {
		if filepath.Base(name) == "t" {
			return []byte(fuzzFileSecret), nil
		}
		return nil, &os.PathError{Op: "open", Path: name, Err: os.ErrNotExist}
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		const file = "fuzz/config.json"
		cfg, ws, err := Parse(file, data, env, read)
		for _, w := range ws {
			if w.File != file {
				t.Fatalf("warning names file %q", w.File)
			}
			if s := w.String(); strings.Contains(s, fuzzEnvSecret) || strings.Contains(s, fuzzFileSecret) {
				t.Fatalf("token leaked into warning %q", s)
			}
		}
		if err != nil {
			if cfg != nil {
				t.Fatal("both a config and an error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			for _, e := range unwrapAll(err) {
				var ce *Error
				if !errors.As(e, &ce) || ce.File != file || ce.Line < 1 || ce.Column < 1 {
					t.Fatalf("bad error %T %#v", e, e)
				}
			}
			if s := err.Error(); strings.Contains(s, fuzzEnvSecret) || strings.Contains(s, fuzzFileSecret) {
				t.Fatalf("token leaked into error %q", s)
			}
			return
		}
		if cfg == nil {
			t.Fatal("neither a config nor an error")
		}
		for _, sess := range cfg.Sessions {
			if sess.Token == "" {
				t.Fatalf("session %q has no token", sess.Name)
			}
			for name, base := range cfg.Servers {
				srv, settings, enabled := sess.Effective(name)
				if srv == nil {
					t.Fatalf("Effective(%q) = nil for a known server", name)
				}
				set, disabled := base.Settings, base.Disabled
				if o, ok := sess.Overrides[name]; ok {
					set, disabled = o.Layer(set, disabled)
				}
				if string(set.JSON()) != string(settings) || disabled != srv.Disabled || enabled != (sess.Uses(name) && !disabled) {
					t.Fatalf("Effective(%q) = %s, %t; Layer and Uses say %s, disabled %t, uses %t", name, settings, enabled, set.JSON(), disabled, sess.Uses(name))
				}
				checkSettings(t, settings)
				checkSettings(t, base.Metadata())
				if diff := cmp.Diff(base, base.Clone()); diff != "" {
					t.Fatalf("clone differs:\n%s", diff)
				}
				if n := srv.Transport(); n == "" {
					t.Fatalf("server %q has no transport", name)
				}
			}
		}
	})
}

// checkSettings fails unless raw is an object whose four keys, when
// present, are well typed.
func checkSettings(t *testing.T, raw json.RawMessage) {
	t.Helper()
	var typed struct {
		Trust           *bool     `json:"trust"`
		AlwaysLoadTools *bool     `json:"alwaysLoadTools"`
		IncludeTools    *[]string `json:"includeTools"`
		ExcludeTools    *[]string `json:"excludeTools"`
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&typed); err != nil {
		t.Fatalf("settings %s: %v", raw, err)
	}
}
