package view

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/pool"
)

// CheckPolicy makes the trial calls a daemon makes before it runs a policy: it
// canonicalizes the settings {} and projects a one-tool snapshot for them,
// and returns the error of a call that fails (a trap, a timeout, bad
// output), saying "trial calls (settings {})" and which call. A refusal is
// an answer: the ABI leaves a policy free to refuse {} (one that requires
// includeTools, say), and the settings a config actually uses are checked
// binding by binding.
func CheckPolicy(ctx context.Context, p abi.Policy) error {
	if _, err := CanonicalKey(ctx, p, json.RawMessage(`{}`)); err != nil {
		if errors.Is(err, ErrRefused) {
			return nil // project would refuse {} too: nothing more to try
		}
		return fmt.Errorf("trial calls (settings {}): %w", err)
	}
	snap := &pool.Snapshot{
		Tools:     []*mcp.Tool{{Name: "trial_tool", InputSchema: map[string]any{"type": "object"}}},
		Prompts:   []*mcp.Prompt{{Name: "trial_prompt"}},
		Resources: []*mcp.Resource{{URI: "trial://resource", Name: "trial"}},
	}
	if _, err := Project(ctx, p, json.RawMessage(`{}`), snap); err != nil && !errors.Is(err, abi.ErrRefused) {
		return fmt.Errorf("trial calls (settings {}): project: %w", err)
	}
	return nil
}
