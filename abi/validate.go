package abi

import (
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/wasmhost/wasmhost/internal/mcpname"
)

// ValidateHandshake reports whether h is a handshake this host accepts.
// The error names both ABI versions when they differ.
func ValidateHandshake(h *Handshake) error {
	if h.ABI != Version {
		return fmt.Errorf("plugin %q speaks wasmhost ABI v%d, this host speaks ABI v%d", h.Name, h.ABI, Version)
	}
	if h.Name == "" {
		return fmt.Errorf("handshake: name is empty")
	}
	for i, w := range h.Wants {
		if w != WantToolAnnotations {
			return fmt.Errorf("handshake: wants[%d]: unknown input %q (this host offers %q)", i, w, WantToolAnnotations)
		}
	}
	if len(h.SettingsKeys) > MaxSettingsKeys {
		return fmt.Errorf("handshake: settingsKeys: %d keys, limit %d", len(h.SettingsKeys), MaxSettingsKeys)
	}
	for i, k := range h.SettingsKeys {
		switch {
		case !ValidSettingsKey(k):
			return fmt.Errorf("handshake: settingsKeys[%d]: %q is not a settings key (1 to 64 ASCII letters, digits, '_' and '-', starting with a letter)", i, k)
		case slices.Contains(HostSettingsKeys, k):
			return fmt.Errorf("handshake: settingsKeys[%d]: %q is one of wasmhost's own settings keys", i, k)
		case slices.Contains(h.SettingsKeys[:i], k):
			return fmt.Errorf("handshake: settingsKeys[%d]: %q is declared twice", i, k)
		}
	}
	return nil
}

// ValidateCanonicalize checks that resp is a well-formed answer to req: one
// result per settings object, each with either an error or a key of legal
// length.
func ValidateCanonicalize(req *CanonicalizeRequest, resp *CanonicalizeResponse) error {
	if len(resp.Results) != len(req.Settings) {
		return fmt.Errorf("canonicalize: %d results for %d settings objects", len(resp.Results), len(req.Settings))
	}
	for i, r := range resp.Results {
		switch {
		case r.Error != "":
			if r.Key != "" {
				return fmt.Errorf("canonicalize: results[%d]: both error and key set", i)
			}
		case r.Key == "":
			return fmt.Errorf("canonicalize: results[%d]: neither a key (keys are never empty) nor an error", i)
		case len(r.Key) > MaxKeyBytes:
			return fmt.Errorf("canonicalize: results[%d]: key is %d bytes, limit %d", i, len(r.Key), MaxKeyBytes)
		}
	}
	return nil
}

// ValidateProject checks that resp is a well-formed answer to req from a
// plugin without renames: every index in range and strictly increasing
// within its list, and no visible item renamed or redescribed. It is
// ValidateProjectWith(req, resp, false).
func ValidateProject(req *ProjectRequest, resp *ProjectResponse) error {
	return ValidateProjectWith(req, resp, false)
}

// ValidateProjectWith is [ValidateProject] for a plugin whose handshake's
// [Handshake.Renames] is renames. With renames, the exposed names and
// descriptions are checked too (SPEC.md section 5.3): each name within
// MCP's tool-name rule (mcpname), each description at most
// [MaxDescriptionBytes] bytes of UTF-8, and no two visible tools (nor two
// visible prompts) sharing an exposed name where one of them is renamed.
// Without renames, any name or description is an error.
func ValidateProjectWith(req *ProjectRequest, resp *ProjectResponse, renames bool) error {
	last := -1
	for j, d := range resp.Tools {
		if err := checkIndex("tools", j, d.Index, last, len(req.Tools)); err != nil {
			return err
		}
		last = d.Index
	}
	if err := checkIndexes("prompts", resp.Prompts, len(req.Prompts)); err != nil {
		return err
	}
	if err := checkIndexes("resources", resp.Resources, len(req.Resources)); err != nil {
		return err
	}
	if resp.PromptRenames != nil && len(resp.PromptRenames) != len(resp.Prompts) {
		return fmt.Errorf("project: %d prompt renames for %d prompts", len(resp.PromptRenames), len(resp.Prompts))
	}
	if !resp.HasRenames() {
		return nil
	}
	if !renames {
		return fmt.Errorf("project: %s: a name or description, but the handshake does not opt into renames (\"renames\": true)", firstRenamed(resp))
	}
	tools := make([]exposed, len(resp.Tools))
	for j, d := range resp.Tools {
		tools[j] = exposed{fmt.Sprintf("tools[%d]", j), req.Tools[d.Index], d.Rename()}
	}
	if err := checkRenames(tools); err != nil {
		return err
	}
	prompts := make([]exposed, len(resp.Prompts))
	for j, i := range resp.Prompts {
		prompts[j] = exposed{fmt.Sprintf("prompts[%d]", j), req.Prompts[i], resp.PromptRename(j)}
	}
	return checkRenames(prompts)
}

// An exposed is one visible item of a kind: where it is in the answer, its
// upstream name and what the plugin exposes it as.
type exposed struct {
	path     string
	original string
	rename   Rename
}

// name returns the name the item is exposed under.
func (e exposed) name() string {
	if e.rename.Name != "" {
		return e.rename.Name
	}
	return e.original
}

