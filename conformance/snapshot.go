package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
)

// A ProjectedTool is one tool a session sees, as a golden case states it:
// its upstream name and its two session flags, and, for a plugin that
// renames (abi/SPEC.md section 5.3), the name and description it exposes
// the tool under when they differ from the upstream's.
type ProjectedTool struct {
	Name       string `json:"name"`
	Trust      bool   `json:"trust"`
	AlwaysLoad bool   `json:"alwaysLoad"`
	// Rename is the plugin's exposed name, when it is not Name.
	Rename string `json:"rename,omitempty"`
	// Description is the plugin's replacement description, when it is
	// not the snapshot's.
	Description string `json:"description,omitempty"`
}

// A ProjectedPrompt is one prompt a session sees, as a golden case states
// it: its upstream name, and the name and description a plugin that
// renames exposes it under when they differ from the upstream's. In JSON
// it is the name alone, a string, when neither differs, and otherwise an
// object {"name": ..., "rename": ..., "description": ...}.
type ProjectedPrompt struct {
	Name        string
	Rename      string
	Description string
}

// MarshalJSON writes the prompt as its name, or as an object when it is
// renamed or redescribed.
func (p ProjectedPrompt) MarshalJSON() ([]byte, error) {
	if p.Rename == "" && p.Description == "" {
		return json.Marshal(p.Name)
	}
	return json.Marshal(struct {
		Name        string `json:"name"`
		Rename      string `json:"rename,omitempty"`
		Description string `json:"description,omitempty"`
	}{p.Name, p.Rename, p.Description})
}

// UnmarshalJSON reads what MarshalJSON writes, strictly.
func (p *ProjectedPrompt) UnmarshalJSON(b []byte) error {
	pp, err := decodeProjectedPrompt(b)
	if err != nil {
		return err
	}
	*p = pp
	return nil
}

// A Projected is the golden form of a projection: the visible tools with
// their flags, the visible prompts and the visible resource URIs, each
// in snapshot order. It is the shape of a project case's "project" value and
// of `wasmhost project` output.
type Projected struct {
	Tools     []ProjectedTool   `json:"tools"`
	Prompts   []ProjectedPrompt `json:"prompts"`
	Resources []string          `json:"resources"`
}

// normalized returns p with empty lists instead of nil ones, so that a key
// left out of a golden case and an empty list compare (and print) alike.
func (p Projected) normalized() Projected {
	if p.Tools == nil {
		p.Tools = []ProjectedTool{}
	}
	if p.Prompts == nil {
		p.Prompts = []ProjectedPrompt{}
	}
	if p.Resources == nil {
		p.Resources = []string{}
	}
	return p
}

// equal reports whether p and q list the same items in the same order; a
// nil list equals an empty one.
func (p Projected) equal(q Projected) bool {
	return slices.Equal(p.Tools, q.Tools) && slices.Equal(p.Prompts, q.Prompts) && slices.Equal(p.Resources, q.Resources)
}

// String returns p as compact JSON with every list present.
func (p Projected) String() string { return marshalLine(p.normalized()) }

// Summarize reduces a projection to its golden form. It fails when a tool
// does not carry both session flags as booleans in its _meta. A renamed
// item is listed under its upstream name with its Rename; descriptions
// are not compared with anything, so no Description is set: see
// [SummarizeSnapshot].
func Summarize(p *view.Projection) (Projected, error) {
	return SummarizeSnapshot(p, nil)
}

// SummarizeSnapshot is [Summarize] for a projection of snap: an item whose
// description differs from its snapshot item's (the first item of snap
// with its upstream name) gets it as its Description.
func SummarizeSnapshot(p *view.Projection, snap *pool.Snapshot) (Projected, error) {
	out := Projected{
		Tools:     make([]ProjectedTool, 0, len(p.Tools)),
		Prompts:   make([]ProjectedPrompt, 0, len(p.Prompts)),
		Resources: make([]string, 0, len(p.Resources)),
	}
	for i, t := range p.Tools {
		if t == nil {
			return Projected{}, fmt.Errorf("projected tools[%d] is nil", i)
		}
		trust, err := flag(t, view.MetaTrust)
		if err != nil {
			return Projected{}, fmt.Errorf("projected tools[%d] (%q): %w", i, t.Name, err)
		}
		always, err := flag(t, view.MetaAlwaysLoad)
		if err != nil {
			return Projected{}, fmt.Errorf("projected tools[%d] (%q): %w", i, t.Name, err)
		}
		name, rename := upstreamOf(t.Name, t.Meta)
		pt := ProjectedTool{Name: name, Trust: trust, AlwaysLoad: always, Rename: rename}
		if snap != nil {
			if k := slices.IndexFunc(snap.Tools, func(s *mcp.Tool) bool { return s != nil && s.Name == name }); k >= 0 && snap.Tools[k].Description != t.Description {
				pt.Description = t.Description
			}
		}
		out.Tools = append(out.Tools, pt)
	}
	for i, pr := range p.Prompts {
		if pr == nil {
			return Projected{}, fmt.Errorf("projected prompts[%d] is nil", i)
		}
		name, rename := upstreamOf(pr.Name, pr.Meta)
		pp := ProjectedPrompt{Name: name, Rename: rename}
		if snap != nil {
			if k := slices.IndexFunc(snap.Prompts, func(s *mcp.Prompt) bool { return s != nil && s.Name == name }); k >= 0 && snap.Prompts[k].Description != pr.Description {
				pp.Description = pr.Description
			}
		}
		out.Prompts = append(out.Prompts, pp)
	}
	for i, r := range p.Resources {
		if r == nil {
			return Projected{}, fmt.Errorf("projected resources[%d] is nil", i)
		}
		out.Resources = append(out.Resources, r.URI)
	}
	return out, nil
}

