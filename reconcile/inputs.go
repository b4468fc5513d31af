package reconcile

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"maps"
	"slices"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/pool"
)

// A serverInput is what every session's want for one server derives from:
// the transport (spec and identity) and a private copy of the server's own
// settings and Disabled flag. Apply computes it once per server and compares
// it with the previous Apply's to find the servers whose wants must be
// rebuilt. It is never modified.
type serverInput struct {
	spec     pool.Spec
	identity string
	// base holds the server's settings as an override of nothing: the
	// wants of sessions with equal overrides of servers with equal base
	// settings share their settings object (see builder.object).
	base     *config.Override
	disabled bool
}

// same reports whether srv, whose transport identity is identity, gives
// every session the same want as in.
func (in *serverInput) same(srv *config.Server, identity string) bool {
	return in.identity == identity && in.disabled == srv.Disabled && sameSettings(in.base.Settings, srv.Settings)
}

// A sessionInput is what the last Apply knew of one session: a private copy
// of its input (its server list and overrides) and the wants derived from
// it, one cell per server. Apply compares the copy (not the caller's
// config) with the session and brings it in line in place, so a config
// mutated in place between two Applies is still seen as changed, and a
// reload costs a comparison per override plus work for what changed.
type sessionInput struct {
	servers []string // nil when the session does not list its servers
	cells   map[string]*cell
	// overrides counts the cells holding an override.
	overrides int
}

// A cell is one server as one session sees it: the server of the config
// (nil: none of that name), the session's override of it (nil: none) and
// the resulting want.
type cell struct {
	srv *serverInput
	o   *config.Override // private, shared by equal overrides (see builder)
	// listed is whether the session uses srv unless it is disabled
	// (config.Session.Uses).
	listed bool
	// w is the want of (srv, o); nil when the session does not use the
	// server, or until want makes it: a reload replacing overrides leaves
	// it to be made when needed, which the wants whose settings keep
	// their meaning never are (see Reconciler.planChanges).
	w *want
}

// wants reports whether the session uses the server: the config has it,
// the session lists it and does not disable it.
func (c *cell) wants() bool {
	return c.srv != nil && c.listed && !c.off(c.o)
}

// off reports whether the server is disabled under override o (nil: none):
// the Disabled flag config.Override.Layer gives.
func (c *cell) off(o *config.Override) bool {
	if o != nil && o.Disabled != nil {
		return *o.Disabled
	}
	return c.srv.disabled
}

// layer returns the settings of a server with base settings base under
// override o (nil: none), as config.Override.Layer gives them.
func layer(base, o *config.Override) config.Settings {
	if o == nil {
		return base.Settings
	}
	settings, _ := o.Layer(base.Settings, false)
	return settings
}

// want returns the cell's want, making it if need be.
func (c *cell) want() *want {
	if c.w == nil && c.wants() {
		c.w = &want{spec: &c.srv.spec, identity: c.srv.identity, settings: layer(c.srv.base, c.o).JSON()}
	}
	return c.w
}

// want returns the session's want of server, or nil.
func (si *sessionInput) want(server string) *want {
	if c := si.cells[server]; c != nil {
		return c.want()
	}
	return nil
}

// A delta is what an Apply changed in one session's wants: possibly every
// want (rebuilt: a new session, another server list, other servers
// overridden), or those of servers, and those whose settings changed as
// pairs says, the transport staying the same.
type delta struct {
	rebuilt bool
	servers []string
	pairs   []pair
}

// A pair is a change of n wants of one session, for servers whose base
// settings are base, from override from to override to (nil: none): from
// settings old to settings new.
type pair struct {
	base, from, to *config.Override
	old, new       json.RawMessage
	n              int
}

func sameOverride(a *config.Override, b config.Override) bool {
	if (a.Disabled == nil) != (b.Disabled == nil) || (a.Disabled != nil && *a.Disabled != *b.Disabled) {
		return false
	}
	return sameSettings(a.Settings, b.Settings)
}

func sameSettings(a, b config.Settings) bool {
	return sameRaw(a.Trust, b.Trust) &&
		sameRaw(a.AlwaysLoadTools, b.AlwaysLoadTools) &&
		sameRaw(a.IncludeTools, b.IncludeTools) &&
		sameRaw(a.ExcludeTools, b.ExcludeTools) &&
		sameExtra(a.Extra, b.Extra)
}

// sameExtra compares the policy plugin's own settings (config.Settings.Extra).
func sameExtra(a, b map[string]json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !sameRaw(v, w) {
			return false
		}
	}
	return true
}

// sameRaw compares two raw settings values, telling an absent value (nil)
// from any present one.
func sameRaw(a, b json.RawMessage) bool {
	return (a == nil) == (b == nil) && bytes.Equal(a, b)
}

// sameList compares server lists, telling an absent list (nil) from an
// empty one.
func sameList(a, b []string) bool {
	return (a == nil) == (b == nil) && slices.Equal(a, b)
}

