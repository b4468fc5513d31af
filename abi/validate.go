package abi

import (
	"fmt"
	"slices"
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

// ValidateProject checks that resp is a well-formed answer to req: every
// index in range and strictly increasing within its list.
func ValidateProject(req *ProjectRequest, resp *ProjectResponse) error {
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
	return checkIndexes("resources", resp.Resources, len(req.Resources))
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
	if err := ValidateProjectBatchRequest(req); err != nil {
		return err
	}
	return validateBatchResults(req, resp)
}

// validateBatchResults is ValidateProjectBatch for a request already
// checked with ValidateProjectBatchRequest.
func validateBatchResults(req *ProjectBatchRequest, resp *ProjectBatchResponse) error {
	if len(resp.Results) != len(req.Items) {
		return fmt.Errorf("project_batch: %d results for %d items", len(resp.Results), len(req.Items))
	}
	for i, r := range resp.Results {
		switch {
		case r.Error != "" && r.ProjectResponse != nil:
			return fmt.Errorf("project_batch: results[%d]: both error and projection set", i)
		case r.ProjectResponse != nil:
			if err := ValidateProject(req.ItemRequest(i), r.ProjectResponse); err != nil {
				return fmt.Errorf("project_batch: results[%d]: %w", i, err)
			}
		}
	}
	return nil
}
