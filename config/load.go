package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Load reads the config file at path and parses it with Parse, using the
// process environment and file system to resolve tokens. An error reading
// the file itself is returned as is (it does not wrap ErrInvalid).
func Load(path string) (*Config, []Warning, error) { return LoadWith(path, nil) }

// LoadWith is Load with readFile reading "tokenFile" values (nil:
// os.ReadFile), as in Parse; the daemon uses it to learn which files a
// config reads.
func LoadWith(path string, readFile func(string) ([]byte, error)) (*Config, []Warning, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data, os.LookupEnv, readFile)
}

// Parse parses and validates the config file contents data. name is used in
// every error and warning, and its directory is the base for relative
// "tokenFile", "cwd" and policy "path" values. lookupEnv resolves
// "tokenEnv" and readFile reads "tokenFile"; nil means os.LookupEnv and
// os.ReadFile.
//
// Parse reports every problem it finds, not just the first: the error is
// nil or wraps ErrInvalid and joins one *Error per problem, in file order.
// Warnings (ignored settings, suspicious values) are returned in file
// order even when there are errors. On error the Config is nil.
func Parse(name string, data []byte, lookupEnv func(string) (string, bool), readFile func(string) ([]byte, error)) (*Config, []Warning, error) {
	return ParseWith(name, data, Options{LookupEnv: lookupEnv, ReadFile: readFile})
}

// Options adjust ParseWith.
type Options struct {
	// LookupEnv resolves "tokenEnv"; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// ReadFile reads "tokenFile"; nil means os.ReadFile.
	ReadFile func(string) ([]byte, error)
	// ServerKeys are keys that a server entry and a session override may
	// hold besides the loader's own, such as settings a plugin declares.
	// Their values are kept, unchecked, in Settings.Extra, and are part
	// of the settings object the policy plugin sees. A key the loader
	// knows already is an error.
	ServerKeys []string
	// ServerKeysOwner names who declares ServerKeys, e.g. `policy plugin
	// "readonly-policy"`, for the error about a key that is neither the
	// loader's nor in ServerKeys: it says who would have to declare it.
	ServerKeysOwner string
	// ServerKeysUnknown says that the policy plugin the config names could
	// not be asked which keys it declares (its policy block is refused): a
	// server or override key that is neither the loader's nor near enough
	// to one to be a misspelling is then a warning, not checked, rather
	// than an error naming a plugin that may well declare it. A config
	// with such a key is still refused, with an error saying so when it
	// has no other.
	ServerKeysUnknown bool

	policyOnly bool // PeekPolicy: read the policy block and nothing else
}

// PeekPolicy reads only the "policy" block of the config file contents
// data, so that the plugin it names can be loaded, and the settings keys
// the plugin declares passed to ParseWith (Options.ServerKeys): the config
// names the plugin that decides which keys the rest of it may hold. The
// error reports the policy block's problems (or the file's syntax), as
// ParseWith would.
func PeekPolicy(name string, data []byte) (Policy, error) {
	cfg, _, err := ParseWith(name, data, Options{policyOnly: true})
	if err != nil {
		return Policy{}, err
	}
	return cfg.Policy, nil
}

// ParseWith is Parse with Options.
func ParseWith(name string, data []byte, opts Options) (*Config, []Warning, error) {
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	if opts.ReadFile == nil {
		opts.ReadFile = os.ReadFile
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark some editors write
	l := &loader{
		file:      name,
		dir:       filepath.Dir(name),
		src:       newSource(data),
		lookupEnv: opts.LookupEnv,
		readFile:  opts.ReadFile,
		extra:     make(map[string]bool),
		owner:     opts.ServerKeysOwner,
		unknownOK: opts.ServerKeysUnknown,
		only:      opts.policyOnly,
		known:     make(map[string]bool),
		tokens:    make(map[string]string),
	}
	var clash []error
	for _, k := range opts.ServerKeys {
		if slices.Contains(serverKeys, k) || slices.Contains(overrideKeys, k) || slices.Contains(IgnoredServerKeys, k) {
			owner := opts.ServerKeysOwner
			if owner == "" {
				owner = "the policy plugin"
			}
			clash = append(clash, &Error{File: name, Path: "policy", Msg: fmt.Sprintf("%s declares the settings key %q, which is wasmhost's own", owner, k)})
			continue
		}
		l.extra[k] = true
	}
	if len(clash) > 0 {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalid, errors.Join(clash...))
	}
	cfg := l.parse(data)
	warnings := l.warnings()
	if len(l.errs) > 0 {
		return nil, warnings, l.err()
	}
	if l.unchecked > 0 {
		// A key not checked may be one no plugin declares: never applied.
		return nil, warnings, fmt.Errorf("%w: %s: %d settings keys not checked, the policy plugin's keys being unknown", ErrInvalid, name, l.unchecked)
	}
	return cfg, warnings, nil
}

