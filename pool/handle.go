package pool

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A Handle is one session's hold on an entry: it keeps the entry alive and
// its view attached. A Handle is safe for concurrent use; its operations are
// serialised.
type Handle struct {
	pool     *Pool
	entry    *Entry
	follower Follower
	att      Attachment

	// released is written under mu (which serialises RefreshMetadata and
	// Release) and read without it by Conn and Released, so forwarding
	// never waits for a refresh's policy call.
	mu       sync.Mutex
	released atomic.Bool
}

// Identity returns the transport fingerprint the entry captured when it was
// created. Compare it with the desired Spec.Fingerprint to decide whether
// the held connection is still the right one (pooled or not).
func (h *Handle) Identity() string { return h.entry.identity }

// ID returns the entry's lifecycle id (for logs; never for identity).
func (h *Handle) ID() string { return h.entry.id }

// Spec returns a copy of the spec the entry captured.
func (h *Handle) Spec() Spec { return h.entry.Spec() }

// CallTimeout returns the configured timeout of the captured spec (0: none
// configured), without copying the spec: forwarded calls read it on the
// call path.
func (h *Handle) CallTimeout() time.Duration { return h.entry.spec.Timeout }

// Entry returns the entry the handle holds.
func (h *Handle) Entry() *Entry { return h.entry }

// Follower returns what the handle attached to its entry: the session's
// view of the server.
func (h *Handle) Follower() Follower { return h.follower }

// Released reports whether Release was called.
func (h *Handle) Released() bool { return h.released.Load() }

// Conn returns the entry's current upstream connection, for forwarding
// calls, or nil when the entry is not ready (connecting, restarting, or
// terminal), the handle is released, or the view's registrations lag its
// settings (Follower.Lagging: a refresh taken during a restart, until the
// restart's fan-out has replayed it), so that no call goes out under a
// projection the session's settings no longer give. Fetch it for each
// call: a restart replaces it.
func (h *Handle) Conn() *mcp.ClientSession {
	if h.released.Load() || h.follower.Lagging() {
		return nil
	}
	h.entry.mu.Lock()
	defer h.entry.mu.Unlock()
	return h.entry.upstream
}

// RefreshMetadata hands the view new raw settings for the server (the view
// keeps a private copy) and recomputes the metadata key. An equal key
// returns changed=false with no registry change; a different key replays the
// entry's current snapshot through the new projection and returns
// changed=true. During a restart the view accepts the settings and the
// restart's fan-out applies them. It never acquires again: the refcount does
// not move. On a released handle it returns ErrReleased, on a failed or
// closed entry ErrTerminal, changing nothing. An entry that turns terminal
// while the view refreshes also gives ErrTerminal (the failure withdraws
// the view). A policy failure makes the view fail closed and is returned.
func (h *Handle) RefreshMetadata(ctx context.Context, settings json.RawMessage) (changed bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released.Load() {
		return false, fmt.Errorf("refresh %s for session %q: %w", h.entry.id, h.follower.Session(), ErrReleased)
	}
	if err := h.terminal(); err != nil {
		return false, err
	}
	changed, err = h.follower.SetSettings(ctx, settings)
	// The entry may have failed while the policy ran: the failure withdraws
	// the view once SetSettings lets go of it, so report the entry as
	// terminal now rather than a refresh that will not last, and the caller
	// replaces the entry at once instead of at the next reload.
	if terr := h.terminal(); terr != nil {
		return changed, terr
	}
	return changed, err
}

// terminal returns ErrTerminal, wrapped with the session and the entry's
// cause, when the handle's entry is failed or closed, and nil otherwise.
func (h *Handle) terminal() error {
	h.entry.mu.Lock()
	defer h.entry.mu.Unlock()
	if h.entry.state.Terminal() {
		return fmt.Errorf("refresh for session %q: %w", h.follower.Session(), h.entry.terminalErr())
	}
	return nil
}

// Release detaches the view, deleting its registrations, and drops the
// handle's reference; the last reference closes the connection (waiting
// for the close within ctx). A second Release returns ErrReleased.
func (h *Handle) Release(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released.Load() {
		return fmt.Errorf("release %s for session %q: %w", h.entry.id, h.follower.Session(), ErrReleased)
	}
	h.released.Store(true)
	h.unsubscribeAll(ctx)
	h.att.Detach()
	h.entry.mu.Lock()
	delete(h.entry.handles, h)
	h.entry.mu.Unlock()
	h.pool.counters.Releases.Add(1)
	h.pool.unref(ctx, h.entry)
	return nil
}
