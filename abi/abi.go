// Package abi is version 1 of the contract between wasmhost and a policy
// plugin. It holds the names of the Extism exports a plugin provides, the
// JSON messages that cross the sandbox boundary, their Go types, and the
// checks the host makes of a plugin's answers. The host and plugins
// written in Go share it. SPEC.md in this directory is the normative text.
//
// A plugin exports handshake, canonicalize and project, and may export
// project_batch ([ExportHandshake] and the constants beside it say what
// each takes and returns). Each but handshake may also have a direct form
// ([DirectSuffix], [ExportAlloc]) that passes the same messages through
// the plugin's own memory instead of the Extism kernel. A plugin refuses a
// whole call with a non-zero status and an Extism error message; the host
// reports it as a policy refusal.
//
// In Go, a [Policy] refuses a project call's settings with an error that
// wraps [ErrRefused]; any other error is a failed call. A [BatchProjector]
// reports a refused item in its [BatchResult] and fails only a whole call;
// [ProjectAll] keeps the same rule for a policy that cannot batch. The
// package imports the standard library only and touches nothing.
package abi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Version is the ABI version this package describes. A plugin's handshake
// must report exactly this number.
const Version = 1

// Names of the functions a policy plugin exports: the first three are
// required, ExportProjectBatch is optional.
const (
	// ExportHandshake takes no input, or a [HandshakeRequest] carrying the
	// operator's plugin-wide configuration. It returns a [Handshake]: the
	// plugin's name, the ABI version it speaks and the settings keys it
	// owns. The host refuses, at load, a plugin whose version is not
	// [Version].
	ExportHandshake = "handshake"
	// ExportCanonicalize takes a [CanonicalizeRequest], a batch of raw
	// settings objects. It returns a [CanonicalizeResponse] with one
	// [CanonicalResult] per settings object, in order: the canonical form
	// and the opaque metadata key, or an error for that object.
	ExportCanonicalize = "canonicalize"
	// ExportProject takes a [ProjectRequest]: one settings object and the
	// names of a server's tools, prompts and resources. It returns a
	// [ProjectResponse] listing, by index, what one session sees, with the
	// two session flags of each visible tool. A plugin whose handshake opts
	// in ([Handshake.Renames]) also gives the name and description each
	// visible tool and prompt is exposed with. Tool schemas never cross
	// the boundary: the host applies the decisions and clones the tools.
	ExportProject = "project"
	// ExportProjectBatch projects many (settings, snapshot) items in one
	// call. It takes a [ProjectBatchRequest]: deduplicated settings objects
	// and snapshots, and a list of (settings, snapshot) items. It returns a
	// [ProjectBatchResponse] with one [BatchResult] per item, in order:
	// what project would answer for that item, or the reason project would
	// refuse it. It saves the fixed cost of one plugin call per item; a
	// plugin without it still works, and the host then calls project once
	// per item.
	ExportProjectBatch = "project_batch"
)

// Direct calls (SPEC.md section 5.2): optional exports through which the
// host writes a request straight into the plugin's exported memory and
// reads the answer from it, instead of copying both through the Extism
// kernel eight bytes per host call. A plugin with them is still a complete
// Extism plugin; other hosts ignore them.
const (
	// ExportAlloc ("wasmhost_alloc", type (i32) -> i32) returns the address,
	// in the plugin's memory, of a buffer of at least the given number of
	// bytes that stays valid until the next call into the plugin.
	ExportAlloc = "wasmhost_alloc"
	// DirectSuffix names the direct form of an export: "canonicalize_direct"
	// (type (i32, i32) -> i64) takes the address and length of a request
	// written into the buffer ExportAlloc returned, and answers exactly what
	// "canonicalize" answers for it; see [DirectResult].
	DirectSuffix = "_direct"
)

// DirectFlagRefused is the bit of a direct export's result that marks the
// answer as a refusal: the bytes are then the error message the Extism
// export would have set, with a non-zero status.
const DirectFlagRefused = 1 << 31

// DirectResult splits the i64 a direct export returns: the address of the
// answer in the plugin's memory (high 32 bits), its length (low 31 bits),
// and whether the answer is a refusal message (bit 31).
func DirectResult(r uint64) (addr, n uint32, refused bool) {
	return uint32(r >> 32), uint32(r) &^ DirectFlagRefused, uint32(r)&DirectFlagRefused != 0
}

