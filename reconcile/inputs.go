package reconcile

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/pool"
)

// A serverInput is what every session's want for one server derives from:
// the transport (spec and identity) and the server's own settings and
// Disabled flag. Apply computes it once per server and compares it with the
// previous Apply's to find the servers whose wants must be rebuilt.
type serverInput struct {
	spec     pool.Spec
	identity string
	settings json.RawMessage
	disabled bool
}

func newServerInput(srv *config.Server) *serverInput {
	spec := pool.FromConfig(srv)
	return &serverInput{
		spec:     spec,
		identity: spec.Fingerprint(),
		settings: srv.Metadata(),
		disabled: srv.Disabled,
	}
}

// same reports whether in and o give every session the same want.
func (in *serverInput) same(o *serverInput) bool {
	return in.identity == o.identity && in.disabled == o.disabled && bytes.Equal(in.settings, o.settings)
}

// A sessionInput is a private copy of what a session contributes to its
// wants: its server list and its overrides. A session whose input and whose
// servers' inputs equal the previous Apply's keeps its wants as they were,
// so a reload does no per-binding work for it beyond checking that its
// bindings are healthy. The copy (not the caller's config) is compared, so a
// config mutated in place between two Applies is still seen as changed.
type sessionInput struct {
	servers   []string // nil when the session does not list its servers
	overrides map[string]config.Override
}

func newSessionInput(s *config.Session) *sessionInput {
	in := &sessionInput{
		servers:   slices.Clone(s.Servers), // keeps nil apart from empty
		overrides: make(map[string]config.Override, len(s.Overrides)),
	}
	// One buffer holds every copied value: a reload copies each changed
	// session's overrides, and sessions often override every server.
	n := 0
	for _, o := range s.Overrides {
		n += len(o.Settings.Trust) + len(o.Settings.AlwaysLoadTools) + len(o.Settings.IncludeTools) + len(o.Settings.ExcludeTools)
	}
	buf := make([]byte, 0, n)
	keep := func(v json.RawMessage) json.RawMessage {
		if v == nil {
			return nil
		}
		start := len(buf)
		buf = append(buf, v...)
		return buf[start:len(buf):len(buf)]
	}
	for server, o := range s.Overrides {
		c := config.Override{Settings: config.Settings{
			Trust:           keep(o.Settings.Trust),
			AlwaysLoadTools: keep(o.Settings.AlwaysLoadTools),
			IncludeTools:    keep(o.Settings.IncludeTools),
			ExcludeTools:    keep(o.Settings.ExcludeTools),
		}}
		if o.Disabled != nil {
			d := *o.Disabled
			c.Disabled = &d
		}
		in.overrides[server] = c
	}
	return in
}

// same reports whether s still has the server list and overrides in holds.
func (in *sessionInput) same(s *config.Session) bool {
	return (in.servers == nil) == (s.Servers == nil) && slices.Equal(in.servers, s.Servers) &&
		maps.EqualFunc(in.overrides, s.Overrides, sameOverride)
}

func sameOverride(a, b config.Override) bool {
	if (a.Disabled == nil) != (b.Disabled == nil) || (a.Disabled != nil && *a.Disabled != *b.Disabled) {
		return false
	}
	return sameRaw(a.Settings.Trust, b.Settings.Trust) &&
		sameRaw(a.Settings.AlwaysLoadTools, b.Settings.AlwaysLoadTools) &&
		sameRaw(a.Settings.IncludeTools, b.Settings.IncludeTools) &&
		sameRaw(a.Settings.ExcludeTools, b.Settings.ExcludeTools)
}

// sameRaw compares two raw settings values, telling an absent value (nil)
// from any present one.
func sameRaw(a, b json.RawMessage) bool {
	return (a == nil) == (b == nil) && bytes.Equal(a, b)
}
