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

	"github.com/wasmhost/wasmhost/view"
)

// A ProjectedTool is one tool a session sees, as a golden case states it:
// its name and its two session flags.
type ProjectedTool struct {
	Name       string `json:"name"`
	Trust      bool   `json:"trust"`
	AlwaysLoad bool   `json:"alwaysLoad"`
}

// A Projected is the golden form of a projection: the visible tools with
// their flags, the visible prompt names and the visible resource URIs, each
// in snapshot order. It is the shape of a project case's "project" value and
// of `wasmhost project` output.
type Projected struct {
	Tools     []ProjectedTool `json:"tools"`
	Prompts   []string        `json:"prompts"`
	Resources []string        `json:"resources"`
}

// normalized returns p with empty lists instead of nil ones, so that a key
// left out of a golden case and an empty list compare (and print) alike.
func (p Projected) normalized() Projected {
	if p.Tools == nil {
		p.Tools = []ProjectedTool{}
	}
	if p.Prompts == nil {
		p.Prompts = []string{}
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
// does not carry both session flags as booleans in its _meta.
func Summarize(p *view.Projection) (Projected, error) {
	out := Projected{
		Tools:     make([]ProjectedTool, 0, len(p.Tools)),
		Prompts:   make([]string, 0, len(p.Prompts)),
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
		out.Tools = append(out.Tools, ProjectedTool{Name: t.Name, Trust: trust, AlwaysLoad: always})
	}
	for i, pr := range p.Prompts {
		if pr == nil {
			return Projected{}, fmt.Errorf("projected prompts[%d] is nil", i)
		}
		out.Prompts = append(out.Prompts, pr.Name)
	}
	for i, r := range p.Resources {
		if r == nil {
			return Projected{}, fmt.Errorf("projected resources[%d] is nil", i)
		}
		out.Resources = append(out.Resources, r.URI)
	}
	return out, nil
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
// [...], "resources": [...]} with each list optional, into a view.Snapshot.
// It is strict about the shape the golden format fixes: an unknown or
// duplicated top-level key, a list that is not an array, an item that is not
// an object, a tool or prompt without a string "name" or a resource without
// a string "uri" is an error naming the JSON path. Other MCP fields of an
// item are decoded as the MCP SDK decodes them; a value of the wrong type
// for one is an error naming its exact JSON path too (tools[0].icons[1].sizes).
func DecodeSnapshot(raw []byte) (*view.Snapshot, error) {
	fields, err := readObject(raw)
	if err != nil {
		return nil, err
	}
	snap := &view.Snapshot{}
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
		case "prompts", "resources":
			names, err := decodeStrings(f.value)
			if err != nil {
				return Projected{}, fmt.Errorf("%s%w", f.key, err)
			}
			if f.key == "prompts" {
				p.Prompts = names
			} else {
				p.Resources = names
			}
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
		default:
			err = fmt.Errorf("unknown key (want name, trust, alwaysLoad)")
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