// upstreamOf returns the upstream name of a projected item named name and
// the name the plugin renamed it to ("" when it did not).
func upstreamOf(name string, m mcp.Meta) (upstream, rename string) {
	if up, ok := m[view.MetaUpstreamName].(string); ok && up != "" {
		return up, name
	}
	return name, ""
}

func flag(t *mcp.Tool, key string) (bool, error) {
	v, ok := t.Meta[key]
	if !ok {
		return false, fmt.Errorf("_meta lacks the session flag %q", key)
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("_meta[%q] is %T, want a boolean", key, v)
	}
	return b, nil
}

// DecodeSnapshot decodes a golden snapshot, {"tools": [...], "prompts":
// [...], "resources": [...]} with each list optional, into a pool.Snapshot.
// It is strict about the shape the golden format fixes: an unknown or
// duplicated top-level key, a list that is not an array, an item that is not
// an object, a tool or prompt without a string "name" or a resource without
// a string "uri" is an error naming the JSON path. Other MCP fields of an
// item are decoded as the MCP SDK decodes them; a value of the wrong type
// for one is an error naming its exact JSON path too (tools[0].icons[1].sizes).
func DecodeSnapshot(raw []byte) (*pool.Snapshot, error) {
	fields, err := readObject(raw)
	if err != nil {
		return nil, err
	}
	snap := &pool.Snapshot{}
	for _, f := range fields {
		var err error
		switch f.key {
		case "tools":
			snap.Tools, err = decodeItems[mcp.Tool](f.key, f.value, "name")
		case "prompts":
			snap.Prompts, err = decodeItems[mcp.Prompt](f.key, f.value, "name")
		case "resources":
			snap.Resources, err = decodeItems[mcp.Resource](f.key, f.value, "uri")
		default:
			err = fmt.Errorf("unknown key %q (want tools, prompts, resources)", f.key)
		}
		if err != nil {
			return nil, err
		}
	}
	return snap, nil
}

func decodeItems[T any](list string, raw json.RawMessage, required string) ([]*T, error) {
	elems, err := readArray(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", list, err)
	}
	items := make([]*T, 0, len(elems))
	for i, e := range elems {
		fields, err := readObject(e)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", list, i, err)
		}
		v, err := decodeValue(e) // a duplicate key at any depth
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", list, i, err)
		}
		if err := foldCollision(v, ""); err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", list, i, err)
		}
		found := false
		for _, f := range fields {
			if f.key == required {
				if jsonKind(f.value) != "a string" {
					return nil, fmt.Errorf("%s[%d].%s: expected a string, got %s", list, i, required, jsonKind(f.value))
				}
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("%s[%d]: missing %q", list, i, required)
		}
		item := new(T)
		data := integralFields(e, fields)
		if err := json.Unmarshal(data, item); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) && te.Field != "" {
				return nil, fmt.Errorf("%s[%d]%s: expected %s, got a JSON %s", list, i, pathAt(data, te.Offset, te.Field), jsonTypeName(te.Type), te.Value)
			}
			return nil, fmt.Errorf("%s[%d]: %w", list, i, err)
		}
		items = append(items, item)
	}
	return items, nil
}

// pathAt returns the JSON path, as ".icons[1].sizes", of the value in the
// object raw that a type error of encoding/json at offset is about: the
// deepest value that the offset falls in or just after (encoding/json
// reports the offset after a mistyped literal, or one byte later for a
// number too large for an interface value, and just after the opening
// bracket of a mistyped array or object). The error's own Field names Go
// struct fields only, without array indexes, and stops at a free-form
// field such as inputSchema; it is returned, dotted, when raw cannot be
// walked.
func pathAt(raw []byte, offset int64, field string) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // a number may not fit a float64: that may be the error
	if p, ok, err := valueAt(dec, "", 0, offset); err == nil && ok && p != "" {
		return p
	}
	return "." + field
}

