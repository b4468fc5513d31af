// Rebuild rename-policy.wasm (byte-reproducible, standard Go toolchain;
// `make go-plugins` runs both steps):
//
//	cd testplugins/rename-policy && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -buildvcs=false -o rename-policy.wasm .
//	go run ./internal/wasmpack/cmd/wasmpack testplugins/rename-policy/rename-policy.wasm   # from the repository root

//go:build wasip1

// Command rename-policy is a test policy plugin that renames and
// redescribes tools and prompts (abi/SPEC.md section 5.3, "renames": true
// in its handshake). Its plugin-wide configuration (policy.config) says
// how:
//
//	{"tools":   {"echo": {"name": "say", "description": "Say it back."}},
//	 "prompts": {"summarize": {"name": "sum"}}}
//
// and the per-server settings key it owns, "shortNames" (a boolean,
// false when left out), says whether a session gets them: with it, every
// configured tool and prompt is exposed as configured; without it, as the
// upstream names it. Every tool, prompt and resource is visible; no tool
// is trusted or loaded eagerly.
//
// The plugin applies its configuration as it is, without checking it: a
// configuration that renames two visible tools to one name, or to a name
// outside MCP's rule, makes it answer with renames the host refuses as bad
// output. Tests use that to check the host's refusal.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"

	"github.com/extism/go-pdk"
	"github.com/wasmhost/wasmhost/abi"
)

//lint:file-ignore U1000 the exports are called by the host through //go:wasmexport

func main() {}

// A renameConfig is the plugin's configuration: by upstream name, what a
// session with shortNames sees.
type renameConfig struct {
	Tools   map[string]abi.Rename `json:"tools"`
	Prompts map[string]abi.Rename `json:"prompts"`
}

// config is set by the handshake.
var config renameConfig

//go:wasmexport handshake
func handshake() int32 {
	return answer(func(in []byte) ([]byte, error) {
		if len(in) > 0 {
			var req struct {
				Config json.RawMessage `json:"config"`
			}
			if err := json.Unmarshal(in, &req); err != nil {
				return nil, fmt.Errorf("handshake: %w", err)
			}
			var c renameConfig
			if len(req.Config) > 0 && string(req.Config) != "null" {
				dec := json.NewDecoder(bytes.NewReader(req.Config))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&c); err != nil {
					return nil, fmt.Errorf("handshake: config: %w", err)
				}
			}
			config = c
		}
		return json.Marshal(abi.Handshake{ABI: abi.Version, Name: "rename-policy", Version: "1.0.0",
			SettingsKeys: []string{"shortNames"}, Renames: true})
	})
}

// shortNames reads the plugin's settings key.
func shortNames(settings json.RawMessage) (bool, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(settings, &obj); err != nil || obj == nil {
		return false, errors.New("settings: expected an object")
	}
	raw, ok := obj["shortNames"]
	if !ok || string(raw) == "null" {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, fmt.Errorf("shortNames: expected a boolean, got %s", raw)
	}
	return b, nil
}

//go:wasmexport canonicalize
func canonicalize() int32 {
	return answer(func(in []byte) ([]byte, error) {
		var req abi.CanonicalizeRequest
		if err := json.Unmarshal(in, &req); err != nil {
			return nil, err
		}
		resp := abi.CanonicalizeResponse{Results: make([]abi.CanonicalResult, len(req.Settings))}
		for i, s := range req.Settings {
			short, err := shortNames(s)
			if err != nil {
				resp.Results[i].Error = err.Error()
				continue
			}
			c := fmt.Sprintf(`{"shortNames":%t}`, short)
			resp.Results[i] = abi.CanonicalResult{Canonical: json.RawMessage(c), Key: c}
		}
		return json.Marshal(&resp)
	})
}

//go:wasmexport project
func project() int32 {
	return answer(func(in []byte) ([]byte, error) {
		var req abi.ProjectRequest
		if err := json.Unmarshal(in, &req); err != nil {
			return nil, err
		}
		short, err := shortNames(req.Settings)
		if err != nil {
			return nil, fmt.Errorf("project: settings refused: %w", err)
		}
		resp := abi.ProjectResponse{Tools: []abi.ToolDecision{}, Prompts: []int{}, Resources: []int{}}
		for i, name := range req.Tools {
			d := abi.ToolDecision{Index: i}
			if r, ok := config.Tools[name]; ok && short {
				d.Name, d.Description = r.Name, r.Description
			}
			resp.Tools = append(resp.Tools, d)
		}
		renames := make([]abi.Rename, len(req.Prompts))
		renamed := false
		for i, name := range req.Prompts {
			resp.Prompts = append(resp.Prompts, i)
			if r, ok := config.Prompts[name]; ok && short {
				renames[i], renamed = r, true
			}
		}
		if renamed {
			resp.PromptRenames = renames
		}
		for i := range req.Resources {
			resp.Resources = append(resp.Resources, i)
		}
		return json.Marshal(&resp)
	})
}

// answer runs fn on the call's input and sets the call's output or error.
func answer(fn func([]byte) ([]byte, error)) int32 {
	defer runtime.Gosched()
	out, err := fn(pdk.Input())
	if err != nil {
		pdk.SetErrorString(err.Error())
		return 1
	}
	pdk.Output(out)
	return 0
}
