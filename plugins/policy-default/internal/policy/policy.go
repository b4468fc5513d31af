// Package policy holds the logic of the default wasmhost policy plugin,
// free of any Extism or WebAssembly dependency so that it builds and is
// tested natively as well as inside the wasip1 plugin.
//
// It reads ABI v1 requests and writes ABI v1 responses (see package
// github.com/wasmhost/wasmhost/abi) as bytes, with a JSON scanner and
// encoder of its own. Settings in the form the host sends are read by one
// function (fast.go), anything else by the general scanner; strings are
// handled eight bytes at a time (words.go); projection looks names up in a
// hash set. Only strings that hold escapes or non-ASCII bytes go to
// encoding/json, so what it decodes and encodes is exactly what
// encoding/json would give.
//
// The rules are those of the native reference (package metakey), written
// independently; the metadata key is the compact canonical JSON. It
// imports the standard library only and touches nothing but the bytes it
// is given. Why it reads JSON by hand: docs/design.md.
package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// MaxKeyBytes is the longest metadata key, abi.MaxKeyBytes: settings whose
// canonical JSON is longer are refused.
const MaxKeyBytes = 64 << 10

// A Canonical is the canonical form of one settings object.
type Canonical struct {
	// Trust is nil for a missing or null trust setting.
	Trust *bool
	// AlwaysLoadTools is true only when the setting is true.
	AlwaysLoadTools bool
	// IncludeTools is nil when every tool is allowed (missing or null);
	// a non-nil empty list allows none. Sorted, no duplicates, each entry
	// cut at its first '('.
	IncludeTools []string
	// ExcludeTools is never nil. Sorted, no duplicates, exact names.
	ExcludeTools []string
}

// ParseSettings decodes one raw settings object and returns its canonical
// form. It refuses raw when it is not one well-formed JSON value, not an
// object, holds an ill-typed value for one of the four settings, or repeats
// a key; the first problem in document order is reported, with the JSON
// path inside the object (`includeTools[1]: expected a string, got a
// number`). Keys other than the four settings are ignored, but may not be
// repeated either. The messages are those of metakey.ParseSettings.
func ParseSettings(raw []byte) (Canonical, error) {
	var p parser
	p.buf = raw
	c, refused, err := p.settings()
	if err == nil {
		err = p.end()
	}
	if err != nil {
		return Canonical{}, invalidJSON(raw, err)
	}
	if refused != nil {
		return Canonical{}, refused
	}
	out := Canonical{
		AlwaysLoadTools: c.always,
		ExcludeTools:    append([]string{}, c.exclude...),
	}
	if c.trust != trustNull {
		v := c.trust == trustTrue
		out.Trust = &v
	}
	if c.hasInclude {
		out.IncludeTools = append([]string{}, c.include...)
	}
	return out, nil
}

// invalidJSON words the refusal of a settings object that is not valid
// JSON. encoding/json has the last word on the offset and the wording; err,
// the scanner's own finding, is kept for the unlikely case that
// encoding/json accepts the input.
func invalidJSON(raw []byte, err error) error {
	var v json.RawMessage
	jerr := json.Unmarshal(raw, &v)
	var se *json.SyntaxError
	switch {
	case errors.As(jerr, &se):
		return fmt.Errorf("invalid JSON at byte offset %d: %w", se.Offset, se)
	case jerr != nil:
		return fmt.Errorf("invalid JSON: %w", jerr)
	}
	return fmt.Errorf("invalid JSON: %w", err)
}

// Key returns the opaque metadata key of c: its compact canonical JSON.
func (c Canonical) Key() string { return string(c.AppendJSON(nil)) }

// AppendJSON appends the compact canonical JSON of c to dst, with the keys
// in the order trust, alwaysLoadTools, includeTools, excludeTools and the
// strings encoded exactly as encoding/json.Marshal encodes them.
func (c Canonical) AppendJSON(dst []byte) []byte {
	w := c.canon()
	return w.appendJSON(dst)
}

// Visible reports whether a tool or prompt called name is shown to a
// session with these settings: a non-empty name, allowed by IncludeTools
// and not hidden by ExcludeTools. It applies the rule Project applies.
func (c Canonical) Visible(name string) bool {
	w := c.canon()
	v := newVisibility(&w)
	return v.visible(name)
}

// canon returns c in its working form.
func (c Canonical) canon() canon {
	w := canon{trust: trustNull, always: c.AlwaysLoadTools, include: c.IncludeTools,
		hasInclude: c.IncludeTools != nil, exclude: c.ExcludeTools}
	if c.Trust != nil {
		w.trust = trustFalse
		if *c.Trust {
			w.trust = trustTrue
		}
	}
	return w
}

