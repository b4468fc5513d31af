package host

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/jsonvalid"
)

// decodeBatchCompact decodes a project_batch output written in the compact
// form (the default plugin's): no white space but at the end, each result
// either {"error":"..."} with a string of printable ASCII whose only
// escapes are \" and \\, or
// a projection whose tools, prompts and resources lists come in that order
// when present, indexes being at most nine digits without a leading zero and
// tool decisions {"i":I} followed by ,"trust":B and ,"alwaysLoad":B when
// present. For that form it gives exactly what decodeStrict gives, without
// reflection, which for a batch of thousands of results is most of the
// host's work. It reports false for any other output, which decodeStrict
// then decodes, or refuses with its own message.
func decodeBatchCompact(out []byte) (*abi.ProjectBatchResponse, bool) {
	results, ok := compactResults(out, compactResult)
	return &abi.ProjectBatchResponse{Results: results}, ok
}

// compactResults decodes {"results":[ITEM,...]} followed by nothing but
// white space, each ITEM read by item from its first byte up to the index
// just past it.
func compactResults[T any](out []byte, item func(out []byte, i int) (T, int, bool)) ([]T, bool) {
	const head = `{"results":[`
	if !bytes.HasPrefix(out, []byte(head)) {
		return nil, false
	}
	i := len(head)
	results := []T{}
	if i < len(out) && out[i] == ']' {
		i++
	} else {
		for {
			r, next, ok := item(out, i)
			if !ok || next >= len(out) {
				return nil, false
			}
			results = append(results, r)
			i = next + 1
			if out[next] == ']' {
				break
			}
			if out[next] != ',' {
				return nil, false
			}
		}
	}
	if i >= len(out) || out[i] != '}' || !blank(out[i+1:]) {
		return nil, false
	}
	return results, true
}

// decodeProjectCompact decodes a project output written in the compact form
// of a project_batch result (see decodeBatchCompact) other than an error,
// giving exactly what decodeStrict gives, or reports false.
func decodeProjectCompact(out []byte) (*abi.ProjectResponse, bool) {
	r, next, ok := compactResult(out, 0)
	if !ok || r.Error != "" || !blank(out[next:]) {
		return nil, false
	}
	if r.ProjectResponse == nil { // {}
		return &abi.ProjectResponse{}, true
	}
	return r.ProjectResponse, true
}

// blank reports whether b is only JSON white space.
func blank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

// unescapeCompact undoes the only escapes a compact string has, \" and \\.
func unescapeCompact(b []byte) string {
	var sb strings.Builder
	sb.Grow(len(b))
	for {
		j := bytes.IndexByte(b, '\\')
		if j < 0 || j+1 >= len(b) {
			sb.Write(b)
			return sb.String()
		}
		sb.Write(b[:j])
		sb.WriteByte(b[j+1])
		b = b[j+2:]
	}
}

// The members of a compact projection, in the order they must come.
var compactMembers = [3]string{`"tools":[`, `"prompts":[`, `"resources":[`}

// compactResult decodes the compact result at out[i] and returns the index
// just past it.
func compactResult(out []byte, i int) (abi.BatchResult, int, bool) {
	const errHead = `{"error":"`
	if bytes.HasPrefix(out[i:], []byte(errHead)) {
		msg, j, ok := compactString(out, i+len(errHead))
		if !ok || j >= len(out) || out[j] != '}' {
			return abi.BatchResult{}, 0, false
		}
		return abi.BatchResult{Error: msg}, j + 1, true
	}
	if i >= len(out) || out[i] != '{' {
		return abi.BatchResult{}, 0, false
	}
	i++
	if i < len(out) && out[i] == '}' {
		return abi.BatchResult{}, i + 1, true
	}
	pr := &abi.ProjectResponse{}
	next := 0 // the first member that may still come
	for {
		m := next
		for m < len(compactMembers) && !bytes.HasPrefix(out[i:], []byte(compactMembers[m])) {
			m++
		}
		if m == len(compactMembers) {
			return abi.BatchResult{}, 0, false
		}
		i += len(compactMembers[m])
		next = m + 1
		var ok bool
		if m == 0 {
			pr.Tools, i, ok = compactDecisions(out, i)
		} else {
			var list []int
			list, i, ok = compactIndexes(out, i)
			if m == 1 {
				pr.Prompts = list
			} else {
				pr.Resources = list
			}
		}
		if !ok || i >= len(out) {
			return abi.BatchResult{}, 0, false
		}
		switch out[i] {
		case '}':
			return abi.BatchResult{ProjectResponse: pr}, i + 1, true
		case ',':
			i++
		default:
			return abi.BatchResult{}, 0, false
		}
	}
}

