package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	pathpkg "path"
	"path/filepath"
	"slices"
	"strings"
)

// A Kind is what a golden case checks.
type Kind string

// The five kinds of golden case, plus the two kinds the runner gives to
// input it could not read.
const (
	KindCanonical Kind = "canonical" // settings, canonical
	KindSame      Kind = "same"      // same: two or more settings objects, one key
	KindDiffer    Kind = "differ"    // differ: two or more settings objects, pairwise different keys
	KindProject   Kind = "project"   // settings, snapshot, project
	KindReject    Kind = "reject"    // settings, "reject": true
	// KindMalformed is a case that does not have the shape of any kind; it
	// always fails.
	KindMalformed Kind = "malformed"
	// KindFile stands for a whole file that is not a valid suite (not JSON,
	// or not the suite object); it always fails.
	KindFile Kind = "file"
)

// ErrNoSuites is returned by [Load] when a directory holds no *.json file.
var ErrNoSuites = errors.New("no *.json suite files")

// A Suite is one golden case file.
type Suite struct {
	// File is the path the suite was read from.
	File string
	// Rel is File relative to the path given to [Load] (the base name when
	// that path was the file itself); it names the file's subtest in [RunT].
	Rel string
	// Name and Description are the file's "suite" and "description".
	Name        string
	Description string
	// Cases are the file's cases in order, malformed ones included.
	Cases []*Case
	// Err is set when the file as a whole could not be understood (invalid
	// JSON, not a suite object); Cases is then empty and the run reports
	// one failed case of kind [KindFile].
	Err error
}

// A Case is one golden case. Which fields are set depends on Kind.
type Case struct {
	// Name is the case's name, or "cases[N]" (its JSON path in the file,
	// N counting from 0) when it has no usable name.
	Name string
	// Index is the case's 0-based position in its file.
	Index int
	Kind  Kind
	// Settings is the raw settings value, byte for byte as in the file
	// (canonical, project and reject cases).
	Settings json.RawMessage
	// Canonical is the expected canonical form (canonical cases).
	Canonical json.RawMessage
	// Group holds the settings objects of a same or differ case.
	Group []json.RawMessage
	// Snapshot is the raw snapshot of a project case; it is decoded afresh
	// for every run so one run can never leak into the next.
	Snapshot json.RawMessage
	// Project is the expected projection of a project case.
	Project Projected
	// Err says why a case of kind [KindMalformed] is malformed.
	Err error

	named bool // Name comes from the file, not the placeholder
}

// caseKeys lists, for each kind, every key its cases have (besides name).
var caseKeys = map[Kind][]string{
	KindCanonical: {"settings", "canonical"},
	KindSame:      {"same"},
	KindDiffer:    {"differ"},
	KindProject:   {"settings", "snapshot", "project"},
	KindReject:    {"settings", "reject"},
}

// kindOfKey maps each key that only one kind uses to that kind.
var kindOfKey = map[string]Kind{
	"canonical": KindCanonical,
	"same":      KindSame,
	"differ":    KindDiffer,
	"snapshot":  KindProject,
	"project":   KindProject,
	"reject":    KindReject,
}

var kindOrder = []Kind{KindCanonical, KindSame, KindDiffer, KindProject, KindReject}

