// Rebuild readonly-policy.wasm (byte-reproducible, standard Go toolchain;
// `make go-plugins` runs both steps):
//
//	cd testplugins/readonly-policy && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -buildvcs=false -o readonly-policy.wasm .
//	go run ./internal/wasmpack/cmd/wasmpack testplugins/readonly-policy/readonly-policy.wasm   # from the repository root

//go:build wasip1

// Command readonly-policy is a test policy plugin that uses the two
// handshake additions of abi/SPEC.md section 3: it reads plugin-wide
// configuration from its handshake input ({"hide": [tool names]}: tools
// no session sees) and owns the per-server settings key "readOnlyOnly"
// (true: only tools annotated readOnlyHint are visible). Every other
// settings key is ignored; prompts and resources are always visible, and
// no tool is trusted or loaded eagerly.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"

	"github.com/extism/go-pdk"
	"github.com/wasmhost/wasmhost/abi"
)

//lint:file-ignore U1000 the exports are called by the host through //go:wasmexport

func main() {}

// hide is the configured list of hidden tools, set by the handshake.
var hide []string

//go:wasmexport handshake
func handshake() int32 {
	return answer(func(in []byte) ([]byte, error) {
		if len(in) > 0 {
			var req struct {
				Config struct {
					Hide []string `json:"hide"`
				} `json:"config"`
			}
			if err := json.Unmarshal(in, &req); err != nil {
				return nil, fmt.Errorf("handshake: config: %w", err)
			}
			hide = req.Config.Hide
		}
		return json.Marshal(abi.Handshake{ABI: abi.Version, Name: "readonly-policy", Version: "1.0.0",
			Wants: []string{abi.WantToolAnnotations}, SettingsKeys: []string{"readOnlyOnly"}})
	})
}

// readOnlyOnly reads the plugin's settings key.
func readOnlyOnly(settings json.RawMessage) (bool, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(settings, &obj); err != nil || obj == nil {
		return false, errors.New("settings: expected an object")
	}
	raw, ok := obj["readOnlyOnly"]
	if !ok || string(raw) == "null" {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, fmt.Errorf("readOnlyOnly: expected a boolean, got %s", raw)
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
			ro, err := readOnlyOnly(s)
			if err != nil {
				resp.Results[i].Error = err.Error()
				continue
			}
			c := fmt.Sprintf(`{"readOnlyOnly":%t}`, ro)
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
		ro, err := readOnlyOnly(req.Settings)
		if err != nil {
			return nil, fmt.Errorf("project: settings refused: %w", err)
		}
		resp := abi.ProjectResponse{Tools: []abi.ToolDecision{}, Prompts: []int{}, Resources: []int{}}
		for i, name := range req.Tools {
			if slices.Contains(hide, name) {
				continue
			}
			if ro {
				var ann struct {
					ReadOnly bool `json:"readOnlyHint"`
				}
				if i >= len(req.ToolAnnotations) || json.Unmarshal(req.ToolAnnotations[i], &ann) != nil || !ann.ReadOnly {
					continue
				}
			}
			resp.Tools = append(resp.Tools, abi.ToolDecision{Index: i})
		}
		for i := range req.Prompts {
			resp.Prompts = append(resp.Prompts, i)
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