// checkRenames checks the names and descriptions of one kind's visible
// items. Two items not renamed that share an upstream name are the
// upstream's business, as they were before renames.
func checkRenames(items []exposed) error {
	holder := make(map[string]int, len(items))
	for j, e := range items {
		if n := e.rename.Name; n != "" {
			if len(n) > mcpname.MaxLen {
				return fmt.Errorf("project: %s: name %q is %d bytes long, over the %d of the MCP tool-name rule", e.path, n, len(n), mcpname.MaxLen)
			}
			if r, bad := mcpname.BadRune(n); bad {
				return fmt.Errorf("project: %s: name %q has %q, outside the MCP tool-name rule (A-Z, a-z, 0-9, '_', '-', '.')", e.path, n, r)
			}
		}
		if d := e.rename.Description; len(d) > MaxDescriptionBytes {
			return fmt.Errorf("project: %s: description is %d bytes long, over %d", e.path, len(d), MaxDescriptionBytes)
		} else if !utf8.ValidString(d) {
			return fmt.Errorf("project: %s: description is not valid UTF-8", e.path)
		}
		n := e.name()
		if k, dup := holder[n]; dup {
			if e.rename.Name != "" || items[k].rename.Name != "" {
				return fmt.Errorf("project: %s (%q) and %s (%q) are both exposed as %q", items[k].path, items[k].original, e.path, e.original, n)
			}
			continue
		}
		holder[n] = j
	}
	return nil
}

// firstRenamed names the first renamed or redescribed item of resp.
func firstRenamed(resp *ProjectResponse) string {
	for j, d := range resp.Tools {
		if !d.Rename().IsZero() {
			return fmt.Sprintf("tools[%d]", j)
		}
	}
	for j := range resp.Prompts {
		if !resp.PromptRename(j).IsZero() {
			return fmt.Sprintf("prompts[%d]", j)
		}
	}
	return "an item"
}

func checkIndexes(list string, idx []int, n int) error {
	last := -1
	for j, i := range idx {
		if err := checkIndex(list, j, i, last, n); err != nil {
			return err
		}
		last = i
	}
	return nil
}

func checkIndex(list string, j, i, last, n int) error {
	switch {
	case i < 0 || i >= n:
		return fmt.Errorf("project: %s[%d]: index %d out of range [0,%d)", list, j, i, n)
	case i <= last:
		return fmt.Errorf("project: %s[%d]: index %d not after previous index %d", list, j, i, last)
	}
	return nil
}

// ValidateProjectBatchRequest checks that every item of req refers to a
// settings object and a snapshot req has, and that each snapshot has either
// no tool annotations or one per tool.
func ValidateProjectBatchRequest(req *ProjectBatchRequest) error {
	for j, s := range req.Snapshots {
		if n := len(s.ToolAnnotations); n != 0 && n != len(s.Tools) {
			return fmt.Errorf("project_batch: snapshots[%d]: %d toolAnnotations for %d tools", j, n, len(s.Tools))
		}
	}
	for i, it := range req.Items {
		switch {
		case it.Settings < 0 || it.Settings >= len(req.Settings):
			return fmt.Errorf("project_batch: items[%d]: settings index %d out of range [0,%d)", i, it.Settings, len(req.Settings))
		case it.Snapshot < 0 || it.Snapshot >= len(req.Snapshots):
			return fmt.Errorf("project_batch: items[%d]: snapshot index %d out of range [0,%d)", i, it.Snapshot, len(req.Snapshots))
		}
	}
	return nil
}

// ValidateProjectBatch checks that resp is a well-formed answer to req (and
// req itself, with [ValidateProjectBatchRequest]): one result per item, each
// either a refusal with no projection member at all, or a projection that
// [ValidateProject] accepts for the item's request.
func ValidateProjectBatch(req *ProjectBatchRequest, resp *ProjectBatchResponse) error {
	return ValidateProjectBatchWith(req, resp, false)
}

// ValidateProjectBatchWith is [ValidateProjectBatch] for a plugin whose
// handshake's [Handshake.Renames] is renames: each projection is checked
// with [ValidateProjectWith].
func ValidateProjectBatchWith(req *ProjectBatchRequest, resp *ProjectBatchResponse, renames bool) error {
	if err := ValidateProjectBatchRequest(req); err != nil {
		return err
	}
	return validateBatchResults(req, resp, renames)
}

// validateBatchResults is ValidateProjectBatch for a request already
// checked with ValidateProjectBatchRequest.
func validateBatchResults(req *ProjectBatchRequest, resp *ProjectBatchResponse, renames bool) error {
	if len(resp.Results) != len(req.Items) {
		return fmt.Errorf("project_batch: %d results for %d items", len(resp.Results), len(req.Items))
	}
	for i, r := range resp.Results {
		switch {
		case r.Error != "" && r.ProjectResponse != nil:
			return fmt.Errorf("project_batch: results[%d]: both error and projection set", i)
		case r.ProjectResponse != nil:
			if err := ValidateProjectWith(req.ItemRequest(i), r.ProjectResponse, renames); err != nil {
				return fmt.Errorf("project_batch: results[%d]: %w", i, err)
			}
		}
	}
	return nil
}
