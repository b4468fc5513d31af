package metakey

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/wasmhost/wasmhost/internal/jsonvalid"
)

// A Presence tells how a setting appeared in a settings object.
type Presence uint8

// The three ways a setting can appear.
const (
	// Missing means the key was not in the settings object.
	Missing Presence = iota
	// Null means the key was present with the value null.
	Null
	// Present means the key was present with a value of its own type.
	Present
)

// String returns "missing", "null" or "present".
func (p Presence) String() string {
	switch p {
	case Missing:
		return "missing"
	case Null:
		return "null"
	case Present:
		return "present"
	}
	return "Presence(" + strconv.Itoa(int(p)) + ")"
}

// A Bool is a boolean setting as written. Value is meaningful only when
// Presence is Present.
type Bool struct {
	Presence Presence
	Value    bool
}

// A Strings is a list-of-names setting as written. Values holds the entries
// in document order when Presence is Present (it may be empty or nil for
// []); it is nil otherwise.
type Strings struct {
	Presence Presence
	Values   []string
}

// A Settings is the four session metadata settings of one server entry,
// exactly as written: nothing is normalised until [Settings.Canonical].
type Settings struct {
	Trust, AlwaysLoadTools     Bool
	IncludeTools, ExcludeTools Strings
}

// The JSON keys of the four settings.
const (
	keyTrust           = "trust"
	keyAlwaysLoadTools = "alwaysLoadTools"
	keyIncludeTools    = "includeTools"
	keyExcludeTools    = "excludeTools"
)

// A SettingsError is the error [ParseSettings] returns for every settings
// object it refuses. Its message is "Path: Problem", or just Problem when the
// problem is with the object as a whole, e.g.
//
//	includeTools[1]: expected a string, got a number
//	trust: expected a boolean or null, got a string
//	expected an object, got an array
//	duplicate key "trust"
//
// A caller that knows where the object sits (say mcpServers.fs in a config
// file) can prefix Path with that location.
type SettingsError struct {
	// Path is the JSON path of the offending value inside the settings
	// object, such as "trust" or "includeTools[1]"; empty when the problem is
	// the object itself.
	Path string
	// Problem says what is wrong.
	Problem string
}

// Error returns "Path: Problem", or Problem when Path is empty.
func (e *SettingsError) Error() string {
	if e.Path == "" {
		return e.Problem
	}
	return e.Path + ": " + e.Problem
}

// ParseSettings strictly decodes one raw settings object.
//
// It refuses, with a *[SettingsError]:
//
//   - input that is not valid JSON, or a value that is not an object;
//   - a trust or alwaysLoadTools value that is neither a boolean nor null;
//   - an includeTools or excludeTools value that is neither an array of
//     strings nor null;
//   - any key, known or not, that appears twice in the object. Keys are
//     compared after unescaping, so "trust" and "tr\u0075st" are the same
//     key.
//
// The first problem in document order is reported. Keys other than the four
// settings are otherwise ignored, whatever their values. Nothing inside
// their values is checked beyond JSON syntax. Key names are case-sensitive
// ("Trust" is some other key). Strings are decoded exactly as
// encoding/json.Unmarshal decodes them (invalid UTF-8 and lone surrogates
// become U+FFFD).
func ParseSettings(raw []byte) (Settings, error) {
	// One copy of the input serves every string that needs no unescaping:
	// those are substrings of it.
	sc := scanner{s: string(raw)}
	if !jsonvalid.String(sc.s) {
		return Settings{}, syntaxError(raw)
	}
	return sc.settings()
}

// syntaxError describes why raw is not valid JSON.
func syntaxError(raw []byte) error {
	var v json.RawMessage
	err := json.Unmarshal(raw, &v)
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return &SettingsError{Problem: fmt.Sprintf("invalid JSON at byte offset %d: %v", se.Offset, se)}
	case err != nil:
		return &SettingsError{Problem: "invalid JSON: " + err.Error()}
	}
	return &SettingsError{Problem: "invalid JSON"}
}

// kindOf names the JSON kind of the value starting with byte c, as used in
// error messages.
func kindOf(c byte) string {
	switch c {
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
	}
	return "a number"
}

// A scanner walks a document that jsonvalid.String (so json.Valid) has
// accepted, so it never meets a syntax error and only has to check the
// kinds of values.
type scanner struct {
	s   string
	pos int
}

// Bits recording which of the four settings have been seen.
const (
	seenTrust uint8 = 1 << iota
	seenAlwaysLoadTools
	seenIncludeTools
	seenExcludeTools
)

