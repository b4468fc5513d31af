package metakey

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/wasmhost/wasmhost/abi"
)

// A Reference is the default policy implemented natively: it satisfies
// [abi.Policy] with the same answers the default wasm plugin must give, and
// is what conformance and differential tests compare plugins against. The
// zero value is ready to use and safe for concurrent use.
type Reference struct{}

var _ abi.Policy = Reference{}

// The handshake a Reference reports.
const (
	referenceName    = "metakey-reference"
	referenceVersion = "1.0.0"
)

// Handshake returns {ABI: 1, Name: "metakey-reference", Version: "1.0.0"}.
// A Reference wants nothing beyond names in project calls.
func (Reference) Handshake() abi.Handshake {
	return abi.Handshake{ABI: abi.Version, Name: referenceName, Version: referenceVersion}
}

// Canonicalize answers a canonicalize call: for each settings object, in
// order, either its canonical JSON and key (the same bytes) or, when
// [ParseSettings] refuses it, the refusal message in Error. A canonical form
// longer than [abi.MaxKeyBytes] cannot be a key, so that object gets a
// per-item error too. The call fails as a whole only for a nil request or a
// done ctx.
func (Reference) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	if req == nil {
		return nil, errors.New("metakey: canonicalize: nil request")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("metakey: canonicalize: %w", err)
	}
	results := make([]abi.CanonicalResult, len(req.Settings))
	// All canonical forms are written into one buffer and all keys are
	// substrings of one string: two allocations for the whole batch.
	ends := make([]int, len(req.Settings))
	size := 0
	for _, raw := range req.Settings {
		size += len(raw) + 80
	}
	buf := make([]byte, 0, size)
	for i, raw := range req.Settings {
		s, err := ParseSettings(raw)
		if err != nil {
			results[i].Error = err.Error()
		} else {
			start := len(buf)
			buf = s.canonical(false).appendJSON(buf)
			if n := len(buf) - start; n > abi.MaxKeyBytes {
				results[i].Error = fmt.Sprintf("canonical form is %d bytes, more than the %d bytes a key may hold", n, abi.MaxKeyBytes)
				buf = buf[:start]
			}
		}
		ends[i] = len(buf)
	}
	keys := string(buf)
	start := 0
	for i, end := range ends {
		if results[i].Error == "" {
			results[i].Canonical = buf[start:end:end]
			results[i].Key = keys[start:end]
		}
		start = end
	}
	resp := &abi.CanonicalizeResponse{Results: results}
	if err := abi.ValidateCanonicalize(req, resp); err != nil {
		return nil, fmt.Errorf("metakey: %w", err)
	}
	return resp, nil
}

// Project answers a project call: the indexes of the visible tools (each
// with trust true only when the canonical trust is true, and alwaysLoad the
// canonical alwaysLoadTools), of the visible prompts, and of every resource,
// all in request order. Lists are never nil. Settings that [ParseSettings]
// refuses make Project fail with an error wrapping both the *[SettingsError]
// and [abi.ErrRefused]; a nil request or a done ctx fail too.
func (Reference) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	if req == nil {
		return nil, errors.New("metakey: project: nil request")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("metakey: project: %w", err)
	}
	s, err := ParseSettings(req.Settings)
	if err != nil {
		return nil, fmt.Errorf("metakey: project: %w", refusal{err})
	}
	f := newFilter(s.canonical(false))
	resp := f.project(req)
	if err := abi.ValidateProject(req, resp); err != nil {
		return nil, fmt.Errorf("metakey: %w", err)
	}
	return resp, nil
}

// A refusal is the error of settings that Project refuses: it wraps the
// *SettingsError and abi.ErrRefused.
type refusal struct{ err error }

func (r refusal) Error() string { return "settings refused: " + r.err.Error() }

// RefusalMessage returns the message ProjectBatch gives a refused item, for
// abi.RefusalMessager.
func (r refusal) RefusalMessage() string { return "project: " + r.Error() }
func (r refusal) Unwrap() []error        { return []error{r.err, abi.ErrRefused} }