// valueAt reads the value at dec's position, which starts after byte begin,
// and reports whether offset falls in it or just after it, with the path
// of the deepest such value inside it (the first in document order).
func valueAt(dec *json.Decoder, path string, begin, offset int64) (string, bool, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", false, err
	}
	found := ""
	switch tok {
	case json.Delim('{'):
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return "", false, err
			}
			k, _ := kt.(string)
			p, ok, err := valueAt(dec, path+memberPath(k), dec.InputOffset(), offset)
			if err != nil {
				return "", false, err
			}
			if ok && found == "" {
				found = p
			}
		}
		_, err = dec.Token() // '}'
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			p, ok, err := valueAt(dec, fmt.Sprintf("%s[%d]", path, i), dec.InputOffset(), offset)
			if err != nil {
				return "", false, err
			}
			if ok && found == "" {
				found = p
			}
		}
		_, err = dec.Token() // ']'
	}
	if err != nil {
		return "", false, err
	}
	if end := dec.InputOffset(); offset <= begin || offset > end+1 {
		return "", false, nil
	}
	if found != "" {
		return found, true, nil
	}
	return path, true, nil
}

// memberPath is the path step to the object member k: ".k" when k is a
// plain identifier, as MCP's field names are, else a quoted ["k"].
func memberPath(k string) string {
	plain := k != ""
	for i, r := range k {
		if !(r == '_' || r == '$' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || i > 0 && '0' <= r && r <= '9') {
			plain = false
			break
		}
	}
	if plain {
		return "." + k
	}
	return "[" + strconv.Quote(k) + "]"
}

// freeForm lists the item fields that the MCP SDK decodes into maps, where
// keys differing only in case are distinct (two schema properties "Path"
// and "path", say).
var freeForm = map[string]bool{"inputSchema": true, "outputSchema": true, "_meta": true}

