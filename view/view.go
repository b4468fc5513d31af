// Package view projects an upstream MCP server's discovered tools, prompts
// and resources into one session, according to that session's settings for
// the server and a policy plugin ([abi.Policy]).
//
// A [View] is one (session, server) pair. It owns a private copy of the
// session's raw settings and the metadata key the policy computed from it
// when they were set, and the [Projection] it last applied to the
// session's [Registry]: a replay deletes and puts only what differs, and
// settings with the captured key change nothing. When the policy fails, the
// view withdraws everything it registered and records why ([View.Err]).
// An owner (a pool entry) drives it through an [Attachment]: Apply,
// Hold during a restart, Withdraw, Detach; older snapshots are ignored.
// Views with equal keys on one owner share a [Memo], so they compute each
// projection once; snapshots are never modified, projections clone.
//
// It calls a policy and a registry and nothing else; a registry must not
// call back into the view. Views are safe for concurrent use; never hold a
// lock a Registry or Policy needs while calling into a view. The reasons
// are in docs/design.md.
package view

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/pool"
)

// ErrRefused is wrapped by the error a view records when the policy refuses
// the settings object itself (a per-item canonicalize error, such as an
// ill-typed includeTools). The message after it is the policy's.
var ErrRefused = errors.New("policy refused the settings")

// ErrAttached is returned by [View.Attach] when the view is already
// attached: a view follows at most one snapshot owner at a time.
var ErrAttached = errors.New("view is already attached")

// Config is what a view is created with.
type Config struct {
	// Session and Server name the pair the view projects; they appear in
	// errors and logs, and Server is passed to every registry call.
	Session string
	Server  string
	// Registry is the session's registry. Required.
	Registry Registry
	// Counters counts the view's work. Required; usually shared with the
	// pool.
	Counters *opcount.Counters
	// Policy decides keys and projections. Required.
	Policy abi.Policy
	// Settings is the session's raw settings object for the server. The view
	// keeps a private copy. Nil or empty means an empty object.
	Settings json.RawMessage
	// Logger receives failures; nil means slog.Default().
	Logger *slog.Logger
}

// A View is one session's projection of one upstream server. See the
// package documentation.
type View struct {
	session  string
	server   string
	reg      Registry
	counters *opcount.Counters
	log      *slog.Logger

	mu       sync.Mutex
	settings json.RawMessage // private copy
	policy   abi.Policy
	gen      uint64 // policy generation, bumped by SetPolicy
	key      string // captured key; "" when not computed or after a failure
	att      *Attachment
	snap     *pool.Snapshot // the snapshot to show; nil when none
	hold     bool           // defer replays until the next Apply
	err      error

	// What the registry holds now, and what it was computed from.
	applied     *Projection
	appliedSnap *pool.Snapshot
	appliedKey  string
	appliedGen  uint64

	// lag is set while the registrations are of older settings or policy
	// than the view's (a change taken while held); read without mu.
	lag atomic.Bool
}

// New returns a detached view. It makes no policy call: the key is computed
// from the private settings copy when the view first needs it (its first
// Apply or SetSettings). New panics if Registry, Counters or Policy is nil.
func New(cfg Config) *View {
	if cfg.Registry == nil || cfg.Counters == nil || cfg.Policy == nil {
		panic("view.New: Registry, Counters and Policy are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &View{
		session:  cfg.Session,
		server:   cfg.Server,
		reg:      cfg.Registry,
		counters: cfg.Counters,
		log:      log.With("session", cfg.Session, "server", cfg.Server),
		settings: cloneSettings(cfg.Settings),
		policy:   cfg.Policy,
	}
}

// Session returns the session name the view was created with.
func (v *View) Session() string { return v.session }

// Server returns the server name the view was created with.
func (v *View) Server() string { return v.server }

// Settings returns a copy of the view's current raw settings.
func (v *View) Settings() json.RawMessage {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.settings)
}