var _ abi.BatchProjector = Reference{}

// ProjectBatch answers a project_batch call item by item, each as Project
// answers it: the projection, or, for settings [ParseSettings] refuses, a
// result whose Error is "project: settings refused: " and the
// [SettingsError]'s message, what the default plugin's project export
// refuses with. Each settings object is parsed once. The call fails as a
// whole only for a nil or invalid request (see
// [abi.ValidateProjectBatchRequest]) or a done ctx.
func (Reference) ProjectBatch(ctx context.Context, req *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error) {
	if req == nil {
		return nil, errors.New("metakey: project_batch: nil request")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("metakey: project_batch: %w", err)
	}
	if err := abi.ValidateProjectBatchRequest(req); err != nil {
		return nil, fmt.Errorf("metakey: %w", err)
	}
	type parsed struct {
		done bool
		f    filter
		err  string
	}
	settings := make([]parsed, len(req.Settings))
	results := make([]abi.BatchResult, len(req.Items))
	for i, it := range req.Items {
		s := &settings[it.Settings]
		if !s.done {
			s.done = true
			if ps, err := ParseSettings(req.Settings[it.Settings]); err != nil {
				s.err = refusal{err}.RefusalMessage()
			} else {
				s.f = newFilter(ps.canonical(false))
			}
		}
		if s.err != "" {
			results[i].Error = s.err
			continue
		}
		results[i].ProjectResponse = s.f.project(req.ItemRequest(i))
	}
	resp := &abi.ProjectBatchResponse{Results: results}
	if err := abi.ValidateProjectBatch(req, resp); err != nil {
		return nil, fmt.Errorf("metakey: %w", err)
	}
	return resp, nil
}

// project applies f's settings to the names of req.
func (f *filter) project(req *abi.ProjectRequest) *abi.ProjectResponse {
	c := f.c
	trust := c.Trust != nil && *c.Trust
	resp := &abi.ProjectResponse{
		Tools:     make([]abi.ToolDecision, 0, len(req.Tools)),
		Prompts:   make([]int, 0, len(req.Prompts)),
		Resources: make([]int, len(req.Resources)),
	}
	for i, name := range req.Tools {
		if f.visible(name) {
			resp.Tools = append(resp.Tools, abi.ToolDecision{Index: i, Trust: trust, AlwaysLoad: c.AlwaysLoadTools})
		}
	}
	for i, name := range req.Prompts {
		if f.visible(name) {
			resp.Prompts = append(resp.Prompts, i)
		}
	}
	for i := range resp.Resources {
		resp.Resources[i] = i
	}
	return resp
}

// setThreshold is the list length from which a filter looks names up in a
// map rather than by binary search: building the map pays off only when
// lists are long and many names are looked up.
const setThreshold = 16

// A filter answers [Canonical.Visible] for many names, faster than the
// binary searches when the lists are long.
type filter struct {
	c                Canonical
	include, exclude map[string]struct{} // nil: search c's lists instead
}

func newFilter(c Canonical) filter {
	f := filter{c: c}
	if len(c.IncludeTools) >= setThreshold {
		f.include = makeSet(c.IncludeTools)
	}
	if len(c.ExcludeTools) >= setThreshold {
		f.exclude = makeSet(c.ExcludeTools)
	}
	return f
}

func makeSet(list []string) map[string]struct{} {
	m := make(map[string]struct{}, len(list))
	for _, s := range list {
		m[s] = struct{}{}
	}
	return m
}

// visible reports whether name is shown (the rule [Canonical.Visible]
// documents), through the sets when there are some.
func (f *filter) visible(name string) bool {
	if name == "" {
		return false
	}
	if f.include != nil {
		if _, ok := f.include[name]; !ok {
			return false
		}
	} else if f.c.IncludeTools != nil {
		if _, ok := slices.BinarySearch(f.c.IncludeTools, name); !ok {
			return false
		}
	}
	if f.exclude != nil {
		_, excluded := f.exclude[name]
		return !excluded
	}
	_, excluded := slices.BinarySearch(f.c.ExcludeTools, name)
	return !excluded
}