// PackDirectResult is the inverse of [DirectResult], for plugins in Go.
func PackDirectResult(addr, n uint32, refused bool) uint64 {
	r := uint64(addr)<<32 | uint64(n&^DirectFlagRefused)
	if refused {
		r |= DirectFlagRefused
	}
	return r
}

// DirectExports lists the exports that have a direct form.
var DirectExports = []string{ExportCanonicalize, ExportProject, ExportProjectBatch}

// RequiredExports lists every export the host checks for at load time.
var RequiredExports = []string{ExportHandshake, ExportCanonicalize, ExportProject}

// OptionalExports lists the exports a plugin may leave out. When a module
// has one, the host checks its type at load like a required export's.
var OptionalExports = []string{ExportProjectBatch, ExportAlloc,
	ExportCanonicalize + DirectSuffix, ExportProject + DirectSuffix, ExportProjectBatch + DirectSuffix}

// ExportSignature returns the function type the host calls an export of
// this ABI with, in the form `wasmhost inspect` prints: "() -> i32" for the
// Extism exports, "(i32) -> i32" for ExportAlloc and "(i32, i32) -> i64"
// for a direct export.
func ExportSignature(name string) string {
	switch {
	case name == ExportAlloc:
		return "(i32) -> i32"
	case strings.HasSuffix(name, DirectSuffix):
		return "(i32, i32) -> i64"
	}
	return "() -> i32"
}

// Wants values a plugin may list in [Handshake.Wants] to receive more than
// names in a [ProjectRequest].
const (
	// WantToolAnnotations asks the host to fill ProjectRequest.ToolAnnotations.
	WantToolAnnotations = "toolAnnotations"
)

// Limits the host enforces by default. Operators may change the memory and
// time limits; the size limits are part of ABI v1.
const (
	// DefaultMemoryLimitBytes caps the linear memory of each plugin module.
	DefaultMemoryLimitBytes = 256 << 20
	// DefaultCallTimeoutMillis bounds one export call, in milliseconds.
	DefaultCallTimeoutMillis = 2000
	// MaxOutputBytes caps the bytes a plugin may return from one call.
	MaxOutputBytes = 16 << 20
	// MaxBatch is the most settings objects the host sends in one
	// canonicalize call, and the most items in one project_batch call;
	// larger batches are split by the host.
	MaxBatch = 4096
	// MaxKeyBytes caps the length of one metadata key.
	MaxKeyBytes = 64 << 10
)

// A Handshake is the output of the handshake export.
type Handshake struct {
	// ABI is the ABI version the plugin speaks; it must equal [Version].
	ABI int `json:"abi"`
	// Name identifies the plugin to operators, e.g. "policy-default".
	Name string `json:"name"`
	// Version is the plugin's own version, free-form, e.g. "1.0.0".
	Version string `json:"version"`
	// Wants lists optional inputs the plugin needs in project calls (see
	// [WantToolAnnotations]). Unknown values are refused at load.
	Wants []string `json:"wants,omitempty"`
	// SettingsKeys lists the per-server settings keys the plugin owns
	// besides [HostSettingsKeys], e.g. "readOnlyOnly": the host accepts them
	// in server entries and session overrides and passes them in the
	// settings object of canonicalize and project. Each matches
	// [ValidSettingsKey] and is not a key of wasmhost's own.
	SettingsKeys []string `json:"settingsKeys,omitempty"`
	// Renames opts the plugin into renames and descriptions (SPEC.md
	// section 5.3): only with it may a project answer give a visible tool
	// or prompt an exposed name ([ToolDecision.Name], [Rename]) or a
	// replacement description. Plugins built before it leave it out and
	// keep working unchanged.
	Renames bool `json:"renames,omitempty"`
	// CanonicalKeys declares that the plugin's metadata key for a settings
	// object is always the JSON text of its canonical form, byte for byte
	// as the plugin writes it, and lets its canonicalize answers leave the
	// key out of a result that has a canonical form (SPEC.md section 4):
	// the host then takes that text as the key, so the plugin writes each
	// canonical form once instead of twice. Plugins built before it leave
	// it out, and a result without a key stays bad output for them.
	CanonicalKeys bool `json:"canonicalKeys,omitempty"`
}