// The three values of a canonical trust setting.
const (
	trustNull int8 = iota
	trustFalse
	trustTrue
)

// A canon is the working form of a Canonical inside one call: its lists may
// share memory with the parser's scratch space and with the request.
type canon struct {
	trust      int8
	always     bool
	hasInclude bool
	include    []string
	exclude    []string
	// safe is true when every string in the lists is known to be safe (see
	// safeByte), so that the encoder need not check them again.
	safe bool
}

// A visibility applies the rule of Project to the names of a snapshot for
// one settings object: a name is visible when it is not empty, allowed by
// the include list (when there is one) and not in the exclude list.
type visibility struct {
	hasInclude       bool
	include, exclude stringSet
}

func newVisibility(c *canon) visibility {
	return visibility{hasInclude: c.hasInclude, include: newStringSet(c.include), exclude: newStringSet(c.exclude)}
}

func (v *visibility) visible(name string) bool {
	return name != "" && (!v.hasInclude || v.include.has(name)) && !v.exclude.has(name)
}

// A parser reads settings objects. Its scratch lists are reused from one
// settings object to the next, so a canon it returns is only valid until
// the next call.
type parser struct {
	scanner
	include, exclude []string
	others           []string            // keys other than the four, in order
	otherSet         map[string]struct{} // the same, once there are many
	// safe is true while every list entry of the current settings object
	// is safe (see safeByte) as it stands.
	safe bool
	// general turns the fast path off, for tests that compare the two.
	general bool
	// unsorted leaves the lists of a canon in document order, with
	// duplicates: enough for projecting, which needs no canonical form.
	unsorted bool
}

// Bits recording which of the four settings keys an object has used.
const (
	seenTrust = 1 << iota
	seenAlwaysLoad
	seenInclude
	seenExclude
)

// manyKeys is the number of other keys beyond which duplicates are found
// with a map instead of a linear search.
const manyKeys = 16

// settings reads the settings value at the current position and returns its
// canonical form. A malformed document is err. A well-formed value that
// cannot be accepted is refused, with the first problem in document order;
// scanning goes on to the end of the value even then, so malformed JSON
// further on still wins over a refusal.
func (p *parser) settings() (c canon, refused, err error) {
	if !p.general {
		if c, ok := p.fast(); ok {
			return c, nil, nil
		}
	}
	if first := p.peek(); first != '{' {
		kind := kindOf(first)
		if kind == "" {
			return c, nil, p.unexpected("a value")
		}
		if err := p.skipValue(0); err != nil {
			return c, nil, err
		}
		return c, errors.New("expected an object, got " + kind), nil
	}
	p.pos++
	p.include, p.exclude, p.others = p.include[:0], p.exclude[:0], p.others[:0]
	clear(p.otherSet)
	p.safe = true
	var seen uint8
	more := true
	if p.peek() == '}' {
		p.pos++
		more = false
	}
	for more {
		start, end, plain, _, err := p.rawString()
		if err != nil {
			return c, nil, err
		}
		if err := p.consume(':', "':'"); err != nil {
			return c, nil, err
		}
		var (
			bit  uint8
			name string // the key, for messages
		)
		if plain {
			bit, name = settingKey(p.buf[start+1 : end-1])
			if bit == 0 {
				name, _ = p.value(start, end, true)
			}
		} else {
			if name, err = p.value(start, end, false); err != nil {
				return c, nil, err
			}
			bit, _ = settingKey([]byte(name))
		}
		var r error
		if bit == 0 {
			if p.repeated(name) && refused == nil {
				refused = fmt.Errorf("duplicate key %s", strconv.Quote(name))
			}
			err = p.skipValue(1)
		} else {
			if seen&bit != 0 && refused == nil {
				refused = fmt.Errorf("duplicate key %s", strconv.Quote(name))
			}
			seen |= bit
			switch bit {
			case seenTrust:
				c.trust, r, err = p.optBool(name)
			case seenAlwaysLoad:
				var v int8
				v, r, err = p.optBool(name)
				c.always = v == trustTrue
			case seenInclude:
				p.include, c.hasInclude, r, err = p.strings(name, p.include[:0])
			case seenExclude:
				p.exclude, _, r, err = p.strings(name, p.exclude[:0])
			}
		}
		if err != nil {
			return c, nil, err
		}
		if r != nil && refused == nil {
			refused = r
		}
		if more, err = p.next('}'); err != nil {
			return c, nil, err
		}
	}
	if refused != nil {
		return canon{}, refused, nil
	}
	p.finish(&c, p.include, p.exclude, true, p.safe)
	return c, nil, nil
}