// A loader holds the state of one Parse call.
type loader struct {
	file      string
	dir       string
	src       source
	lookupEnv func(string) (string, bool)
	readFile  func(string) ([]byte, error)
	extra     map[string]bool // Options.ServerKeys
	owner     string          // Options.ServerKeysOwner
	unknownOK bool            // Options.ServerKeysUnknown
	unchecked int             // settings keys left unchecked under unknownOK
	only      bool            // Options.policyOnly

	inSettings bool // parsing a server entry or an override, for ownerHint

	errs   []located[*Error]
	warns  []located[Warning]
	known  map[string]bool   // every key of mcpServers, valid or not
	tokens map[string]string // resolved token -> who uses it

	session string // the session being parsed, for Warning.Session
}

type located[T any] struct {
	off int
	v   T
}

func (l *loader) parse(data []byte) *Config {
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		off := 0
		var se *json.SyntaxError
		if errors.As(err, &se) {
			off = int(se.Offset)
			if off > 0 && se.Error() != "unexpected end of JSON input" {
				off-- // Offset counts the offending byte itself
			}
		}
		l.errorAt(off, "", "syntax error: %s", strings.TrimPrefix(err.Error(), "json: "))
		return nil
	}
	root, dups, err := parseTree(data)
	if err != nil {
		l.errorAt(0, "", "syntax error: %v", err)
		return nil
	}
	for _, d := range dups {
		l.errorAt(d.off, d.path, "duplicate key %q", d.key)
	}
	return l.config(root)
}

// err joins the collected errors in file order.
func (l *loader) err() error {
	sort.SliceStable(l.errs, func(i, j int) bool { return l.errs[i].off < l.errs[j].off })
	errs := make([]error, len(l.errs))
	for i, e := range l.errs {
		errs[i] = e.v
	}
	return errors.Join(errs...)
}

// warnings returns the collected warnings in file order.
func (l *loader) warnings() []Warning {
	sort.SliceStable(l.warns, func(i, j int) bool { return l.warns[i].off < l.warns[j].off })
	ws := make([]Warning, len(l.warns))
	for i, w := range l.warns {
		ws[i] = w.v
	}
	return ws
}

func (l *loader) errorAt(off int, path, format string, args ...any) {
	line, col := l.src.position(off)
	e := &Error{File: l.file, Path: path, Line: line, Column: col, Msg: fmt.Sprintf(format, args...)}
	l.errs = append(l.errs, located[*Error]{off, e})
}

func (l *loader) errorf(n *node, path, format string, args ...any) {
	l.errorAt(n.off, path, format, args...)
}

func (l *loader) warnAt(off int, path, format string, args ...any) {
	w := Warning{File: l.file, Path: path, Message: fmt.Sprintf(format, args...), Session: l.session}
	l.warns = append(l.warns, located[Warning]{off, w})
}

// resolve makes a relative path relative to the config file's directory.
func (l *loader) resolve(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(l.dir, p)
}

// raw returns n's source bytes without insignificant whitespace.
func (l *loader) raw(n *node) json.RawMessage {
	src := l.src.data[n.off:n.end]
	var b bytes.Buffer
	if err := json.Compact(&b, src); err != nil {
		return bytes.Clone(src)
	}
	return b.Bytes()
}

func (l *loader) config(root *node) *Config {
	if root.kind != kindObject {
		l.errorf(root, "", "expected an object at the top level, got %s", root.kind)
		return nil
	}
	cfg := &Config{
		File:     l.file,
		Listen:   DefaultListen,
		Servers:  make(map[string]*Server),
		Sessions: make(map[string]*Session),
		Policy:   Policy{MemoryMiB: DefaultPolicyMemoryMiB, Timeout: DefaultPolicyTimeout},
	}
	top := make(map[string]*node)
	for _, m := range root.members {
		switch m.key {
		case "mcpServers", "sessions", "policy", "listen", "admin":
			top[m.key] = m.val
		default:
			l.unknownKey(m.keyOff, joinKey("", m.key), m.key, topKeys)
		}
	}
	if l.only {
		if n := top["policy"]; n != nil {
			l.policy(cfg, n)
		}
		return cfg
	}
	// Servers first: sessions refer to them.
	if n := top["mcpServers"]; n != nil {
		l.servers(cfg, n)
	}
	if n := top["listen"]; n != nil {
		l.listen(cfg, n)
	}
	if n := top["policy"]; n != nil {
		l.policy(cfg, n)
	}
	if n := top["admin"]; n != nil {
		cfg.Admin = l.admin(n)
	}
	if n := top["sessions"]; n != nil {
		l.sessions(cfg, n)
	}
	if len(cfg.Sessions) == 0 && len(l.errs) == 0 {
		l.warnAt(root.off, "", "no sessions configured; the daemon will serve nothing")
	}
	return cfg
}