// Load reads the suites at paths. Each path is a suite file or a directory
// walked recursively for *.json files in name order. It returns an error
// (wrapping the fs error, or [ErrNoSuites]) naming the path when a path
// cannot be read or a directory holds no suite; problems inside a file are
// not errors but failing cases (see the package documentation).
func Load(paths ...string) ([]*Suite, error) {
	if len(paths) == 0 {
		return nil, errors.New("conformance: no suite path given")
	}
	var suites []*Suite
	for _, root := range paths {
		info, err := os.Stat(root)
		if err != nil {
			return nil, fmt.Errorf("conformance: suite path: %w", err)
		}
		if !info.IsDir() {
			s, err := loadFile(root, filepath.Base(root))
			if err != nil {
				return nil, err
			}
			suites = append(suites, s)
			continue
		}
		n := 0
		err = walkSuites(root, "", make(map[string]bool), func(path, rel string) error {
			s, err := loadFile(path, rel)
			if err != nil {
				return err
			}
			suites = append(suites, s)
			n++
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("conformance: read suite directory %s: %w", root, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("conformance: %s: %w", root, ErrNoSuites)
		}
	}
	return suites, nil
}

// walkSuites calls add for each *.json file under dir, in name order,
// descending into directories as it meets them; rel is dir's path relative
// to the walk's root ("" for the root), in slash form. Symbolic links are
// followed, to files and to directories alike; a directory reached again
// (a link cycle, or two links to one directory) is read once. A *.json
// entry that is not a regular file (a named pipe, a device) is an error.
func walkSuites(dir, rel string, seen map[string]bool, add func(path, rel string) error) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	if seen[real] {
		return nil
	}
	seen[real] = true
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return err
	}
	for _, e := range entries {
		p, r := filepath.Join(dir, e.Name()), pathpkg.Join(rel, e.Name())
		info, err := os.Stat(p) // through a link
		switch {
		case err != nil && !strings.HasSuffix(e.Name(), ".json"):
			continue // a dangling link that would not be read anyway
		case err != nil:
			return err
		case info.IsDir():
			if err := walkSuites(p, r, seen, add); err != nil {
				return err
			}
		case strings.HasSuffix(e.Name(), ".json") && !info.Mode().IsRegular():
			// A named pipe or a device (a link to /dev/stdin, say) would
			// block the run or read for ever; a file named on the command
			// line is read whatever it is.
			return fmt.Errorf("%s: not a regular file (%v)", p, info.Mode().Type())
		case strings.HasSuffix(e.Name(), ".json"):
			if err := add(p, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// maxSuiteFileBytes bounds one suite file; golden cases are small, and a
// runner pointed at the wrong directory must not read a disk image.
const maxSuiteFileBytes = 64 << 20

func loadFile(path, rel string) (*Suite, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("conformance: read suite file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSuiteFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("conformance: read suite file: %w", err)
	}
	if len(data) > maxSuiteFileBytes {
		return nil, fmt.Errorf("conformance: suite file %s: more than %d MiB", path, maxSuiteFileBytes>>20)
	}
	s := ParseSuite(data)
	s.File = path
	s.Rel = rel
	return s, nil
}

// ParseSuite parses one suite file's contents. It never fails: a file that
// cannot be understood comes back with Err set, a malformed case as a case
// of kind [KindMalformed]. File and Rel are left empty. A UTF-8 byte order
// mark at the start is ignored, as RFC 8259 allows: some editors write one.
func ParseSuite(data []byte) *Suite {
	s := &Suite{}
	data = bytes.TrimPrefix(data, []byte("\uFEFF"))
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		s.Err = fmt.Errorf("not valid JSON: %s%w", syntaxLocation(data, err), err)
		return s
	}
	fields, err := readObject(data)
	if err != nil {
		s.Err = fmt.Errorf("not a suite object: %w", err)
		return s
	}
	var rawCases json.RawMessage
	haveSuite := false
	for _, f := range fields {
		switch f.key {
		case "suite":
			if err := decodeTyped(f.value, "a string", &s.Name); err != nil {
				s.Err = fmt.Errorf("suite: %w", err)
				return s
			}
			haveSuite = true
		case "description":
			if err := decodeTyped(f.value, "a string", &s.Description); err != nil {
				s.Err = fmt.Errorf("description: %w", err)
				return s
			}
		case "cases":
			rawCases = f.value
		default:
			s.Err = fmt.Errorf("unknown top-level key %q (want suite, description, cases)", f.key)
			return s
		}
	}
	switch {
	case !haveSuite:
		s.Err = errors.New(`missing "suite"`)
		return s
	case rawCases == nil:
		s.Err = errors.New(`missing "cases"`)
		return s
	}
	elems, err := readArray(rawCases)
	if err != nil {
		s.Err = fmt.Errorf("cases: %w", err)
		return s
	}
	names := make(map[string]int)
	for i, e := range elems {
		c := parseCase(i, e)
		if c.named {
			if first, dup := names[c.Name]; !dup {
				names[c.Name] = i
			} else if c.Kind != KindMalformed {
				c.Kind, c.Err = KindMalformed, fmt.Errorf("duplicate case name (first used by cases[%d])", first)
			}
		}
		s.Cases = append(s.Cases, c)
	}
	return s
}

func placeholderName(i int) string { return fmt.Sprintf("cases[%d]", i) }

// parseCase parses cases[i]. It always returns a case: a malformed one has
// Kind KindMalformed and Err set.
func parseCase(i int, raw json.RawMessage) *Case {
	c := &Case{Name: placeholderName(i), Index: i}
	malformed := func(format string, args ...any) *Case {
		c.Kind, c.Err = KindMalformed, fmt.Errorf(format, args...)
		return c
	}
	fields, err := readObject(raw)
	if err != nil {
		return malformed("case: %w", err)
	}
	values := make(map[string]json.RawMessage, len(fields))
	for _, f := range fields {
		values[f.key] = f.value
	}
	nameRaw, ok := values["name"]
	if !ok {
		return malformed(`missing "name"`)
	}
	var name string
	if err := decodeTyped(nameRaw, "a string", &name); err != nil {
		return malformed("name: %w", err)
	}
	if name == "" {
		return malformed("name is empty")
	}
	c.Name, c.named = name, true

	var unknown []string
	kinds := map[Kind]bool{}
	for _, f := range fields {
		if f.key == "name" {
			continue
		}
		if k, ok := kindOfKey[f.key]; ok {
			kinds[k] = true
		} else if f.key != "settings" {
			unknown = append(unknown, f.key)
		}
	}
	if len(unknown) > 0 {
		return malformed("unknown key %s", quoteList(unknown))
	}
	var found []string
	for _, k := range kindOrder {
		if kinds[k] {
			found = append(found, string(k))
		}
	}
	switch len(found) {
	case 0:
		return malformed("the keys of no kind (a case needs canonical, same, differ, snapshot+project or reject)")
	case 1:
	default:
		return malformed("the keys of several kinds: %s", strings.Join(found, ", "))
	}
	kind := Kind(found[0])
	want := caseKeys[kind]
	for _, k := range want {
		if _, ok := values[k]; !ok {
			return malformed("a %s case needs %q", kind, k)
		}
	}
	for _, f := range fields {
		if f.key != "name" && !slices.Contains(want, f.key) {
			return malformed("key %q does not belong in a %s case", f.key, kind)
		}
	}

	c.Settings = values["settings"]
	switch kind {
	case KindCanonical:
		c.Canonical = values["canonical"]
		if _, err := decodeValue(c.Canonical); err != nil {
			return malformed("canonical: %w", err)
		}
	case KindSame, KindDiffer:
		group, err := readArray(values[string(kind)])
		if err != nil {
			return malformed("%s: %w", kind, err)
		}
		if len(group) < 2 {
			return malformed("%s: needs two or more settings objects, has %d", kind, len(group))
		}
		c.Group = group
	case KindProject:
		if _, err := DecodeSnapshot(values["snapshot"]); err != nil {
			return malformed("snapshot: %w", err)
		}
		c.Snapshot = values["snapshot"]
		p, err := decodeProjected(values["project"])
		if err != nil {
			return malformed("project: %w", err)
		}
		c.Project = p.normalized()
	case KindReject:
		if string(values["reject"]) != "true" {
			return malformed("reject: must be true, got %s", compactJSON(values["reject"]))
		}
	}
	c.Kind = kind
	return c
}

func quoteList(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = fmt.Sprintf("%q", k)
	}
	return strings.Join(q, ", ")
}