// Key returns the metadata key captured for the current settings, or "" if
// none has been computed yet or the last policy call failed.
func (v *View) Key() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.key
}

// Policy returns the policy in use.
func (v *View) Policy() abi.Policy {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.policy
}

// Err returns why the view currently shows nothing from its server (a
// policy failure, or the cause its owner withdrew it with), or nil. A
// successful replay clears it.
func (v *View) Err() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.err
}

// Applied returns the projection currently registered, or nil when the view
// has nothing registered. The projection is shared and must not be
// modified.
func (v *View) Applied() *Projection {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.applied
}

// Attached reports whether the view is attached to a snapshot owner.
func (v *View) Attached() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.att != nil
}

// SetSettings replaces the view's settings with a private copy of settings
// (nil or empty meaning {}) and recomputes the metadata key with one
// canonicalize call. If the key equals the captured one it returns
// changed=false and touches nothing else. Otherwise it captures the new key
// and replays the current snapshot through the new projection
// (immediately, or at the next Apply when the view holds no snapshot or is
// held during a restart), and returns changed=true. If the policy fails,
// the view fails closed: it deletes its registrations and records the
// error, which it also returns; changed is false when canonicalize failed
// and true when the key changed but the projection failed.
func (v *View) SetSettings(ctx context.Context, settings json.RawMessage) (changed bool, err error) {
	v.counters.Refreshes.Add(1)
	cp := cloneSettings(settings)
	v.mu.Lock()
	defer v.mu.Unlock()
	key, err := v.canonicalize(ctx, v.policy, cp)
	v.settings = cp
	if err != nil {
		return false, v.failClosed(err)
	}
	if key == v.key {
		return false, nil
	}
	v.key = key
	return true, v.sync(ctx)
}

// AdoptSettings makes settings the view's settings without asking the
// policy, when the caller already knows their key under the view's policy:
// p must be the view's policy and key what p gives for settings. If the
// view is healthy and key is its current key, the settings mean what the
// old ones meant, so there is nothing to re-project or replay, which is
// what SetSettings would conclude too: the view keeps the new bytes (a
// later SetPolicy canonicalizes them) and AdoptSettings reports true.
// Otherwise it changes nothing and reports false; the caller then uses
// SetSettings. The view keeps settings without copying them: they must not
// be modified afterwards. p is compared by pointer: with a policy used by
// value, AdoptSettings always reports false.
func (v *View) AdoptSettings(settings json.RawMessage, p abi.Policy, key string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.err != nil || v.key == "" || v.key != key || !samePolicy(v.policy, p) {
		return false
	}
	v.counters.Refreshes.Add(1)
	v.settings = settings
	return true
}

// samePolicy reports whether a and b are the same policy, compared by
// pointer. Policies held by value are never taken as the same (comparing
// them could panic on an uncomparable type); AdoptSettings then declines
// and the caller asks the policy.
func samePolicy(a, b abi.Policy) bool {
	return a != nil && reflect.TypeOf(a).Kind() == reflect.Pointer && a == b
}

// SetPolicy switches the view to policy p, recomputes the key with it and
// re-projects the current snapshot (unless held or without a snapshot). A
// key is only comparable with keys from the same policy, so the projection
// is always recomputed; the registry diff makes an unchanged outcome send
// nothing. On failure the view fails closed and the error is returned.
func (v *View) SetPolicy(ctx context.Context, p abi.Policy) error {
	return v.setPolicy(ctx, p, nil)
}

// SetPolicyWith is SetPolicy that first makes settings (nil or empty
// meaning {}) the view's settings, without copying them: they must not be
// modified afterwards. It is for an owner that kept newer settings than
// the view's, of the same key under the old policy (they change nothing in
// the view, see AdoptSettings): the new policy may tell them apart, so the
// view is keyed by these.
func (v *View) SetPolicyWith(ctx context.Context, p abi.Policy, settings json.RawMessage) error {
	if len(settings) == 0 {
		settings = json.RawMessage("{}")
	}
	return v.setPolicy(ctx, p, settings)
}