// A HandshakeRequest is the input of the handshake export when the host
// has plugin-wide configuration for the plugin (SPEC.md section 3). With no
// configuration the input is empty, as ABI v1 plugins built before it
// expect; a plugin that ignores its input keeps working either way.
type HandshakeRequest struct {
	// ABI is the ABI version of the host, [Version].
	ABI int `json:"abi"`
	// Config is the operator's "policy.config" value, any JSON, exactly as
	// configured (compacted).
	Config json.RawMessage `json:"config"`
}

// HostSettingsKeys are the settings keys wasmhost itself passes to a
// plugin in every settings object: a plugin may not declare them.
var HostSettingsKeys = []string{"trust", "alwaysLoadTools", "includeTools", "excludeTools"}

// MaxSettingsKeys is the most keys a handshake may declare in
// SettingsKeys.
const MaxSettingsKeys = 64

// ValidSettingsKey reports whether k may be declared as a plugin-owned
// settings key: 1 to 64 ASCII letters, digits, '_' and '-', starting with
// a letter.
func ValidSettingsKey(k string) bool {
	if len(k) == 0 || len(k) > 64 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// A CanonicalizeRequest is the input of the canonicalize export.
type CanonicalizeRequest struct {
	// Settings holds raw settings objects exactly as configured: the keys
	// trust, includeTools, excludeTools and alwaysLoadTools when present,
	// ill-typed values included, so the plugin can refuse them.
	Settings []json.RawMessage `json:"settings"`
}

// A CanonicalizeResponse is the output of the canonicalize export.
type CanonicalizeResponse struct {
	// Results has exactly one entry per request settings object, in order.
	Results []CanonicalResult `json:"results"`
}

// A CanonicalResult is the outcome for one settings object: either Error is
// set, or Key (and usually Canonical) is.
type CanonicalResult struct {
	// Canonical is the plugin's canonical form of the settings, any JSON
	// value. It is shown to operators and compared by golden cases.
	Canonical json.RawMessage `json:"canonical,omitempty"`
	// Key is the opaque metadata key: equal canonical forms give equal keys,
	// different ones different keys. Non-empty, at most [MaxKeyBytes]. A
	// plugin whose handshake has [Handshake.CanonicalKeys] may leave it out
	// on the wire; the host's results always carry it.
	Key string `json:"key,omitempty"`
	// Error, when non-empty, says why the settings object was refused.
	Error string `json:"error,omitempty"`
}

// A ProjectRequest is the input of the project export: one session's
// settings for one server and the names in that server's snapshot.
type ProjectRequest struct {
	// Settings is the raw settings object, as in [CanonicalizeRequest].
	Settings json.RawMessage `json:"settings"`
	// Tools holds the tool names, in snapshot order.
	Tools []string `json:"tools"`
	// ToolAnnotations, present only when the plugin's handshake wants
	// [WantToolAnnotations], holds each tool's MCP annotations object (or
	// null), parallel to Tools.
	ToolAnnotations []json.RawMessage `json:"toolAnnotations,omitempty"`
	// Prompts holds the prompt names, in snapshot order.
	Prompts []string `json:"prompts"`
	// Resources holds the resource URIs, in snapshot order.
	Resources []string `json:"resources"`
}

// A ProjectResponse is the output of the project export. Each list holds
// indexes into the matching request list, strictly increasing, so the
// session sees items in snapshot order and never twice.
//
// On the wire a visible prompt is its index or, for a plugin whose
// handshake has [Handshake.Renames], an object {"i": index, "name": ...,
// "description": ...} (SPEC.md section 5.3); in Go the index is in Prompts
// and the rest in PromptRenames. ProjectResponse and [BatchResult] have
// their own JSON methods for that; the output of a response without
// renames is what it was before them, byte for byte.
type ProjectResponse struct {
	Tools     []ToolDecision `json:"tools"`
	Prompts   []int          `json:"prompts"`
	Resources []int          `json:"resources"`
	// PromptRenames is nil when no visible prompt is renamed or
	// redescribed, and otherwise parallel to Prompts: PromptRenames[j] is
	// what prompt Prompts[j] is exposed as (zero fields keep the
	// upstream's name and description).
	PromptRenames []Rename `json:"-"`
}

// A Rename is an exposed name and a replacement description the plugin
// gives a visible tool or prompt (SPEC.md section 5.3). An empty field
// keeps the upstream's own name or description; on the wire it is left
// out, and an empty string there is bad output.
type Rename struct {
	// Name is the name the session sees instead of the upstream's, before
	// the session's own naming (prefixes) applies. Calls to it reach the
	// upstream under the upstream's name.
	Name string `json:"name,omitempty"`
	// Description replaces the upstream's description. At most
	// [MaxDescriptionBytes] bytes of UTF-8.
	Description string `json:"description,omitempty"`
}

// IsZero reports whether r changes nothing.
func (r Rename) IsZero() bool { return r.Name == "" && r.Description == "" }

// MaxDescriptionBytes bounds a replacement description (SPEC.md section
// 5.3): long enough for any description a plugin shortens, short enough
// that a plugin cannot make one tool cost a session's context what a whole
// server's list does.
const MaxDescriptionBytes = 4096

// A ToolDecision makes one tool visible to the session with its two session
// flags and, for a plugin whose handshake has [Handshake.Renames], an
// exposed name and a replacement description.
type ToolDecision struct {
	// Index is the tool's position in ProjectRequest.Tools.
	Index int `json:"i"`
	// Trust is the session's trust flag for this tool.
	Trust bool `json:"trust"`
	// AlwaysLoad asks the session to load this tool eagerly.
	AlwaysLoad bool `json:"alwaysLoad"`
	// Name, when not empty, is the name the session sees instead of the
	// upstream's (see [Rename]).
	Name string `json:"name,omitempty"`
	// Description, when not empty, replaces the upstream's description.
	Description string `json:"description,omitempty"`
}

// Rename returns the decision's exposed name and description.
func (d ToolDecision) Rename() Rename { return Rename{Name: d.Name, Description: d.Description} }

// A Policy is the Go face of ABI v1: it canonicalizes settings and decides
// projections. host.Plugin implements it by calling a wasm plugin;
// metakey.Reference implements it natively as the test oracle. Both
// implementations return responses that have been validated against the
// request (see [ValidateCanonicalize] and [ValidateProject]).
type Policy interface {
	// Handshake returns what the policy reported about itself at load.
	Handshake() Handshake
	Canonicalize(ctx context.Context, req *CanonicalizeRequest) (*CanonicalizeResponse, error)
	// Project decides one projection. When the policy refuses the settings
	// the error wraps [ErrRefused]; any other error is a failed call.
	Project(ctx context.Context, req *ProjectRequest) (*ProjectResponse, error)
}

// ErrRefused is wrapped by the error a [Policy] returns when it refuses its
// input (for Project: the settings), as opposed to failing: errors.Is(err,
// ErrRefused) tells the two apart. host.ErrPluginRefused wraps it.
var ErrRefused = errors.New("policy refused the input")

// A RefusalMessager is a Project refusal that carries the policy's own
// message for it: the message a [BatchProjector] gives the same settings'
// item in [BatchResult.Error] (abi/SPEC.md section 5.1). The host's plugin
// refusals and the native reference's implement it; errors.As finds it in
// a wrapped error. The conformance runner uses it to check that the batch
// path refuses with project's message.
type RefusalMessager interface {
	error
	RefusalMessage() string
}

// UnmarshalJSON decodes a decision strictly: "i" is required (a missing
// index would otherwise read as tool 0 and expose it), and unknown members
// are refused. A missing flag reads as false, the restrictive value. A
// "name" or "description" given as "" is refused: it is left out to keep
// the upstream's.
func (d *ToolDecision) UnmarshalJSON(b []byte) error {
	var raw struct {
		Index       *int    `json:"i"`
		Trust       bool    `json:"trust"`
		AlwaysLoad  bool    `json:"alwaysLoad"`
		Name        *string `json:"name"`
		Description *string `json:"description"`
	}
	if err := decodeStrictly(b, &raw); err != nil {
		return fmt.Errorf("tool decision: %w", err)
	}
	if raw.Index == nil {
		return errors.New(`tool decision: "i" is missing`)
	}
	r, err := renameOf(raw.Name, raw.Description)
	if err != nil {
		return fmt.Errorf("tool decision: %w", err)
	}
	*d = ToolDecision{Index: *raw.Index, Trust: raw.Trust, AlwaysLoad: raw.AlwaysLoad, Name: r.Name, Description: r.Description}
	return nil
}

// renameOf checks the optional name and description members of a tool
// decision or prompt object: present means not empty.
func renameOf(name, description *string) (Rename, error) {
	var r Rename
	if name != nil {
		if *name == "" {
			return r, errors.New(`"name" is empty (leave it out to keep the upstream's name)`)
		}
		r.Name = *name
	}
	if description != nil {
		if *description == "" {
			return r, errors.New(`"description" is empty (leave it out to keep the upstream's description)`)
		}
		r.Description = *description
	}
	return r, nil
}

// decodeStrictly decodes b into v refusing unknown members.
func decodeStrictly(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// A promptRef is one element of a project answer's prompts: an index, or
// an object with "i" and optional "name" and "description".
type promptRef struct {
	index  int
	rename Rename
}

// UnmarshalJSON decodes a prompt element strictly.
func (p *promptRef) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return json.Unmarshal(b, &p.index)
	}
	var raw struct {
		Index       *int    `json:"i"`
		Name        *string `json:"name"`
		Description *string `json:"description"`
	}
	if err := decodeStrictly(b, &raw); err != nil {
		return fmt.Errorf("prompt: %w", err)
	}
	if raw.Index == nil {
		return errors.New(`prompt: "i" is missing`)
	}
	r, err := renameOf(raw.Name, raw.Description)
	if err != nil {
		return fmt.Errorf("prompt: %w", err)
	}
	*p = promptRef{index: *raw.Index, rename: r}
	return nil
}