// Basic value checks. Each reports a type error at path and returns false.

func (l *loader) str(n *node, path string) (string, bool) {
	if n.kind != kindString {
		l.errorf(n, path, "expected a string, got %s", n.kind)
		return "", false
	}
	return n.text, true
}

func (l *loader) boolean(n *node, path string) (bool, bool) {
	if n.kind != kindBool {
		l.errorf(n, path, "expected a boolean, got %s", n.kind)
		return false, false
	}
	return n.boolean, true
}

// strList checks an array of strings; the result is never nil when ok.
func (l *loader) strList(n *node, path string) ([]string, bool) {
	if n.kind != kindArray {
		l.errorf(n, path, "expected an array of strings, got %s", n.kind)
		return nil, false
	}
	list := make([]string, 0, len(n.elems))
	ok := true
	for i, e := range n.elems {
		s, good := l.str(e, joinIndex(path, i))
		ok = ok && good
		list = append(list, s)
	}
	return list, ok
}

// strMap checks an object of strings, calling check for each member whose
// value is a string; check reports its own errors and returns false to
// leave the member out.
func (l *loader) strMap(n *node, path string, check func(m member, path string) bool) (map[string]string, bool) {
	if n.kind != kindObject {
		l.errorf(n, path, "expected an object of strings, got %s", n.kind)
		return nil, false
	}
	out := make(map[string]string, len(n.members))
	ok := true
	for _, m := range n.members {
		p := joinKey(path, m.key)
		if _, good := l.str(m.val, p); !good || !check(m, p) {
			ok = false
			continue
		}
		out[m.key] = m.val.text
	}
	return out, ok
}

// integer checks a number that is a whole value in [lo, hi].
func (l *loader) integer(n *node, path string, lo, hi int64, unit string) (int64, bool) {
	if n.kind != kindNumber {
		l.errorf(n, path, "expected a number, got %s", n.kind)
		return 0, false
	}
	v, err := strconv.ParseInt(n.text, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(n.text, 64)
		if ferr != nil || f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
			v = math.MinInt64 // out of range below
		} else {
			v = int64(f)
		}
	}
	if v < lo || v > hi {
		lit := n.text
		if len(lit) > 32 {
			lit = lit[:32] + "..."
		}
		l.errorf(n, path, "must be an integer from %d to %d%s, got %s", lo, hi, unit, lit)
		return 0, false
	}
	return v, true
}

func quoteList(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = strconv.Quote(k)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " and " + q[len(q)-1]
}

func (l *loader) listen(cfg *Config, n *node) {
	const path = "listen"
	s, ok := l.str(n, path)
	if !ok {
		return
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		l.errorf(n, path, "expected host:port, e.g. %s", DefaultListen)
		return
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		l.errorf(n, path, "the port must be a number from 0 to 65535")
		return
	}
	cfg.Listen = s
}

func (l *loader) policy(cfg *Config, n *node) {
	const path = "policy"
	if n.kind != kindObject {
		l.errorf(n, path, "expected an object, got %s", n.kind)
		return
	}
	for _, m := range n.members {
		p := joinKey(path, m.key)
		v := m.val
		switch m.key {
		case "path":
			if s, ok := l.str(v, p); ok {
				if s == "" {
					l.errorf(v, p, "must not be empty (leave \"path\" out to use the embedded default policy)")
				} else {
					cfg.Policy.Path = l.resolve(s)
				}
			}
		case "sha256":
			if s, ok := l.str(v, p); ok {
				if !isHex64(s) {
					l.errorf(v, p, "expected 64 hexadecimal digits (a SHA-256 digest)")
				} else {
					cfg.Policy.SHA256 = strings.ToLower(s)
				}
			}
		case "memoryMiB":
			if v, ok := l.integer(v, p, 1, MaxPolicyMemoryMiB, " (MiB)"); ok {
				cfg.Policy.MemoryMiB = int(v)
			}
		case "timeoutMs":
			if v, ok := l.integer(v, p, 1, MaxPolicyTimeoutMs, " (milliseconds)"); ok {
				cfg.Policy.Timeout = time.Duration(v) * time.Millisecond
			}
		case "compileTimeoutMs":
			if v, ok := l.integer(v, p, 1, MaxPolicyCompileTimeoutMs, " (milliseconds)"); ok {
				cfg.Policy.CompileTimeout = time.Duration(v) * time.Millisecond
			}
		case "config":
			cfg.Policy.Config = l.raw(v)
		default:
			l.unknownKey(m.keyOff, p, m.key, policyKeys)
		}
	}
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