// compactIndexes decodes a list of indexes after its '[' at out[i] and
// returns the index just past its ']'.
func compactIndexes(out []byte, i int) ([]int, int, bool) {
	list := []int{}
	if i < len(out) && out[i] == ']' {
		return list, i + 1, true
	}
	for {
		v, next, ok := compactIndex(out, i)
		if !ok || next >= len(out) {
			return nil, 0, false
		}
		list = append(list, v)
		switch out[next] {
		case ']':
			return list, next + 1, true
		case ',':
			i = next + 1
		default:
			return nil, 0, false
		}
	}
}

// compactDecisions decodes a list of tool decisions after its '[' at
// out[i] and returns the index just past its ']'.
func compactDecisions(out []byte, i int) ([]abi.ToolDecision, int, bool) {
	const (
		head   = `{"i":`
		trust  = `,"trust":`
		always = `,"alwaysLoad":`
	)
	list := []abi.ToolDecision{}
	if i < len(out) && out[i] == ']' {
		return list, i + 1, true
	}
	for {
		if !bytes.HasPrefix(out[i:], []byte(head)) {
			return nil, 0, false
		}
		v, next, ok := compactIndex(out, i+len(head))
		if !ok {
			return nil, 0, false
		}
		d := abi.ToolDecision{Index: v}
		i = next
		if bytes.HasPrefix(out[i:], []byte(trust)) {
			if d.Trust, i, ok = compactBool(out, i+len(trust)); !ok {
				return nil, 0, false
			}
		}
		if bytes.HasPrefix(out[i:], []byte(always)) {
			if d.AlwaysLoad, i, ok = compactBool(out, i+len(always)); !ok {
				return nil, 0, false
			}
		}
		if i+1 >= len(out) || out[i] != '}' {
			return nil, 0, false
		}
		list = append(list, d)
		switch out[i+1] {
		case ']':
			return list, i + 2, true
		case ',':
			i += 2
		default:
			return nil, 0, false
		}
	}
}

// compactIndex decodes an index of one to nine digits without a leading
// zero at out[i] and returns the index just past it.
func compactIndex(out []byte, i int) (int, int, bool) {
	start, v := i, 0
	for i < len(out) && out[i] >= '0' && out[i] <= '9' {
		if i-start == 9 {
			return 0, 0, false
		}
		v = v*10 + int(out[i]-'0')
		i++
	}
	if n := i - start; n == 0 || (n > 1 && out[start] == '0') {
		return 0, 0, false
	}
	return v, i, true
}

// compactBool decodes true or false at out[i].
func compactBool(out []byte, i int) (bool, int, bool) {
	switch {
	case bytes.HasPrefix(out[i:], []byte("true")):
		return true, i + 4, true
	case bytes.HasPrefix(out[i:], []byte("false")):
		return false, i + 5, true
	}
	return false, 0, false
}

// decodeCanonicalizeCompact decodes a canonicalize output written in the
// compact form the default plugin writes: no white space but at the end,
// each result either {"error":"..."} or {"canonical":VALUE,"key":"..."},
// the strings printable ASCII whose only escapes are \" and \\. For that
// form it gives exactly what decodeStrict gives, each canonical form a copy
// of its own (VALUE is checked as json.Valid would), and reports false for
// any other output, which decodeStrict then decodes or refuses.
//
// out may lie in the plugin's memory (a direct call's answer): everything
// decoded is copied out of it.
func decodeCanonicalizeCompact(out []byte) (*abi.CanonicalizeResponse, bool) {
	return decodeCanonicalizeCompactKeys(out, false)
}

