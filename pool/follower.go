package pool

import (
	"context"
	"encoding/json"
)

// A Follower is what an entry fans its snapshots out to: one session's
// projection of the server (the view layer's view.View implements it).
// The pool defines it so that it needs nothing of the layer above: an
// entry drives a follower through the Attachment that AttachTo returns,
// and a Handle asks the follower itself for the rest. A follower must
// not call back into the pool: the entry calls its Attachment with the
// entry's fan-out lock held, and a Handle calls it with the handle's lock
// held.
type Follower interface {
	// Session names the follower's session, in errors and logs.
	Session() string
	// AttachTo attaches the follower to e, which drives it from then
	// on through the returned Attachment; it fails if the follower is
	// attached already. Attaching shows nothing: the entry's first Apply
	// does.
	AttachTo(e *Entry) (Attachment, error)
	// SetSettings gives the follower new raw settings for the server
	// (Handle.RefreshMetadata), reporting whether they change what it
	// shows; an error means it failed closed.
	SetSettings(ctx context.Context, settings json.RawMessage) (changed bool, err error)
	// Lagging reports whether what the follower shows is of older
	// settings than its own (a change taken during a restart, not yet
	// replayed); Handle.Conn forwards nothing meanwhile. It must not
	// wait for a lock the other methods hold.
	Lagging() bool
}

// An Attachment is an entry's side of an attached Follower. Its methods
// do nothing once the attachment is detached or handed over.
type Attachment interface {
	// Apply shows snap with the follower's current settings, ending a
	// Hold; a snapshot older (by Version) than the one shown is ignored.
	// An error means the follower failed closed (a policy failure).
	Apply(ctx context.Context, snap *Snapshot) error
	// Hold keeps what the follower shows until the next Apply: the
	// entry restarts.
	Hold()
	// Withdraw takes back everything the follower shows, recording
	// cause; it stays attached, and a later Apply restores it. The entry
	// failed.
	Withdraw(cause error)
	// Detach takes back everything the follower shows and detaches it.
	Detach()
	// HandoverTo moves the follower to entry e (Standby.Move) keeping
	// what it shows, and returns the attachment e drives it through; the
	// receiver becomes inert. It returns nil when the receiver is inert.
	HandoverTo(e *Entry) Attachment
}

// Shared returns the value the followers of e share, made by newValue
// on the first call: the view layer keeps there the memo through which
// views with equal settings compute each projection once. The pool never
// looks at it. Every caller must pass a newValue of the same kind.
func (e *Entry) Shared(newValue func() any) any {
	e.sharedOnce.Do(func() { e.shared = newValue() })
	return e.shared
}