// The four settings key names as words (see le64): "trust", and the first
// eight and the remaining bytes of the others.
var (
	wordTrust              = short("trust")
	wordInclude, wordTools = le64("includeT", 0), short("ools")
	wordExclude            = le64("excludeT", 0)
	wordAlways, wordLoad   = le64("alwaysLo", 0), short("adTools")
)

// settingKey tells which of the four settings key names, if any, and
// returns the setting's name as a constant string.
func settingKey(key []byte) (uint8, string) {
	switch len(key) {
	case 5:
		if short(key) == wordTrust {
			return seenTrust, "trust"
		}
	case 12:
		if tail(key, 8) == wordTools {
			switch le64(key, 0) {
			case wordInclude:
				return seenInclude, "includeTools"
			case wordExclude:
				return seenExclude, "excludeTools"
			}
		}
	case 15:
		if le64(key, 0) == wordAlways && tail(key, 8) == wordLoad {
			return seenAlwaysLoad, "alwaysLoadTools"
		}
	}
	return 0, ""
}

// repeated records key as seen in the current object and reports whether
// it had been seen before.
func (p *parser) repeated(key string) bool {
	if p.otherSet == nil && len(p.others) < manyKeys {
		for _, k := range p.others {
			if equal(k, key) {
				return true
			}
		}
		p.others = append(p.others, key)
		return false
	}
	if p.otherSet == nil {
		p.otherSet = make(map[string]struct{})
	}
	if len(p.otherSet) == 0 {
		for _, k := range p.others {
			p.otherSet[k] = struct{}{}
		}
	}
	if _, ok := p.otherSet[key]; ok {
		return true
	}
	p.otherSet[key] = struct{}{}
	return false
}

// finish completes c from the lists read into the parser's scratch space:
// when cut is set each include entry is cut at its first '(' (the fast path
// has done so already), and unless the parser is unsorted both lists are
// sorted and deduplicated.
func (p *parser) finish(c *canon, include, exclude []string, cut, safe bool) {
	if c.hasInclude {
		if cut {
			for i, v := range include {
				if k := indexParen(v); k >= 0 {
					include[i] = v[:k]
				}
			}
		}
		c.include = include
	}
	c.exclude = exclude
	if !p.unsorted {
		c.include = sortUnique(c.include)
		c.exclude = sortUnique(c.exclude)
	}
	c.safe = safe
}

// sortUnique sorts list by bytes and drops duplicates, in place.
func sortUnique(list []string) []string {
	switch {
	case len(list) < 2:
		return list
	case len(list) <= 16:
		// Insertion sort on the first eight bytes of each entry, comparing
		// whole entries only on ties: short lists are the common case, and
		// this makes few calls, which are costly in a WebAssembly guest.
		var words [16]uint64
		for i, v := range list {
			words[i] = prefixWord(v)
		}
		for i := 1; i < len(list); i++ {
			for j := i; j > 0; j-- {
				u, v := words[j], words[j-1]
				if u > v || (u == v && compare(list[j], list[j-1]) >= 0) {
					break
				}
				words[j], words[j-1] = v, u
				list[j], list[j-1] = list[j-1], list[j]
			}
		}
		n := 1
		for i := 1; i < len(list); i++ {
			if words[i] != words[n-1] || !equal(list[i], list[n-1]) {
				list[n], words[n] = list[i], words[i]
				n++
			}
		}
		clear(list[n:])
		return list[:n]
	}
	slices.SortFunc(list, compare)
	n := 1
	for _, v := range list[1:] {
		if !equal(v, list[n-1]) {
			list[n] = v
			n++
		}
	}
	clear(list[n:])
	return list[:n]
}

// optBool reads a boolean-or-null setting called name.
func (p *parser) optBool(name string) (v int8, refused, err error) {
	c := p.peek()
	switch c {
	case 't':
		return trustTrue, nil, p.literal("true")
	case 'f':
		return trustFalse, nil, p.literal("false")
	case 'n':
		return trustNull, nil, p.literal("null")
	}
	kind := kindOf(c)
	if kind == "" {
		return trustNull, nil, p.unexpected("a value")
	}
	if err := p.skipValue(1); err != nil {
		return trustNull, nil, err
	}
	return trustNull, errors.New(name + ": expected a boolean or null, got " + kind), nil
}

