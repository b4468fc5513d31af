package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
	"unicode"
)

// A field is one member of a JSON object, its value kept as the raw bytes
// found in the input.
type field struct {
	key   string
	value json.RawMessage
}

// readObject splits raw, which must be exactly one JSON object, into its
// members in order. Duplicate keys are refused: encoding/json would keep the
// last one silently, and a golden file must never mean something else than
// it reads.
func readObject(raw []byte) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("expected an object, got %s", jsonKind(raw))
	}
	var fields []field
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string) // object keys are always strings
		if seen[key] {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		fields = append(fields, field{key: key, value: v})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the top-level value")
	}
	return fields, nil
}

// readArray splits raw, which must be one JSON array, into its elements.
func readArray(raw []byte) ([]json.RawMessage, error) {
	if jsonKind(raw) != "an array" {
		return nil, fmt.Errorf("expected an array, got %s", jsonKind(raw))
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, err
	}
	return elems, nil
}

// jsonKind names the JSON type of raw for error messages.
func jsonKind(raw []byte) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// compactJSON returns raw on one line without insignificant spaces, or raw
// itself (quoted) when it is not valid JSON, so that it can always be shown
// in a one-line report.
func compactJSON(raw []byte) string {
	if len(raw) == 0 {
		return "(nothing)"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return fmt.Sprintf("%q", raw)
	}
	return b.String()
}

// marshalLine marshals v for a report line.
func marshalLine(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("(unmarshalable: %v)", err)
	}
	return string(b)
}

// jsonEqual reports whether a and b hold equal JSON values: object key order
// and spacing do not matter, array order does, and numbers are compared by
// value (1, 1.0 and 1e0 are equal).
func jsonEqual(a, b []byte) (bool, error) {
	va, err := decodeValue(a)
	if err != nil {
		return false, err
	}
	vb, err := decodeValue(b)
	if err != nil {
		return false, err
	}
	return valueEqual(va, vb), nil
}

// decodeValue decodes one JSON value, numbers as json.Number. An object
// with a key twice is an error: a golden file must never mean something
// other than it reads, and which of two equal keys counts is up to each
// reader.
func decodeValue(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := readValue(dec, "")
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the top-level value")
	}
	return v, nil
}

// readValue reads the value at the decoder's position, path naming it in
// errors ("" for the top).
func readValue(dec *json.Decoder, path string) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		m := make(map[string]any)
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k := kt.(string) // the decoder checks that keys are strings
			kp := joinPath(path, k)
			if _, dup := m[k]; dup {
				return nil, fmt.Errorf("duplicate key %s", kp)
			}
			if m[k], err = readValue(dec, kp); err != nil {
				return nil, err
			}
		}
		_, err := dec.Token() // '}'
		return m, err
	case json.Delim('['):
		a := []any{}
		for dec.More() {
			v, err := readValue(dec, fmt.Sprintf("%s[%d]", path, len(a)))
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token() // ']'
		return a, err
	}
	return tok, nil
}

// decimalForm returns a normal form of the JSON number n, equal for two
// numbers exactly when their values are: the sign, the significant digits
// without leading or trailing zeros, and the power of ten of the last
// digit, as "-12e-3"; zero is "0" whatever its sign. The exponent may be
// of any size (1e1000001 and 10e1000000 are equal). It reports false for
// a string that is not a number.
func decimalForm(n string) (string, bool) {
	neg := strings.HasPrefix(n, "-")
	mant, exp, hasExp := strings.Cut(strings.ToLower(strings.TrimPrefix(n, "-")), "e")
	e := new(big.Int)
	if hasExp {
		if _, ok := e.SetString(exp, 10); !ok {
			return "", false
		}
	}
	whole, frac, _ := strings.Cut(mant, ".")
	digits := whole + frac
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return "", false
	}
	e.Sub(e, big.NewInt(int64(len(frac))))
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return "0", true
	}
	sig := strings.TrimRight(digits, "0")
	e.Add(e, big.NewInt(int64(len(digits)-len(sig))))
	if neg {
		sig = "-" + sig
	}
	return sig + "e" + e.String(), true
}

// joinPath appends object key k to path, for messages.
func joinPath(path, k string) string {
	if path == "" {
		return strconv.Quote(k)
	}
	return path + "." + strconv.Quote(k)
}

func valueEqual(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !valueEqual(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !valueEqual(a[i], b[i]) {
				return false
			}
		}
		return true
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		fa, oka := decimalForm(string(a))
		fb, okb := decimalForm(string(b))
		if !oka || !okb {
			return a == b
		}
		return fa == fb
	default: // string, bool, nil
		return a == b
	}
}

// syntaxLocation turns the byte offset of a JSON syntax error into a
// "line L, column C" prefix.
func syntaxLocation(data []byte, err error) string {
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return ""
	}
	off := int(min(se.Offset, int64(len(data))))
	before := data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := off - (bytes.LastIndexByte(before, '\n') + 1)
	if col == 0 {
		col = 1
	}
	return fmt.Sprintf("line %d, column %d: ", line, col)
}

// oneLine folds a message onto a single line, since the runner prints one
// line per case.
func oneLine(s string) string {
	s = strings.TrimRight(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
	if !strings.ContainsFunc(s, unprintable) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n':
			b.WriteString(" | ")
		case unprintable(r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// unprintable reports whether r would break a report line or draw over
// it: a control character other than tab, or a line or paragraph
// separator.
func unprintable(r rune) bool {
	return (unicode.IsControl(r) && r != '\t') || r == '\u2028' || r == '\u2029'
}

// label is a case name or file name as a report line shows it: as it is,
// or quoted as a Go string when it holds a character oneLine would change,
// so that a name cannot forge or break a line.
func label(s string) string {
	if strings.ContainsFunc(s, unprintable) {
		return strconv.Quote(s)
	}
	return s
}