// setPolicy is SetPolicy, replacing the settings first unless settings is
// nil.
func (v *View) setPolicy(ctx context.Context, p abi.Policy, settings json.RawMessage) error {
	if p == nil {
		return fmt.Errorf("session %q, server %q: set policy: nil policy", v.session, v.server)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if settings != nil {
		v.settings = settings
	}
	v.policy = p
	v.gen++
	key, err := v.canonicalize(ctx, p, v.settings)
	if err != nil {
		return v.failClosed(err)
	}
	v.key = key
	return v.sync(ctx)
}

// Attach attaches the view to a snapshot owner that will drive it through
// the returned Attachment. memo may be nil (no sharing). Attaching does not
// replay anything; the owner's first Apply does. It returns ErrAttached if
// the view is attached already.
func (v *View) Attach(memo *Memo) (*Attachment, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.att != nil {
		return nil, fmt.Errorf("session %q, server %q: %w", v.session, v.server, ErrAttached)
	}
	v.att = &Attachment{v: v, memo: memo}
	v.snap = nil
	v.hold = false
	return v.att, nil
}

// An Attachment is the owner's side of an attached view. Its methods do
// nothing once the attachment is detached.
type Attachment struct {
	v    *View
	memo *Memo
}

// View returns the attached view.
func (a *Attachment) View() *View { return a.v }

// Apply makes snap the view's snapshot and replays it with the view's
// current settings and policy; it clears a Hold. A snapshot older (by
// Version) than the one the view holds is ignored. The returned error is a
// policy failure, after which the view has failed closed.
func (a *Attachment) Apply(ctx context.Context, snap *pool.Snapshot) error {
	v := a.v
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.att != a || snap == nil {
		return nil
	}
	if v.snap != nil && snap.Version < v.snap.Version {
		return nil
	}
	v.snap = snap
	v.hold = false
	return v.sync(ctx)
}

// Hold defers replays until the next Apply: the view keeps its current
// registrations, and settings or policy changes are captured but only
// applied by that Apply. An owner holds its views while it restarts.
func (a *Attachment) Hold() {
	v := a.v
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.att == a {
		v.hold = true
	}
}

// Withdraw deletes the view's registrations and forgets its snapshot,
// recording cause as the view's error; the view stays attached and keeps
// its settings and key, so a later Apply restores it. An owner withdraws
// its views when its transport failed.
func (a *Attachment) Withdraw(cause error) {
	v := a.v
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.att != a {
		return
	}
	v.clear()
	v.snap = nil
	v.hold = false
	v.err = cause
	v.counters.Failures.Add(1)
}

// Detach deletes the view's registrations and detaches it; the attachment
// becomes inert. The view keeps its settings and key and may be attached
// again.
func (a *Attachment) Detach() {
	v := a.v
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.att != a {
		return
	}
	v.clear()
	v.att = nil
	v.snap = nil
	v.hold = false
}

// Handover moves the view to another owner while keeping its
// registrations: a becomes inert and the returned attachment, sharing
// memo, drives the view from now on. The view forgets its snapshot, so
// nothing is replayed until the new owner's first Apply, which brings the
// registry from what the view shows now to the new owner's snapshot by a
// diff: a session sees only what differs between the two. An owner moving
// a session to a new connection uses it, so the session never loses an
// item both connections have. Handover returns nil when a is inert.
func (a *Attachment) Handover(memo *Memo) *Attachment {
	v := a.v
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.att != a {
		return nil
	}
	v.att = &Attachment{v: v, memo: memo}
	v.snap = nil
	v.hold = false
	return v.att
}

// Lagging reports whether the view's registrations are of older settings
// or policy than the view's own: a change taken while the view is held
// (a restart) and not yet replayed. The registrations may then show what
// the session's settings now hide, so its owner forwards no call through
// the view until the replay (pool.Handle.Conn). It does not wait for
// the view's lock.
func (v *View) Lagging() bool { return v.lag.Load() }

// sync brings the registry in line with the view's snapshot, settings and
// policy, if the view is attached, has a snapshot and is not held.
func (v *View) sync(ctx context.Context) error {
	if v.att == nil || v.snap == nil || v.hold {
		v.lag.Store(v.applied != nil && (v.appliedKey != v.key || v.appliedGen != v.gen))
		return nil
	}
	if v.key == "" {
		key, err := v.canonicalize(ctx, v.policy, v.settings)
		if err != nil {
			return v.failClosed(err)
		}
		v.key = key
	}
	if v.applied != nil && v.appliedSnap == v.snap && v.appliedKey == v.key && v.appliedGen == v.gen {
		v.lag.Store(false)
		return nil
	}
	proj, err := v.att.memo.project(ctx, v.policy, v.counters, v.key, v.settings, v.snap)
	if err != nil {
		return v.failClosed(fmt.Errorf("session %q, server %q: project snapshot v%d: %w", v.session, v.server, v.snap.Version, err))
	}
	v.counters.Replays.Add(1)
	if v.applied != proj {
		v.att.memo.delta(v.applied, proj, v.snap).apply(v.reg, v.counters, v.server)
	}
	v.applied = proj
	v.appliedSnap = v.snap
	v.appliedKey = v.key
	v.appliedGen = v.gen
	v.err = nil
	v.lag.Store(false) // after the registry calls: see Lagging
	return nil
}

// canonicalize computes the metadata key of settings under p, counting the
// call.
func (v *View) canonicalize(ctx context.Context, p abi.Policy, settings json.RawMessage) (string, error) {
	key, err := CanonicalKey(ctx, counted{p, v.counters}, settings)
	if err != nil {
		return "", fmt.Errorf("session %q, server %q: %w", v.session, v.server, err)
	}
	return key, nil
}

// CanonicalKey asks p for the metadata key of one raw settings object (nil
// or empty means {}). A per-item refusal is returned as an error wrapping
// ErrRefused; a failed or malformed call as an error wrapping the policy's.
// Views use it for their keys; callers without a view can use it
// directly. A key is only comparable with keys from the same
// policy.
func CanonicalKey(ctx context.Context, p abi.Policy, settings json.RawMessage) (string, error) {
	req := &abi.CanonicalizeRequest{Settings: []json.RawMessage{cloneSettings(settings)}}
	resp, err := p.Canonicalize(ctx, req)
	if err == nil && resp == nil {
		err = errors.New("policy returned no response")
	}
	if err == nil {
		err = abi.ValidateCanonicalize(req, resp)
	}
	if err != nil {
		return "", fmt.Errorf("canonicalize settings: %w", err)
	}
	if msg := resp.Results[0].Error; msg != "" {
		return "", fmt.Errorf("%w: %s", ErrRefused, msg)
	}
	return resp.Results[0].Key, nil
}

// failClosed removes everything the view registered, forgets the key so the
// next attempt re-projects, and records err.
func (v *View) failClosed(err error) error {
	v.clear()
	v.key = ""
	v.err = err
	v.counters.Failures.Add(1)
	v.log.Warn("view failed closed", "err", err)
	return err
}

// clear deletes every registration of the view.
func (v *View) clear() {
	applyDiff(v.reg, v.counters, v.server, v.applied, nil)
	v.applied = nil
	v.appliedSnap = nil
	v.appliedKey = ""
	v.lag.Store(false)
}

// cloneSettings copies raw settings; nil or empty becomes "{}" so the
// policy always receives a JSON value.
func cloneSettings(s json.RawMessage) json.RawMessage {
	if len(s) == 0 {
		return json.RawMessage("{}")
	}
	return slices.Clone(s)
}