// A builder brings the sessions' inputs and wants in line with one config
// (see Reconciler.wants). It makes one private copy of each distinct
// override (by contents), shared by every session that has it, one
// settings object per distinct contents, and one want per distinct (server
// input, override) it builds. Sessions moving servers from one override to
// another then cost a comparison per override, and a copy and a settings
// object per distinct new override; equal settings share their bytes,
// which lets later steps compare them by address. Copies are never
// modified.
type builder struct {
	servers map[string]*serverInput
	// changed lists the servers whose input changed, appeared or vanished;
	// moved holds the same names.
	changed []string
	moved   map[string]bool

	overrides map[string]*config.Override // by contents (see encode)
	scratch   []byte
	// remap holds, for an override an earlier Apply copied, the copy of
	// the last override that replaced it, and lastFrom and lastTo the last
	// replacement made: sessions moving from one override to another in
	// the same words are matched by one comparison, without encoding or
	// hashing.
	remap            map[*config.Override]*config.Override
	lastFrom, lastTo *config.Override

	wants   map[wantKey]*want
	objects map[[2]*config.Override]json.RawMessage // by base and override
	byBytes map[string]json.RawMessage              // by contents
	// fresh lists the settings objects of the wants this builder made, in
	// the order first needed; made, when set, is told of each then. told
	// holds them by address.
	fresh []json.RawMessage
	made  func(json.RawMessage)
	told  map[*byte]bool
}

type wantKey struct {
	srv *serverInput
	o   *config.Override
}

func newBuilder() *builder {
	return &builder{
		servers:   make(map[string]*serverInput),
		moved:     make(map[string]bool),
		overrides: make(map[string]*config.Override),
		remap:     make(map[*config.Override]*config.Override),
		wants:     make(map[wantKey]*want),
		objects:   make(map[[2]*config.Override]json.RawMessage),
		byBytes:   make(map[string]json.RawMessage),
		told:      make(map[*byte]bool),
	}
}

// server returns the input of srv, prev when srv still gives the same.
func (b *builder) server(prev *serverInput, srv *config.Server) (in *serverInput, same bool) {
	spec := SpecOf(srv)
	identity := spec.Fingerprint()
	if prev != nil && prev.same(srv, identity) {
		return prev, true
	}
	return &serverInput{
		spec:     spec,
		identity: identity,
		base:     b.intern(config.Override{Settings: srv.Settings}),
		disabled: srv.Disabled,
	}, false
}

// session returns the input of sess and what changed since prev (nil: a
// session new to the reconciler) in the desired wants of a session whose
// runtime overlays are overlays. prev is brought in line in place when only
// override values changed; otherwise a new input is built.
func (b *builder) session(prev *sessionInput, sess *config.Session, overlays map[string]*want) (*sessionInput, delta) {
	if prev == nil || !sameList(prev.servers, sess.Servers) || prev.overrides != len(sess.Overrides) {
		return b.rebuild(sess), delta{rebuilt: true}
	}
	var d delta
	for server, o := range sess.Overrides {
		c := prev.cells[server]
		if c == nil || c.o == nil {
			// Another server is overridden: the counts matched, so one
			// that was is no longer.
			return b.rebuild(sess), delta{rebuilt: true}
		}
		from := c.o
		switch {
		case from == b.lastFrom && sameOverride(b.lastTo, o):
			// As the last override replaced: sessions moving a batch of
			// servers to new words cost one comparison each.
			c.o = b.lastTo
		case sameOverride(from, o):
			continue
		default:
			c.o = b.replace(from, o)
		}
		c.w = nil
		if len(b.changed) > 0 && b.moved[server] {
			continue // below
		}
		if !c.listed || c.srv == nil {
			continue // not used before or after
		}
		if len(overlays) > 0 {
			if _, ok := overlays[server]; ok {
				continue // the overlay's want is desired, and did not change
			}
		}
		wasOff, isOff := c.off(from), c.off(c.o)
		switch {
		case wasOff && isOff:
			// Disabled before and after.
		case wasOff != isOff:
			d.servers = append(d.servers, server)
		default:
			b.pair(&d, c.srv.base, from, c.o)
		}
	}
	for _, server := range b.changed {
		c := prev.cells[server]
		srv := b.servers[server]
		if c == nil {
			if srv == nil {
				continue
			}
			c = &cell{}
			prev.cells[server] = c
		}
		c.srv, c.w = srv, nil
		c.listed = srv != nil && sess.Uses(server)
		if srv == nil && c.o == nil {
			delete(prev.cells, server)
		}
		d.servers = append(d.servers, server)
	}
	return prev, d
}

// pair counts in d a want of a server with base settings base whose
// override moved from from to to, the server being used before and after.
func (b *builder) pair(d *delta, base, from, to *config.Override) {
	for i := len(d.pairs) - 1; i >= 0; i-- {
		if p := &d.pairs[i]; p.base == base && p.from == from && p.to == to {
			p.n++
			return
		}
	}
	d.pairs = append(d.pairs, pair{
		base: base, from: from, to: to, n: 1,
		old: b.oldObject(base, from), new: b.object(base, to),
	})
}