// strings reads an array-of-strings-or-null setting called name, appending
// the strings to list. present is false for null (and for a refusal).
func (p *parser) strings(name string, list []string) (_ []string, present bool, refused, err error) {
	switch c := p.peek(); c {
	case 'n':
		return list, false, nil, p.literal("null")
	case '[':
		p.pos++
	default:
		kind := kindOf(c)
		if kind == "" {
			return list, false, nil, p.unexpected("a value")
		}
		if err := p.skipValue(1); err != nil {
			return list, false, nil, err
		}
		return list, false, errors.New(name + ": expected an array of strings or null, got " + kind), nil
	}
	if p.peek() == ']' {
		p.pos++
		return list, true, nil, nil
	}
	for i := 0; ; i++ {
		if c := p.peek(); c == '"' {
			v, safe, err := p.str()
			if err != nil {
				return list, false, nil, err
			}
			p.safe = p.safe && safe
			list = append(list, v)
		} else {
			kind := kindOf(c)
			if kind == "" {
				return list, false, nil, p.unexpected("a value")
			}
			if refused == nil {
				refused = fmt.Errorf("%s[%d]: expected a string, got %s", name, i, kind)
			}
			if err := p.skipValue(2); err != nil {
				return list, false, nil, err
			}
		}
		more, err := p.next(']')
		if err != nil {
			return list, false, nil, err
		}
		if !more {
			return list, refused == nil, refused, nil
		}
	}
}

// Canonicalize answers one canonicalize request (an abi.CanonicalizeRequest
// as JSON) with the JSON of an abi.CanonicalizeResponse: for each settings
// object, in order, its canonical JSON, or the reason it is refused (a
// settings object whose canonical JSON would be longer than MaxKeyBytes is
// refused too). The results carry no key: the key is the canonical JSON
// itself, which the plugin's handshake declares with canonicalKeys
// (abi/SPEC.md section 4), so the host takes it from there and the answer
// is half as long. Members of the request other than "settings" are
// ignored. It returns an error only when the request as a whole is
// malformed.
func Canonicalize(req []byte) ([]byte, error) {
	return AppendCanonicalize(nil, req)
}

// AppendCanonicalize is Canonicalize appending its answer to dst, which it
// grows once, up front, when it has less room than an answer for req may
// need. A caller that passes the buffer of its last answer back (out[:0])
// allocates nothing more once that buffer has grown to its requests: the
// plugin's direct export does, so that a call leaves no garbage for a Go
// WebAssembly guest's costly collector (TestDirectCanonicalizeNoGarbage in
// package main, TestDefaultDirectCanonicalizeMakesNoGarbage in host). On
// error the answer is dst cut back to its length on entry, in the grown
// buffer.
func AppendCanonicalize(dst, req []byte) ([]byte, error) {
	var p parser
	p.buf, p.alias = req, true
	// Scratch lists on the stack: settings objects of up to 16 entries per
	// list and 16 other keys need no allocation.
	var include, exclude, others [manyKeys]string
	p.include, p.exclude, p.others = include[:0], exclude[:0], others[:0]
	dst0 := len(dst)
	out := slices.Grow(dst, canonicalizeRoom(len(req)))
	out = append(out, `{"results":[`...)
	base := len(out)
	err := p.object(func(key string) error {
		if key != "settings" {
			return p.skipValue(1)
		}
		out = out[:base] // a repeated member replaces the earlier one
		_, err := p.array(func(i int) error {
			if i > 0 {
				out = append(out, ',')
			}
			c, refused, err := p.settings()
			if err != nil {
				return fmt.Errorf("settings[%d]: %w", i, err)
			}
			if refused == nil {
				out, refused = appendResult(out, &c)
			}
			if refused != nil {
				out = append(out, `{"error":`...)
				out = appendString(out, refused.Error())
				out = append(out, '}')
			}
			return nil
		})
		return err
	})
	if err == nil {
		err = p.end()
	}
	if err != nil {
		return out[:dst0], fmt.Errorf("canonicalize request: %w", err)
	}
	return append(out, "]}"...), nil
}

// canonicalizeRoom is the room Canonicalize reserves up front for the
// answer to a request of n bytes: enough when the settings objects are of
// the usual size (a canonical form is about as long as its object); an
// answer for many tiny ones (`{}` gives some 90 bytes) grows the buffer as
// it goes.
func canonicalizeRoom(n int) int { return 1024 + 2*n }

