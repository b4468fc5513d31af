package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
)

// Entry returns s as a "mcpServers" entry: a JSON object that Parse reads
// back as s, but for "cwd", which is the resolved directory made absolute.
// Keys at their defaults are left out. The entry holds the server's environment and header values,
// which may be secrets.
func (s *Server) Entry() json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	field := func(key string, v any) {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Quote(key))
		b.WriteByte(':')
		raw, ok := v.(json.RawMessage)
		if !ok {
			raw, _ = json.Marshal(v) // strings, string slices and maps, numbers and booleans
		}
		b.Write(raw)
	}
	str := func(key, v string) {
		if v != "" {
			field(key, v)
		}
	}
	str("command", s.Command)
	if s.Args != nil {
		field("args", s.Args)
	}
	if s.Env != nil {
		field("env", s.Env)
	}
	if s.Cwd != "" {
		// The loader resolved it against the config file's directory,
		// which may be relative to the working directory.
		cwd, err := filepath.Abs(s.Cwd)
		if err != nil {
			cwd = s.Cwd
		}
		field("cwd", cwd)
	}
	str("url", s.URL)
	str("httpUrl", s.HTTPURL)
	if s.Headers != nil {
		field("headers", s.Headers)
	}
	if s.Timeout != 0 {
		field("timeout", s.Timeout.Milliseconds())
	}
	if !s.Pooled {
		field("pooled", false)
	}
	if s.NoBridgeInference {
		field("bridgeInference", false)
	}
	str("protocolVersion", s.ProtocolVersion)
	if s.MaxListingBytes != 0 {
		field("maxListingBytes", s.MaxListingBytes)
	}
	if s.Disabled {
		field("disabled", true)
	}
	str("description", s.Description)
	if s.Prefix != nil {
		field("prefix", *s.Prefix)
	}
	if s.Instructions {
		field("instructions", true)
	}
	for _, f := range []struct {
		key string
		v   json.RawMessage
	}{
		{"trust", s.Settings.Trust},
		{"alwaysLoadTools", s.Settings.AlwaysLoadTools},
		{"includeTools", s.Settings.IncludeTools},
		{"excludeTools", s.Settings.ExcludeTools},
	} {
		if f.v != nil {
			field(f.key, f.v)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Settings.Extra)) {
		field(k, s.Settings.Extra[k])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// ErrPatch is wrapped by MergePatch's errors.
var ErrPatch = errors.New("invalid merge patch")

// MergePatch applies the JSON merge patch patch to the JSON document
// target, as RFC 7386 defines it: a patch that is an object changes the
// target's members key by key (null removes a key, an object is merged
// into the member, anything else replaces it); any other patch replaces the
// target whole. The patch must be valid JSON without duplicate keys; target
// must be valid JSON, or empty for none.
func MergePatch(target, patch []byte) (json.RawMessage, error) {
	if !json.Valid(patch) {
		return nil, ErrPatch
	}
	p, dups, err := parseTree(patch)
	if err != nil {
		return nil, ErrPatch
	}
	if len(dups) > 0 {
		where := ""
		if dups[0].path != "" {
			where = " in " + dups[0].path
		}
		return nil, fmt.Errorf("%w: duplicate key %q%s", ErrPatch, dups[0].key, where)
	}
	var t *node
	if len(bytes.TrimSpace(target)) > 0 {
		if t, _, err = parseTree(target); err != nil {
			return nil, fmt.Errorf("%w: the target is not JSON", ErrPatch)
		}
	}
	var b bytes.Buffer
	mergeNode(&b, target, t, patch, p)
	return b.Bytes(), nil
}

// mergeNode writes target node t (of source tsrc; nil for none) patched
// with node p (of source psrc).
func mergeNode(b *bytes.Buffer, tsrc []byte, t *node, psrc []byte, p *node) {
	if p.kind != kindObject {
		b.Write(psrc[p.off:p.end])
		return
	}
	if t == nil || t.kind != kindObject {
		t, tsrc = &node{kind: kindObject}, nil
	}
	patched := make(map[string]*node, len(p.members))
	for _, m := range p.members {
		patched[m.key] = m.val
	}
	b.WriteByte('{')
	n := 0
	member := func(key string) {
		if n > 0 {
			b.WriteByte(',')
		}
		n++
		k, _ := json.Marshal(key)
		b.Write(k)
		b.WriteByte(':')
	}
	for _, m := range t.members {
		pv, ok := patched[m.key]
		switch {
		case !ok:
			member(m.key)
			b.Write(tsrc[m.val.off:m.val.end])
		case pv.kind != kindNull:
			member(m.key)
			mergeNode(b, tsrc, m.val, psrc, pv)
		}
		delete(patched, m.key)
	}
	for _, m := range p.members {
		if _, ok := patched[m.key]; ok && m.val.kind != kindNull {
			member(m.key)
			mergeNode(b, nil, nil, psrc, m.val)
		}
	}
	b.WriteByte('}')
}