// decodeCanonicalizeCompactKeys is decodeCanonicalizeCompact for a plugin
// whose handshake has canonicalKeys (abi/SPEC.md section 4) when
// canonicalKeys is set: a result may then also be {"canonical":VALUE},
// whose key is VALUE's text, and the result is what decodeStrict and then
// fillCanonicalKeys give.
func decodeCanonicalizeCompactKeys(out []byte, canonicalKeys bool) (*abi.CanonicalizeResponse, bool) {
	results, ok := compactResults(out, func(out []byte, i int) (abi.CanonicalResult, int, bool) {
		return compactCanonical(out, i, canonicalKeys)
	})
	return &abi.CanonicalizeResponse{Results: results}, ok
}

// compactCanonical decodes the compact canonicalize result at out[i] and
// returns the index just past it. canonicalKeys takes a result without a
// key, whose key is then its canonical form's text.
func compactCanonical(out []byte, i int, canonicalKeys bool) (abi.CanonicalResult, int, bool) {
	const (
		errHead   = `{"error":"`
		canonHead = `{"canonical":`
		keyHead   = `,"key":"`
	)
	var r abi.CanonicalResult
	var ok bool
	switch {
	case bytes.HasPrefix(out[i:], []byte(errHead)):
		if r.Error, i, ok = compactString(out, i+len(errHead)); !ok || r.Error == "" {
			return r, 0, false
		}
	case bytes.HasPrefix(out[i:], []byte(canonHead)):
		start := i + len(canonHead)
		end := jsonvalid.ValueEnd(out, start)
		if end < 0 {
			return r, 0, false
		}
		canonical := out[start:end]
		switch {
		case canonicalKeys && end < len(out) && out[end] == '}':
			// No key: the canonical form's text is the key
			// (fillCanonicalKeys refuses it when not UTF-8).
			if !utf8.Valid(canonical) {
				return r, 0, false
			}
			r.Key, i = string(canonical), end
		case !bytes.HasPrefix(out[end:], []byte(keyHead)):
			return r, 0, false
		default:
			next, same := keyIsCanonical(out, end+len(keyHead), canonical)
			if same {
				// A key that is its canonical JSON (the default plugin's
				// before canonicalKeys): its bytes are compared with the
				// canonical form's, not decoded.
				r.Key, i = string(canonical), next
			} else if r.Key, i, ok = compactString(out, end+len(keyHead)); !ok {
				return r, 0, false
			}
			if r.Key == "" && canonicalKeys {
				if !utf8.Valid(canonical) {
					return r, 0, false
				}
				r.Key = string(canonical)
			}
		}
		r.Canonical = bytes.Clone(canonical)
	default:
		return r, 0, false
	}
	if i >= len(out) || out[i] != '}' {
		return r, 0, false
	}
	return r, i + 1, true
}

// keyIsCanonical reports whether out, from i (just after a key's opening
// quote), holds canonical as a compact string holds it: printable ASCII
// with '"' and backslash escaped, and then the closing quote; it returns
// the index just past that quote. It compares bytes instead of decoding
// the key, which is what the key of the default plugin is.
func keyIsCanonical(out []byte, i int, canonical []byte) (int, bool) {
	if len(out)-i < len(canonical)+1 {
		return 0, false
	}
	for _, c := range canonical {
		if c < 0x20 || c >= 0x7f {
			return 0, false
		}
		if c == '"' || c == '\\' {
			if i >= len(out) || out[i] != '\\' {
				return 0, false
			}
			i++
		}
		if i >= len(out) || out[i] != c {
			return 0, false
		}
		i++
	}
	if i >= len(out) || out[i] != '"' {
		return 0, false
	}
	return i + 1, true
}

// compactString reads the body of a JSON string from out[i] (just after its
// opening quote) that is printable ASCII with no escapes but \" and \\, and
// returns it and the index just past its closing quote.
func compactString(out []byte, i int) (string, int, bool) {
	start, escaped := i, false
	for i < len(out) && out[i] >= 0x20 && out[i] < 0x7f && out[i] != '"' {
		if out[i] == '\\' {
			if i+1 >= len(out) || (out[i+1] != '"' && out[i+1] != '\\') {
				return "", 0, false
			}
			escaped = true
			i++
		}
		i++
	}
	if i >= len(out) || out[i] != '"' {
		return "", 0, false
	}
	if escaped {
		return unescapeCompact(out[start:i]), i + 1, true
	}
	return string(out[start:i]), i + 1, true
}