// plainResponse is a ProjectResponse without its JSON methods.
type plainResponse ProjectResponse

// UnmarshalJSON decodes a project answer strictly (no unknown members),
// prompts given as indexes or objects (see [ProjectResponse]).
func (r *ProjectResponse) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	var w struct {
		Tools     []ToolDecision `json:"tools"`
		Prompts   []promptRef    `json:"prompts"`
		Resources []int          `json:"resources"`
	}
	if err := decodeStrictly(b, &w); err != nil {
		return err
	}
	*r = ProjectResponse{Tools: w.Tools, Resources: w.Resources}
	if w.Prompts != nil {
		r.Prompts = make([]int, len(w.Prompts))
		for j, p := range w.Prompts {
			r.Prompts[j] = p.index
			if !p.rename.IsZero() && r.PromptRenames == nil {
				r.PromptRenames = make([]Rename, len(w.Prompts))
			}
		}
		if r.PromptRenames != nil {
			for j, p := range w.Prompts {
				r.PromptRenames[j] = p.rename
			}
		}
	}
	return nil
}

// MarshalJSON encodes a project answer, each renamed prompt as an object.
func (r ProjectResponse) MarshalJSON() ([]byte, error) {
	if r.PromptRenames == nil {
		return json.Marshal(plainResponse(r))
	}
	if len(r.PromptRenames) != len(r.Prompts) {
		return nil, fmt.Errorf("project response: %d prompt renames for %d prompts", len(r.PromptRenames), len(r.Prompts))
	}
	prompts := make([]any, len(r.Prompts))
	for j, i := range r.Prompts {
		if rn := r.PromptRenames[j]; !rn.IsZero() {
			prompts[j] = struct {
				Index int `json:"i"`
				Rename
			}{i, rn}
		} else {
			prompts[j] = i
		}
	}
	return json.Marshal(struct {
		Tools     []ToolDecision `json:"tools"`
		Prompts   []any          `json:"prompts"`
		Resources []int          `json:"resources"`
	}{r.Tools, prompts, r.Resources})
}

// PromptRename returns what the j-th visible prompt is exposed as.
func (r *ProjectResponse) PromptRename(j int) Rename {
	if j < len(r.PromptRenames) {
		return r.PromptRenames[j]
	}
	return Rename{}
}

// HasRenames reports whether r renames or redescribes any visible item.
func (r *ProjectResponse) HasRenames() bool {
	for _, d := range r.Tools {
		if !d.Rename().IsZero() {
			return true
		}
	}
	for _, rn := range r.PromptRenames {
		if !rn.IsZero() {
			return true
		}
	}
	return false
}