// foldCollision refuses an object, at path in an item, with two keys that
// differ only in case, except inside the free-form fields. encoding/json
// matches struct fields ignoring case, so {"name": "a", "Name": "b"} would
// be a tool named "b", and the file would mean something else than it
// reads.
func foldCollision(v any, path string) error {
	switch v := v.(type) {
	case map[string]any:
		keys := slices.Sorted(maps.Keys(v))
		for i, k := range keys {
			for _, k2 := range keys[i+1:] {
				if strings.EqualFold(k, k2) {
					return fmt.Errorf("keys %q and %q%s differ only in case (the MCP SDK would read both as one field)", k, k2, at(path))
				}
			}
		}
		for _, k := range keys {
			if path == "" && freeForm[k] {
				continue
			}
			if err := foldCollision(v[k], joinPath(path, k)); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range v {
			if err := foldCollision(e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// at returns " at path", or "" for the top.
func at(path string) string {
	if path == "" {
		return ""
	}
	return " at " + path
}

// decodeProjected strictly decodes a project case's expected projection.
func decodeProjected(raw []byte) (Projected, error) {
	fields, err := readObject(raw)
	if err != nil {
		return Projected{}, err
	}
	var p Projected
	for _, f := range fields {
		switch f.key {
		case "tools":
			elems, err := readArray(f.value)
			if err != nil {
				return Projected{}, fmt.Errorf("tools: %w", err)
			}
			p.Tools = make([]ProjectedTool, 0, len(elems))
			for i, e := range elems {
				t, err := decodeProjectedTool(e)
				if err != nil {
					return Projected{}, fmt.Errorf("tools[%d]: %w", i, err)
				}
				p.Tools = append(p.Tools, t)
			}
		case "prompts":
			elems, err := readArray(f.value)
			if err != nil {
				return Projected{}, fmt.Errorf("prompts: %w", err)
			}
			p.Prompts = make([]ProjectedPrompt, 0, len(elems))
			for i, e := range elems {
				pp, err := decodeProjectedPrompt(e)
				if err != nil {
					return Projected{}, fmt.Errorf("prompts[%d]: %w", i, err)
				}
				p.Prompts = append(p.Prompts, pp)
			}
		case "resources":
			names, err := decodeStrings(f.value)
			if err != nil {
				return Projected{}, fmt.Errorf("%s%w", f.key, err)
			}
			p.Resources = names
		default:
			return Projected{}, fmt.Errorf("unknown key %q (want tools, prompts, resources)", f.key)
		}
	}
	return p, nil
}

func decodeProjectedTool(raw []byte) (ProjectedTool, error) {
	fields, err := readObject(raw)
	if err != nil {
		return ProjectedTool{}, err
	}
	var t ProjectedTool
	have := map[string]bool{}
	for _, f := range fields {
		var err error
		switch f.key {
		case "name":
			err = decodeTyped(f.value, "a string", &t.Name)
		case "trust":
			err = decodeTyped(f.value, "a boolean", &t.Trust)
		case "alwaysLoad":
			err = decodeTyped(f.value, "a boolean", &t.AlwaysLoad)
		case "rename":
			err = decodeNonEmpty(f.value, &t.Rename)
		case "description":
			err = decodeNonEmpty(f.value, &t.Description)
		default:
			err = fmt.Errorf("unknown key (want name, trust, alwaysLoad, and optionally rename, description)")
		}
		if err != nil {
			return ProjectedTool{}, fmt.Errorf("%s: %w", f.key, err)
		}
		have[f.key] = true
	}
	for _, k := range []string{"name", "trust", "alwaysLoad"} {
		if !have[k] {
			return ProjectedTool{}, fmt.Errorf("missing %q", k)
		}
	}
	return t, nil
}

// decodeProjectedPrompt decodes an expected prompt: its name, a string, or
// an object with "name" and one or both of "rename" and "description".
func decodeProjectedPrompt(raw []byte) (ProjectedPrompt, error) {
	var p ProjectedPrompt
	if jsonKind(raw) != "an object" {
		if err := decodeTyped(raw, "a string", &p.Name); err != nil {
			return p, fmt.Errorf("expected a string or an object, got %s", jsonKind(raw))
		}
		return p, nil
	}
	fields, err := readObject(raw)
	if err != nil {
		return p, err
	}
	have := map[string]bool{}
	for _, f := range fields {
		var err error
		switch f.key {
		case "name":
			err = decodeTyped(f.value, "a string", &p.Name)
		case "rename":
			err = decodeNonEmpty(f.value, &p.Rename)
		case "description":
			err = decodeNonEmpty(f.value, &p.Description)
		default:
			err = fmt.Errorf("unknown key (want name, and one or both of rename, description)")
		}
		if err != nil {
			return p, fmt.Errorf("%s: %w", f.key, err)
		}
		have[f.key] = true
	}
	switch {
	case !have["name"]:
		return p, errors.New(`missing "name"`)
	case !have["rename"] && !have["description"]:
		return p, errors.New(`an object needs "rename" or "description" (a prompt shown as it is is its name, a string)`)
	}
	return p, nil
}

// decodeNonEmpty decodes a string that must not be empty: an expected
// rename or description (left out when there is none).
func decodeNonEmpty(raw []byte, s *string) error {
	if err := decodeTyped(raw, "a string", s); err != nil {
		return err
	}
	if *s == "" {
		return errors.New("is empty (leave it out when the item keeps the upstream's)")
	}
	return nil
}

// decodeStrings decodes an array of strings; errors start with the index
// path ("[2]: ...") or ": ..." so the caller can prefix the key.
func decodeStrings(raw []byte) ([]string, error) {
	elems, err := readArray(raw)
	if err != nil {
		return nil, fmt.Errorf(": %w", err)
	}
	out := make([]string, 0, len(elems))
	for i, e := range elems {
		var s string
		if err := decodeTyped(e, "a string", &s); err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func decodeTyped(raw []byte, kind string, v any) error {
	if got := jsonKind(raw); got != kind {
		return fmt.Errorf("expected %s, got %s", kind, got)
	}
	return json.Unmarshal(raw, v)
}

// integralFields returns the object e, whose members are fields, with each
// member that is a number written with a fraction or an exponent but
// integral (1024.0, 1e3) rewritten as an integer, and e itself when there
// is none. JSON Schema counts such numbers as integers, and MCP's integer
// fields (a resource's "size") are Go integers in the go-sdk's types,
// which refuse them.
func integralFields(e json.RawMessage, fields []field) json.RawMessage {
	rewrite := make(map[int]string)
	for j, f := range fields {
		v := bytes.TrimSpace(f.value)
		if len(v) == 0 || !bytes.ContainsAny(v, ".eE") || jsonKind(v) != "a number" {
			continue
		}
		r, ok := new(big.Rat).SetString(string(v))
		if ok && r.IsInt() && r.Num().IsInt64() {
			rewrite[j] = r.Num().String()
		}
	}
	if len(rewrite) == 0 {
		return e
	}
	out := []byte{'{'}
	for j, f := range fields {
		if j > 0 {
			out = append(out, ',')
		}
		key, _ := json.Marshal(f.key)
		out = append(append(out, key...), ':')
		if v, ok := rewrite[j]; ok {
			out = append(out, v...)
		} else {
			out = append(out, f.value...)
		}
	}
	return append(out, '}')
}

// jsonTypeName names the JSON type a Go type decodes from, for messages.
func jsonTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}
