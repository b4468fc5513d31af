package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/view"
)

// ErrSettingsRefused is wrapped by the error of Check and CheckOverlay for
// each binding whose settings the policy refuses.
var ErrSettingsRefused = errors.New("the policy refuses the settings")

// A checked binding is one (session, server) whose settings Check asks the
// policy about.
type checked struct {
	session, server string
	path            string // where the settings come from, for the error
	settings        json.RawMessage
}

// Check asks p (nil: the running policy) for the keys of the settings that
// the bindings of cfg, under the runtime overlays, would have, and returns
// an error wrapping ErrSettingsRefused that names each binding (session,
// server and the JSON path its settings come from) whose settings p
// refuses. Nothing is changed: a caller checks a config, or a policy
// swap, before it lets Apply or SetPolicy fail the views closed.
//
// A binding that has those very settings now is not asked about when p is
// the running policy (its refusal, if any, is in force already and is not
// the new config's doing), nor, for another policy, when it shows nothing
// now (failed closed, or holding no connection), since the swap cannot
// take anything away from it. A policy call that fails as a whole is
// returned as it is.
//
// For another policy (a swap), Check also projects with p, under the new
// settings, the snapshot each of those bindings that shows something now
// sees (view.TryProject): a projection p refuses is an error wrapping
// ErrSettingsRefused, and one whose call fails (a trap, a timeout, bad
// output) an error naming the session and server, since either would take
// from the session what it sees.
func (r *Reconciler) Check(ctx context.Context, cfg *config.Config, p abi.Policy) error {
	r.mu.Lock()
	r.smu.RLock() // after mu, as mutators take them
	var items []checked
	servers := cfg.ServerNames() // sorted once, not once a session
	var buf []byte               // each pair's settings, copied for the items kept
	for _, name := range cfg.SessionNames() {
		sess := cfg.Sessions[name]
		overlays := r.overlays[name]
		var bindings map[string]*binding
		if s := r.sessions[name]; s != nil && p == nil {
			bindings = s.bindings
		}
		for _, server := range servers {
			var enabled bool
			buf, enabled = sess.AppendEffectiveSettings(buf[:0], server)
			if !enabled {
				continue
			}
			if _, ok := overlays[server]; ok {
				continue // the overlay decides, below
			}
			if b := bindings[server]; b != nil && b.want != nil && string(b.want.settings) == string(buf) {
				// The running policy answered these settings already
				// (check would drop the item): a reload costs no more
				// here for the bindings it leaves as they are.
				continue
			}
			path := config.JoinPath("mcpServers", server)
			if _, ok := sess.Overrides[server]; ok {
				path = config.JoinPath("sessions", name, "overrides", server) + " over " + path
			}
			items = append(items, checked{session: name, server: server, path: path, settings: bytes.Clone(buf)})
		}
		for _, server := range slices.Sorted(maps.Keys(overlays)) {
			if cfg.Servers[server] == nil && r.servers[server] != nil {
				continue // Apply drops the overlays of a removed server
			}
			if w := overlays[server]; !w.disabled {
				items = append(items, checked{session: name, server: server, path: "the runtime overlay", settings: w.settings})
			}
		}
	}
	r.smu.RUnlock()
	r.mu.Unlock()
	return r.check(ctx, p, items)
}

// CheckOverlay is Check for one runtime overlay that PutOverlay would put:
// it returns an error wrapping ErrSettingsRefused when the running policy
// refuses srv's settings, unless the binding has those settings now.
func (r *Reconciler) CheckOverlay(ctx context.Context, sessionName string, srv *config.Server) error {
	if srv == nil || srv.Disabled {
		return nil
	}
	r.mu.Lock()
	_, known := r.inputs[sessionName]
	r.mu.Unlock()
	if !known {
		return nil // PutOverlay says so
	}
	return r.check(ctx, nil, []checked{{session: sessionName, server: srv.Name, path: "the overlay", settings: srv.Metadata()}})
}

// CheckDeleteOverlay is Check for the settings DeleteOverlay would bring
// back: it returns an error wrapping ErrSettingsRefused, naming the JSON
// path of the file's settings, when the running policy refuses the
// settings the last applied config gives session for server, unless the
// binding has those settings now. Neither Check nor CheckOverlay asks
// about them while the overlay is in force (a reload or a policy swap
// may bring settings the policy refuses under it), so without this check
// removing the overlay would fail the binding's view closed. It returns
// nil when there is no such overlay (DeleteOverlay says so) or the file
// gives the session no binding of server.
func (r *Reconciler) CheckDeleteOverlay(ctx context.Context, sessionName, server string) error {
	r.mu.Lock()
	var item *checked
	if _, ok := r.overlays[sessionName][server]; ok {
		if si := r.inputs[sessionName]; si != nil {
			if w := si.want(server); w != nil {
				path := config.JoinPath("mcpServers", server)
				if c := si.cells[server]; c.o != nil {
					path = config.JoinPath("sessions", sessionName, "overrides", server) + " over " + path
				}
				item = &checked{session: sessionName, server: server, path: path, settings: w.settings}
			}
		}
	}
	r.mu.Unlock()
	if item == nil {
		return nil
	}
	return r.check(ctx, nil, []checked{*item})
}

