package abi

import "fmt"

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
			return fmt.Errorf("canonicalize: results[%d]: neither key nor error set", i)
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