// appendResult appends the canonical result for c to out (its canonical
// JSON, which is also its key), or leaves out as it was and refuses c when
// that would be too long for a key.
func appendResult(out []byte, c *canon) ([]byte, error) {
	mark := len(out)
	out = append(out, `{"canonical":`...)
	start := len(out)
	out = c.appendJSON(out)
	if n := len(out) - start; n > MaxKeyBytes {
		return out[:mark], fmt.Errorf("canonical form is %d bytes, more than the %d bytes a key may hold", n, MaxKeyBytes)
	}
	return append(out, '}'), nil
}

// Project answers one project request (an abi.ProjectRequest as JSON) with
// the JSON of an abi.ProjectResponse: the visible tools with their trust and
// alwaysLoad flags, the visible prompts and every resource, by index in
// snapshot order. Refused settings and malformed requests are errors.
// ToolAnnotations and unknown members are ignored.
func Project(req []byte) ([]byte, error) {
	var (
		p         parser
		c         canon
		refused   error
		have      bool
		tools     []string
		prompts   []string
		resources int
	)
	p.buf, p.alias, p.unsorted = req, true, true
	err := p.object(func(key string) error {
		var err error
		switch key {
		case "settings":
			have = true
			c, refused, err = p.settings()
			if err != nil {
				err = fmt.Errorf("settings: %w", err)
			}
		case "tools":
			tools, err = p.names(key, tools[:0])
		case "prompts":
			prompts, err = p.names(key, prompts[:0])
		case "resources":
			resources, err = p.count(key)
		default:
			err = p.skipValue(1)
		}
		return err
	})
	if err == nil {
		err = p.end()
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("project request: %w", err)
	case !have:
		return nil, errors.New("project request: settings: missing")
	case refused != nil:
		return nil, refusal(refused)
	}

	flags := `,"trust":false,"alwaysLoad":false}`
	switch {
	case c.trust == trustTrue && c.always:
		flags = `,"trust":true,"alwaysLoad":true}`
	case c.trust == trustTrue:
		flags = `,"trust":true,"alwaysLoad":false}`
	case c.always:
		flags = `,"trust":false,"alwaysLoad":true}`
	}
	out := make([]byte, 0, 64+(len(`{"i":,}`)+len(flags)+6)*len(tools)+8*(len(prompts)+resources))
	out = append(out, `{"tools":[`...)
	sep := false
	vis := newVisibility(&c)
	for i, name := range tools {
		if !vis.visible(name) {
			continue
		}
		if sep {
			out = append(out, ',')
		}
		sep = true
		out = append(out, `{"i":`...)
		out = appendIndex(out, i)
		out = append(out, flags...)
	}
	out = append(out, `],"prompts":[`...)
	sep = false
	for i, name := range prompts {
		if !vis.visible(name) {
			continue
		}
		if sep {
			out = append(out, ',')
		}
		sep = true
		out = appendIndex(out, i)
	}
	out = append(out, `],"resources":[`...)
	for i := range resources {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendIndex(out, i)
	}
	return append(out, "]}"...), nil
}

// refusal is Project's error for settings refused because of err;
// ProjectBatch answers an item with its message.
func refusal(err error) error {
	return fmt.Errorf("project: settings refused: %w", err)
}

// names reads the request list called list, an array of strings or null
// for none, appending the strings to dst. A null element stands for "", as
// encoding/json decodes it into a string.
func (p *parser) names(list string, dst []string) ([]string, error) {
	if p.peek() == '[' {
		if dst, _, ok := p.fastNames(dst, true); ok {
			return dst, nil
		}
	}
	_, err := p.array(func(i int) error {
		switch c := p.peek(); c {
		case '"':
			v, _, err := p.str()
			dst = append(dst, v)
			return err
		case 'n':
			dst = append(dst, "")
			return p.literal("null")
		default:
			return p.notString(list, i, c)
		}
	})
	return dst, err
}

// count checks the request list called list like names but only counts
// its elements.
func (p *parser) count(list string) (int, error) {
	if p.peek() == '[' {
		if _, n, ok := p.fastNames(nil, false); ok {
			return n, nil
		}
	}
	n := 0
	_, err := p.array(func(i int) error {
		n++
		switch c := p.peek(); c {
		case '"':
			return p.skipString()
		case 'n':
			return p.literal("null")
		default:
			return p.notString(list, i, c)
		}
	})
	return n, err
}

// notString reports element i of the request list called list, starting
// with c, that is not a string.
func (p *parser) notString(list string, i int, c byte) error {
	kind := kindOf(c)
	if kind == "" {
		return p.unexpected("a value")
	}
	return p.errorf("%s[%d]: expected a string, got %s", list, i, kind)
}