func (sc *scanner) settings() (Settings, error) {
	var out Settings
	if c := sc.peek(); c != '{' {
		return Settings{}, &SettingsError{Problem: "expected an object, got " + kindOf(c)}
	}
	sc.pos++
	if sc.peek() == '}' {
		return out, nil
	}
	var seen uint8
	// Keys other than the four, kept to find duplicates: a few in a small
	// array, more in a map.
	var few [8]string
	others := few[:0]
	var many map[string]struct{}
	for {
		sc.skipSpace()
		key, ok := sc.str()
		if !ok {
			return Settings{}, &SettingsError{Problem: "cannot decode a key"}
		}
		sc.skipSpace()
		sc.pos++ // ':'
		var bit uint8
		switch key {
		case keyTrust:
			bit = seenTrust
		case keyAlwaysLoadTools:
			bit = seenAlwaysLoadTools
		case keyIncludeTools:
			bit = seenIncludeTools
		case keyExcludeTools:
			bit = seenExcludeTools
		default:
			if slices.Contains(others, key) {
				return Settings{}, duplicateKey(key)
			}
			if len(others) < cap(others) {
				others = append(others, key)
			} else {
				if many == nil {
					many = make(map[string]struct{})
				}
				if _, dup := many[key]; dup {
					return Settings{}, duplicateKey(key)
				}
				many[key] = struct{}{}
			}
			sc.skipValue()
		}
		if bit != 0 {
			if seen&bit != 0 {
				return Settings{}, duplicateKey(key)
			}
			seen |= bit
			var err error
			switch bit {
			case seenTrust:
				out.Trust, err = sc.boolean(key)
			case seenAlwaysLoadTools:
				out.AlwaysLoadTools, err = sc.boolean(key)
			case seenIncludeTools:
				out.IncludeTools, err = sc.strings(key)
			case seenExcludeTools:
				out.ExcludeTools, err = sc.strings(key)
			}
			if err != nil {
				return Settings{}, err
			}
		}
		sc.skipSpace()
		c := sc.s[sc.pos]
		sc.pos++
		if c == '}' {
			return out, nil
		}
		// c == ','
	}
}

func duplicateKey(key string) error {
	return &SettingsError{Problem: "duplicate key " + strconv.Quote(key)}
}

func (sc *scanner) boolean(key string) (Bool, error) {
	switch c := sc.peek(); c {
	case 't':
		sc.pos += len("true")
		return Bool{Presence: Present, Value: true}, nil
	case 'f':
		sc.pos += len("false")
		return Bool{Presence: Present}, nil
	case 'n':
		sc.pos += len("null")
		return Bool{Presence: Null}, nil
	default:
		return Bool{}, &SettingsError{Path: key, Problem: "expected a boolean or null, got " + kindOf(c)}
	}
}

func (sc *scanner) strings(key string) (Strings, error) {
	switch c := sc.peek(); c {
	case 'n':
		sc.pos += len("null")
		return Strings{Presence: Null}, nil
	case '[':
		sc.pos++
	default:
		return Strings{}, &SettingsError{Path: key, Problem: "expected an array of strings or null, got " + kindOf(c)}
	}
	if sc.peek() == ']' {
		sc.pos++
		return Strings{Presence: Present}, nil
	}
	// Entries gather in a small array first so that the result is one
	// allocation of the right size.
	var few [16]string
	values := few[:0]
	for i := 0; ; i++ {
		if c := sc.peek(); c != '"' {
			return Strings{}, &SettingsError{Path: indexPath(key, i), Problem: "expected a string, got " + kindOf(c)}
		}
		v, ok := sc.str()
		if !ok {
			return Strings{}, &SettingsError{Path: indexPath(key, i), Problem: "cannot decode the string"}
		}
		values = append(values, v)
		sc.skipSpace()
		c := sc.s[sc.pos]
		sc.pos++
		if c == ']' {
			return Strings{Presence: Present, Values: slices.Clone(values)}, nil
		}
		// c == ','
	}
}

func indexPath(key string, i int) string {
	return key + "[" + strconv.Itoa(i) + "]"
}

func (sc *scanner) skipSpace() {
	for sc.pos < len(sc.s) {
		switch sc.s[sc.pos] {
		case ' ', '\t', '\n', '\r':
			sc.pos++
		default:
			return
		}
	}
}

// peek skips white space and returns the next byte. It is only called where
// valid JSON must have one more token.
func (sc *scanner) peek() byte {
	sc.skipSpace()
	return sc.s[sc.pos]
}

// str decodes the string literal at sc.pos and moves past it. A literal
// without escapes holding valid UTF-8 decodes to itself, a substring of the
// input; anything else is handed to encoding/json so that the result is
// exactly what json.Unmarshal gives. It reports false only if
// encoding/json cannot decode a literal that jsonvalid.String accepted.
func (sc *scanner) str() (string, bool) {
	start := sc.pos + 1
	simple, ascii := true, true
	i := start
	for {
		c := sc.s[i]
		if c == '"' {
			break
		}
		if c == '\\' {
			simple = false
			i += 2
			continue
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
		i++
	}
	sc.pos = i + 1
	lit := sc.s[start:i]
	if simple && (ascii || utf8.ValidString(lit)) {
		return lit, true
	}
	var out string
	if err := json.Unmarshal([]byte(sc.s[start-1:i+1]), &out); err != nil {
		return "", false
	}
	return out, true
}

// skipString moves past the string literal at sc.pos.
func (sc *scanner) skipString() {
	i := sc.pos + 1
	for {
		switch sc.s[i] {
		case '"':
			sc.pos = i + 1
			return
		case '\\':
			i += 2
		default:
			i++
		}
	}
}

// skipValue moves past the value starting at the next token, however deeply
// nested.
func (sc *scanner) skipValue() {
	depth := 0
	for {
		sc.skipSpace()
		switch sc.s[sc.pos] {
		case '"':
			sc.skipString()
		case '{', '[':
			depth++
			sc.pos++
		case '}', ']':
			depth--
			sc.pos++
		case ',', ':':
			sc.pos++
		default: // a number or a literal
			for sc.pos < len(sc.s) && !endsScalar(sc.s[sc.pos]) {
				sc.pos++
			}
		}
		if depth == 0 {
			return
		}
	}
}

func endsScalar(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}
