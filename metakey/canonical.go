package metakey

import (
	"encoding/json"
	"slices"
	"strings"
)

// A Canonical is the canonical form of a [Settings]: settings with the same
// effect on every session have equal canonical forms, and the metadata key is
// its JSON encoding. Build one with [Settings.Canonical]; the methods assume
// the lists are sorted by bytes and free of duplicates, as Canonical returns
// them.
type Canonical struct {
	// Trust is nil for null (missing or null), else the boolean given.
	Trust *bool
	// AlwaysLoadTools is true only when the setting was given as true.
	AlwaysLoadTools bool
	// IncludeTools is nil for null (every name allowed); a non-nil empty
	// list allows no name. Entries are cut at their first "(".
	IncludeTools []string
	// ExcludeTools lists the hidden names; it is never nil. Entries are
	// exact names and are never cut.
	ExcludeTools []string
}

// Canonical returns the canonical form of s, by the rules of the policy
// semantics:
//
//   - trust keeps three distinct values: null (missing or null), false, true.
//   - alwaysLoadTools is true only when it was given as true.
//   - includeTools is null when missing or null, which allows every name;
//     otherwise each entry is cut at its first "(", and the list is
//     deduplicated and sorted by bytes. An empty list stays empty and allows
//     no name.
//   - excludeTools is always a list: missing, null and [] are all []. It is
//     deduplicated and sorted by bytes; entries are exact names and are never
//     cut.
//
// It does not modify s: the lists of the result are new slices (their
// strings may share memory with s).
func (s Settings) Canonical() Canonical {
	return s.canonical(true)
}

// canonical computes the canonical form of s. With fresh set, the lists are
// copied first; without it they are cut, sorted and compacted in place, which
// is only right when s is not used afterwards.
func (s Settings) canonical(fresh bool) Canonical {
	var c Canonical
	if s.Trust.Presence == Present {
		v := s.Trust.Value
		c.Trust = &v
	}
	c.AlwaysLoadTools = s.AlwaysLoadTools.Presence == Present && s.AlwaysLoadTools.Value
	if s.IncludeTools.Presence == Present {
		list := s.IncludeTools.Values
		if fresh || list == nil {
			list = make([]string, len(list))
		}
		for i, name := range s.IncludeTools.Values {
			if j := strings.IndexByte(name, '('); j >= 0 {
				name = name[:j]
			}
			list[i] = name
		}
		c.IncludeTools = sortedSet(list)
	}
	if s.ExcludeTools.Presence == Present && len(s.ExcludeTools.Values) > 0 {
		list := s.ExcludeTools.Values
		if fresh {
			list = slices.Clone(list)
		}
		c.ExcludeTools = sortedSet(list)
	} else {
		c.ExcludeTools = []string{}
	}
	return c
}

// sortedSet sorts list by bytes and drops repeated entries, in place.
func sortedSet(list []string) []string {
	if len(list) > 1 {
		slices.Sort(list)
		list = slices.Compact(list)
	}
	return list
}

// MarshalJSON returns the compact JSON of c, which is also its metadata key:
// the keys in the order trust, alwaysLoadTools, includeTools, excludeTools,
// no white space, and each string encoded exactly as encoding/json.Marshal
// encodes it. A nil ExcludeTools is written as []. It never fails.
func (c Canonical) MarshalJSON() ([]byte, error) {
	return c.appendJSON(make([]byte, 0, c.sizeHint())), nil
}

// Key returns the metadata key of c: the bytes of [Canonical.MarshalJSON]
// as a string. Equal canonical forms give equal keys, and different ones
// different keys. The key of no settings at all is
//
//	{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}
func (c Canonical) Key() string {
	return string(c.appendJSON(make([]byte, 0, c.sizeHint())))
}

// Visible reports whether a tool or prompt called name is shown to a session
// with these settings: name is not empty, IncludeTools is nil or holds name,
// and ExcludeTools does not hold name. Names are compared byte for byte.
func (c Canonical) Visible(name string) bool {
	f := filter{c: c} // without sets: binary searches
	return f.visible(name)
}

// The fixed parts of the canonical JSON.
const (
	jsonTrust        = `{"trust":`
	jsonAlwaysLoad   = `,"alwaysLoadTools":`
	jsonIncludeTools = `,"includeTools":`
	jsonExcludeTools = `,"excludeTools":`
)

// sizeHint is the length of c's JSON when no string needs escaping.
func (c Canonical) sizeHint() int {
	n := len(jsonTrust) + len("false") + len(jsonAlwaysLoad) + len("false") +
		len(jsonIncludeTools) + len("null") + len(jsonExcludeTools) + len("[]}")
	for _, s := range c.IncludeTools {
		n += len(s) + 3
	}
	for _, s := range c.ExcludeTools {
		n += len(s) + 3
	}
	return n
}

// appendJSON appends the compact canonical JSON of c to buf.
func (c Canonical) appendJSON(buf []byte) []byte {
	buf = append(buf, jsonTrust...)
	switch {
	case c.Trust == nil:
		buf = append(buf, "null"...)
	case *c.Trust:
		buf = append(buf, "true"...)
	default:
		buf = append(buf, "false"...)
	}
	buf = append(buf, jsonAlwaysLoad...)
	if c.AlwaysLoadTools {
		buf = append(buf, "true"...)
	} else {
		buf = append(buf, "false"...)
	}
	buf = append(buf, jsonIncludeTools...)
	if c.IncludeTools == nil {
		buf = append(buf, "null"...)
	} else {
		buf = appendStrings(buf, c.IncludeTools)
	}
	buf = append(buf, jsonExcludeTools...)
	buf = appendStrings(buf, c.ExcludeTools)
	return append(buf, '}')
}

func appendStrings(buf []byte, list []string) []byte {
	buf = append(buf, '[')
	for i, s := range list {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendString(buf, s)
	}
	return append(buf, ']')
}

// appendString appends s as a JSON string, byte for byte as json.Marshal
// writes it. Printable ASCII other than the characters json.Marshal escapes
// is copied; any other string is left to json.Marshal itself.
func appendString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // never fails for a string
			return append(buf, q...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}