// rebuild returns a new input for sess.
func (b *builder) rebuild(sess *config.Session) *sessionInput {
	si := &sessionInput{
		servers:   slices.Clone(sess.Servers), // keeps nil apart from empty
		cells:     make(map[string]*cell, len(b.servers)),
		overrides: len(sess.Overrides),
	}
	cells := make([]cell, len(b.servers))
	i := 0
	for server, srv := range b.servers {
		c := &cells[i]
		i++
		c.srv, c.listed = srv, sess.Uses(server)
		si.cells[server] = c
	}
	for server, o := range sess.Overrides {
		c := si.cells[server]
		if c == nil {
			c = &cell{}
			si.cells[server] = c
		}
		c.o = b.intern(o)
	}
	for _, c := range si.cells {
		c.w = b.want(c)
	}
	return si
}

// replace returns the private copy of o, which replaces old: the copy that
// last replaced old, if o has its words, else o's own (see intern).
func (b *builder) replace(old *config.Override, o config.Override) *config.Override {
	c := b.remap[old]
	if c == nil || !sameOverride(c, o) {
		c = b.intern(o)
		b.remap[old] = c
	}
	b.lastFrom, b.lastTo = old, c
	return c
}

// intern returns the private copy of o.
func (b *builder) intern(o config.Override) *config.Override {
	b.scratch = encode(b.scratch[:0], o)
	if c, ok := b.overrides[string(b.scratch)]; ok {
		return c
	}
	s := o.Settings
	buf := make([]byte, 0, len(s.Trust)+len(s.AlwaysLoadTools)+len(s.IncludeTools)+len(s.ExcludeTools))
	keep := func(v json.RawMessage) json.RawMessage {
		if v == nil {
			return nil
		}
		start := len(buf)
		buf = append(buf, v...)
		return buf[start:len(buf):len(buf)]
	}
	c := &config.Override{Settings: config.Settings{
		Trust:           keep(s.Trust),
		AlwaysLoadTools: keep(s.AlwaysLoadTools),
		IncludeTools:    keep(s.IncludeTools),
		ExcludeTools:    keep(s.ExcludeTools),
	}}
	if s.Extra != nil {
		c.Settings.Extra = make(map[string]json.RawMessage, len(s.Extra))
		for k, v := range s.Extra {
			c.Settings.Extra[k] = bytes.Clone(v)
		}
	}
	if o.Disabled != nil {
		d := *o.Disabled
		c.Disabled = &d
	}
	b.overrides[string(b.scratch)] = c
	return c
}

// encode appends to buf an encoding of o that two overrides share exactly
// when they are equal (as sameOverride compares them): each value
// length-prefixed, an absent one apart from an empty one.
func encode(buf []byte, o config.Override) []byte {
	switch {
	case o.Disabled == nil:
		buf = append(buf, 0)
	case *o.Disabled:
		buf = append(buf, 1)
	default:
		buf = append(buf, 2)
	}
	for _, v := range [...]json.RawMessage{o.Settings.Trust, o.Settings.AlwaysLoadTools, o.Settings.IncludeTools, o.Settings.ExcludeTools} {
		if v == nil {
			buf = append(buf, 0)
			continue
		}
		buf = binary.AppendUvarint(buf, uint64(len(v))+1)
		buf = append(buf, v...)
	}
	// The plugin's own keys, sorted, each length-prefixed with its value.
	buf = binary.AppendUvarint(buf, uint64(len(o.Settings.Extra)))
	for _, k := range slices.Sorted(maps.Keys(o.Settings.Extra)) {
		v := o.Settings.Extra[k]
		buf = binary.AppendUvarint(buf, uint64(len(k)))
		buf = append(buf, k...)
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		buf = append(buf, v...)
	}
	return buf
}

// want returns the want c gives: nil when the session does not use the
// server or the server is disabled for it, else the shared want of (c.srv,
// c.o).
func (b *builder) want(c *cell) *want {
	if c.srv == nil || !c.listed {
		return nil
	}
	k := wantKey{c.srv, c.o}
	if w, ok := b.wants[k]; ok {
		return w
	}
	var w *want
	if c.wants() {
		w = &want{spec: &c.srv.spec, identity: c.srv.identity, settings: b.object(c.srv.base, c.o)}
	}
	b.wants[k] = w
	return w
}

// object returns the shared settings object of a server with base settings
// base under override o (nil: none), for a want this reload builds.
func (b *builder) object(base, o *config.Override) json.RawMessage {
	obj := b.oldObject(base, o)
	if at := &obj[0]; !b.told[at] {
		b.told[at] = true
		b.fresh = append(b.fresh, obj)
		if b.made != nil {
			b.made(obj)
		}
	}
	return obj
}

// oldObject is object for the settings a want had before this reload,
// which the reload does not announce (see fresh): their keys are known
// when they were answered, and settings the policy failed on would only
// fail again, at the cost of a trap or of the plugin's timeout.
func (b *builder) oldObject(base, o *config.Override) json.RawMessage {
	k := [2]*config.Override{base, o}
	if obj, ok := b.objects[k]; ok {
		return obj
	}
	obj := layer(base, o).JSON()
	if c, ok := b.byBytes[string(obj)]; ok {
		obj = c
	} else {
		b.byBytes[string(obj)] = obj
	}
	b.objects[k] = obj
	return obj
}
