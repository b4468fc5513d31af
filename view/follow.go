package view

import "github.com/wasmhost/wasmhost/pool"

// A View follows a pool entry's snapshots as a [pool.Follower].
var _ pool.Follower = (*View)(nil)

// AttachTo attaches the view to the pool entry e, sharing e's memo
// ([MemoOf]) with the other views on it: Attach for a pool entry, through
// which the pool drives the view.
func (v *View) AttachTo(e *pool.Entry) (pool.Attachment, error) {
	a, err := v.Attach(MemoOf(e))
	if err != nil {
		return nil, err
	}
	return a, nil
}

// HandoverTo is Handover to the pool entry e, sharing e's memo. It returns
// nil when a is inert.
func (a *Attachment) HandoverTo(e *pool.Entry) pool.Attachment {
	if next := a.Handover(MemoOf(e)); next != nil {
		return next
	}
	return nil
}

// MemoOf returns the memo the views attached to the pool entry e share,
// kept by the entry ([pool.Entry.Shared]). [Prefill] items for e's views
// name it.
func MemoOf(e *pool.Entry) *Memo {
	return e.Shared(func() any { return NewMemo() }).(*Memo)
}

// Of returns the view that h holds, or nil when h holds no View.
func Of(h *pool.Handle) *View {
	v, _ := h.Follower().(*View)
	return v
}