// check canonicalizes the distinct settings of items with p (nil: the
// running policy, which skips the items whose binding has the same
// settings now) and reports the refused ones.
func (r *Reconciler) check(ctx context.Context, p abi.Policy, items []checked) error {
	running := p == nil
	r.smu.RLock()
	items = slices.DeleteFunc(items, func(c checked) bool {
		s := r.sessions[c.session]
		if s == nil {
			return false
		}
		b := s.bindings[c.server]
		if b == nil || b.want == nil || string(b.want.settings) != string(c.settings) {
			return false
		}
		// Unchanged settings: the running policy answered them already;
		// another policy is asked unless the binding shows nothing now
		// (failed closed, or holding no connection), which it cannot
		// take away.
		return running || b.handle == nil || view.Of(b.handle).Err() != nil
	})
	// A swap also tries the new policy on what each binding that shows
	// something sees now (see trials).
	var trials []view.Trial
	var tried []checked
	if !running {
		trials, tried = r.trials(items)
	}
	r.smu.RUnlock()
	if running {
		p = r.viewPolicy()
	}
	if len(items) == 0 {
		return nil
	}
	index := make(map[string]int)
	var distinct []json.RawMessage
	for _, c := range items {
		if _, ok := index[string(c.settings)]; !ok {
			index[string(c.settings)] = len(distinct)
			distinct = append(distinct, c.settings)
		}
	}
	refusals, err := refusedSettings(ctx, p, distinct)
	if err != nil {
		return fmt.Errorf("checking the settings of %s: %w", located(items), err)
	}
	var errs []error
	for _, c := range items {
		if msg := refusals[index[string(c.settings)]]; msg != "" {
			errs = append(errs, fmt.Errorf("%s: session %q, server %q: %w: %s", c.path, c.session, c.server, ErrSettingsRefused, msg))
		}
	}
	if len(errs) > 0 || len(trials) == 0 {
		return errors.Join(errs...)
	}
	projErrs, err := view.TryProject(ctx, p, trials)
	if err != nil {
		return fmt.Errorf("projecting what %s see now: %w", located(tried), err)
	}
	for i, err := range projErrs {
		c := tried[i]
		switch {
		case err == nil:
		case errors.Is(err, abi.ErrRefused):
			errs = append(errs, fmt.Errorf("%s: session %q, server %q: %w: projecting what it sees now: %w", c.path, c.session, c.server, ErrSettingsRefused, err))
		default:
			errs = append(errs, fmt.Errorf("session %q, server %q: projecting what it sees now: %w", c.session, c.server, err))
		}
	}
	return errors.Join(errs...)
}

// trials returns, for a policy swap, the projections the new policy must
// be able to make: for each item whose binding shows something now (a
// healthy view on a live connection with a snapshot), that snapshot under
// the item's settings, and the items they are for. A swap whose policy
// traps, times out or refuses on one of them would take from a session
// what it sees, as a refusal of its settings would. r.smu is held.
func (r *Reconciler) trials(items []checked) ([]view.Trial, []checked) {
	var trials []view.Trial
	var tried []checked
	for _, c := range items {
		s := r.sessions[c.session]
		if s == nil {
			continue
		}
		b := s.bindings[c.server]
		if b == nil || b.handle == nil || b.handle.Released() || view.Of(b.handle).Err() != nil {
			continue
		}
		if snap := b.handle.Entry().Snapshot(); snap != nil {
			trials = append(trials, view.Trial{Settings: c.settings, Snap: snap})
			tried = append(tried, c)
		}
	}
	return trials, tried
}

// located names the bindings of items, with the JSON paths of their
// settings: the first few, and how many more.
func located(items []checked) string {
	const shown = 3
	var b strings.Builder
	for i, c := range items[:min(len(items), shown)] {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (session %q, server %q)", c.path, c.session, c.server)
	}
	if n := len(items) - shown; n > 0 {
		fmt.Fprintf(&b, " and %d more", n)
	}
	return b.String()
}

// refusedSettings canonicalizes settings with p in one call and returns,
// for each, the refusal's message ("" when p gives it a key). A call that
// p refuses as a whole (an error wrapping abi.ErrRefused: a plugin that
// refuses settings by failing the call, which a view's own call of one
// settings object takes as that object's refusal) is made again for each
// object alone, so that the refusal is pinned on the objects that cause
// it. Any other failure of a call is returned.
func refusedSettings(ctx context.Context, p abi.Policy, settings []json.RawMessage) ([]string, error) {
	req := &abi.CanonicalizeRequest{Settings: settings}
	resp, err := p.Canonicalize(ctx, req)
	if err == nil && resp == nil {
		err = errors.New("policy returned no response")
	}
	if err == nil {
		err = abi.ValidateCanonicalize(req, resp)
	}
	switch {
	case err == nil:
		out := make([]string, len(settings))
		for i, r := range resp.Results {
			out[i] = r.Error
		}
		return out, nil
	case !errors.Is(err, abi.ErrRefused):
		return nil, err
	case len(settings) == 1:
		return []string{err.Error()}, nil
	}
	out := make([]string, len(settings))
	for i, s := range settings {
		one, err := refusedSettings(ctx, p, []json.RawMessage{s})
		if err != nil {
			return nil, err
		}
		out[i] = one[0]
	}
	return out, nil
}
