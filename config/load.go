package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/wasmhost/wasmhost/internal/mcpname"
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

// metadata checks one of the four session metadata settings and stores its
// raw value in s. It reports whether key is one of the four.
func (l *loader) metadata(key string, n *node, path string, s *Settings) bool {
	var dst *json.RawMessage
	switch key {
	case "trust":
		dst = &s.Trust
	case "alwaysLoadTools":
		dst = &s.AlwaysLoadTools
	case "includeTools":
		dst = &s.IncludeTools
	case "excludeTools":
		dst = &s.ExcludeTools
	default:
		return false
	}
	switch key {
	case "trust", "alwaysLoadTools":
		if n.kind != kindBool && n.kind != kindNull {
			l.errorf(n, path, "expected a boolean or null, got %s", n.kind)
			return true
		}
	default:
		switch n.kind {
		case kindNull:
		case kindArray:
			ok := true
			for i, e := range n.elems {
				if e.kind != kindString {
					l.errorf(e, joinIndex(path, i), "expected a string, got %s", e.kind)
					ok = false
				}
			}
			if !ok {
				return true
			}
		default:
			l.errorf(n, path, "expected an array of strings or null, got %s", n.kind)
			return true
		}
	}
	*dst = l.raw(n)
	return true
}

// Transport keys of a server entry, which a session override may not name.
var transportKeys = map[string]bool{
	"command": true, "args": true, "env": true, "cwd": true, "url": true,
	"httpUrl": true, "headers": true, "timeout": true, "pooled": true,
	"protocolVersion": true, "maxListingBytes": true, "bridgeInference": true,
}

// withExtra returns keys and the extra keys the loader accepts, sorted.
func (l *loader) withExtra(keys []string) []string {
	if len(l.extra) == 0 {
		return keys
	}
	out := slices.Clone(keys)
	for k := range l.extra {
		out = append(out, k)
	}
	slices.Sort(out[len(keys):])
	return out
}

// varRef matches what gemini-cli would expand as an environment variable.
var varRef = regexp.MustCompile(`\$(\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)`)

func (l *loader) servers(cfg *Config, n *node) {
	const path = "mcpServers"
	if n.kind != kindObject {
		l.errorf(n, path, "expected an object, got %s", n.kind)
		return
	}
	for _, m := range n.members {
		l.known[m.key] = true
		p := joinKey(path, m.key)
		switch {
		case m.key == "":
			l.errorAt(m.keyOff, p, "server name must not be empty")
			continue
		case strings.ContainsFunc(m.key, isControl):
			l.errorAt(m.keyOff, p, "server name must not contain control characters")
			continue
		case hasBadToolRune(m.key):
			// The name prefixes every tool and prompt the server exposes
			// ("name__tool"); the MCP specification advises tool names of
			// these characters only, and some clients refuse others.
			l.warnAt(m.keyOff, p, "the server name makes tool names such as %q, with characters the MCP specification advises against (use letters, digits, '_', '-' and '.'); some clients refuse them", m.key+"__tool")
		}
		if s := l.server(m.key, m.val, p); s != nil {
			cfg.Servers[m.key] = s
		}
	}
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// hasBadToolRune reports whether name has a character outside the MCP
// tool-name rule.
func hasBadToolRune(name string) bool {
	_, bad := mcpname.BadRune(name)
	return bad
}

func (l *loader) server(name string, n *node, path string) *Server {
	if n.kind != kindObject {
		l.errorf(n, path, "expected an object, got %s", n.kind)
		return nil
	}
	s := &Server{Name: name, Pooled: true}
	var transports []string
	present := make(map[string]int) // key -> offset
	for _, m := range n.members {
		p := joinKey(path, m.key)
		v := m.val
		present[m.key] = m.keyOff
		if l.metadata(m.key, v, p, &s.Settings) {
			continue
		}
		switch m.key {
		case "command":
			transports = append(transports, m.key)
			if c, ok := l.str(v, p); ok {
				switch {
				case strings.TrimSpace(c) == "":
					l.errorf(v, p, "must not be empty")
				case strings.ContainsRune(c, 0):
					l.errorf(v, p, "must not contain a NUL byte")
				default:
					s.Command = c
				}
			}
		case "args":
			if args, ok := l.strList(v, p); ok {
				for i, a := range args {
					if strings.ContainsRune(a, 0) {
						l.errorf(v.elems[i], joinIndex(p, i), "must not contain a NUL byte")
					}
				}
				s.Args = args
			}
		case "env":
			s.Env, _ = l.strMap(v, p, func(m member, p string) bool {
				switch {
				case m.key == "":
					l.errorAt(m.keyOff, p, "environment variable name must not be empty")
				case strings.ContainsAny(m.key, "=\x00"):
					l.errorAt(m.keyOff, p, "environment variable name must not contain '=' or NUL")
				case strings.ContainsRune(m.val.text, 0):
					l.errorf(m.val, p, "must not contain a NUL byte")
				default:
					l.warnVarRef(m.val, p)
					return true
				}
				return false
			})
		case "cwd":
			if c, ok := l.str(v, p); ok {
				switch {
				case strings.ContainsRune(c, 0):
					l.errorf(v, p, "must not contain a NUL byte")
				case c != "":
					s.Cwd = l.resolve(c)
				}
			}
		case "url", "httpUrl":
			transports = append(transports, m.key)
			if u, ok := l.str(v, p); ok && l.checkURL(v, p, u) {
				if m.key == "url" {
					s.URL = u
				} else {
					s.HTTPURL = u
				}
			}
		case "headers":
			s.Headers, _ = l.strMap(v, p, func(m member, p string) bool {
				switch {
				case !validHeaderName(m.key):
					l.errorAt(m.keyOff, p, "not a valid HTTP header name")
				case strings.ContainsAny(m.val.text, "\r\n\x00"):
					l.errorf(m.val, p, "header value must not contain CR, LF or NUL")
				default:
					l.warnVarRef(m.val, p)
					return true
				}
				return false
			})
		case "timeout":
			if ms, ok := l.integer(v, p, 0, MaxServerTimeoutMs, " (milliseconds)"); ok {
				s.Timeout = time.Duration(ms) * time.Millisecond
			}
		case "pooled":
			s.Pooled, _ = l.boolean(v, p)
		case "bridgeInference":
			if on, ok := l.boolean(v, p); ok {
				s.NoBridgeInference = !on
			}
		case "protocolVersion":
			if pv, ok := l.str(v, p); ok {
				if versions := mcp.SupportedProtocolVersions(); slices.Contains(versions, pv) {
					s.ProtocolVersion = pv
				} else {
					l.errorf(v, p, "unsupported MCP protocol version %q (supported: %s)", pv, strings.Join(versions, ", "))
				}
			}
		case "maxListingBytes":
			if n, ok := l.integer(v, p, 1, MaxListingBytes, " (bytes)"); ok {
				s.MaxListingBytes = int64(n)
			}
		case "disabled":
			s.Disabled, _ = l.boolean(v, p)
		case "description":
			s.Description, _ = l.str(v, p)
		case "prefix":
			s.Prefix = l.prefix(v, p)
		case "instructions":
			s.Instructions, _ = l.boolean(v, p)
		default:
			switch {
			case slices.Contains(IgnoredServerKeys, m.key):
				l.warnAt(m.keyOff, p, "not supported by wasmhost, ignored")
			case l.extra[m.key]:
				if s.Settings.Extra == nil {
					s.Settings.Extra = make(map[string]json.RawMessage)
				}
				s.Settings.Extra[m.key] = l.raw(v)
			default:
				l.inSettings = true
				l.unknownKey(m.keyOff, p, m.key, l.withExtra(serverKeys))
				l.inSettings = false
			}
		}
	}
	switch len(transports) {
	case 0:
		l.errorf(n, path, `expected exactly one of "command", "url" or "httpUrl", found none`)
	case 1:
		if transports[0] == "command" {
			if off, ok := present["headers"]; ok {
				l.warnAt(off, joinKey(path, "headers"), "ignored for a server started with \"command\"")
			}
		} else {
			for _, k := range []string{"args", "env", "cwd"} {
				if off, ok := present[k]; ok {
					l.warnAt(off, joinKey(path, k), "ignored for a server reached by URL")
				}
			}
		}
	default:
		l.errorf(n, path, `expected exactly one of "command", "url" or "httpUrl", found %s`, quoteList(transports))
	}
	return s
}

// prefix checks a "prefix": a string of the characters the MCP tool-name
// rule allows, at most MaxPrefixLen long ("" is allowed: the upstream's own
// names). It returns nil when the value is refused.
func (l *loader) prefix(n *node, path string) *string {
	v, ok := l.str(n, path)
	if !ok {
		return nil
	}
	if r, bad := mcpname.BadRune(v); bad {
		l.errorf(n, path, "prefix has %q; use letters, digits, '_', '-' and '.', as the MCP specification advises for tool names", r)
		return nil
	}
	if len(v) > MaxPrefixLen {
		l.errorf(n, path, "prefix is %d characters long, over %d", len(v), MaxPrefixLen)
		return nil
	}
	return &v
}

// warnVarRef warns about values gemini-cli would have expanded.
func (l *loader) warnVarRef(n *node, path string) {
	if varRef.MatchString(n.text) {
		l.warnAt(n.off, path, "looks like an environment variable reference; wasmhost passes values as written and does not expand variables")
	}
}

func (l *loader) checkURL(n *node, path, s string) bool {
	if strings.TrimSpace(s) == "" {
		l.errorf(n, path, "must not be empty")
		return false
	}
	u, err := url.Parse(s)
	if err != nil {
		// url.Error's message quotes the whole URL, which may hold a
		// secret; report only the reason.
		reason := err.Error()
		var ue *url.Error
		if errors.As(err, &ue) {
			reason = ue.Err.Error()
		}
		l.errorf(n, path, "expected an absolute http or https URL: %s", reason)
		return false
	}
	switch {
	case u.Scheme == "":
		l.errorf(n, path, "expected an absolute http or https URL, got a relative one")
	case u.Scheme != "http" && u.Scheme != "https":
		l.errorf(n, path, "expected an http or https URL, got scheme %q", u.Scheme)
	case u.Host == "":
		l.errorf(n, path, "expected an http or https URL with a host")
	default:
		return true
	}
	return false
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
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

func (l *loader) admin(n *node) *Admin {
	const path = "admin"
	if n.kind != kindObject {
		l.errorf(n, path, "expected an object, got %s", n.kind)
		return nil
	}
	var sources []member
	for _, m := range n.members {
		switch m.key {
		case "token", "tokenFile", "tokenEnv":
			sources = append(sources, m)
		default:
			l.unknownKey(m.keyOff, joinKey(path, m.key), m.key, tokenKeys)
		}
	}
	tok, src, ok := l.token(n, path, sources, "the admin API")
	if !ok {
		return nil
	}
	return &Admin{Token: tok, TokenSource: src}
}

// sessionName is the allowed form of a session name.
var sessionName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

func (l *loader) sessions(cfg *Config, n *node) {
	const path = "sessions"
	if n.kind != kindObject {
		l.errorf(n, path, "expected an object, got %s", n.kind)
		return
	}
	for _, m := range n.members {
		p := joinKey(path, m.key)
		switch {
		case m.key == "":
			l.errorAt(m.keyOff, p, "session name must not be empty")
			continue
		case !sessionName.MatchString(m.key):
			l.errorAt(m.keyOff, p, "session name may only contain letters, digits, '.', '_' and '-'")
			continue
		case m.key == "." || m.key == "..":
			l.errorAt(m.keyOff, p, "session name must not be %q", m.key)
			continue
		}
		l.session = m.key
		if s := l.parseSession(cfg, m.key, m.val, p); s != nil {
			cfg.Sessions[m.key] = s
		}
		l.session = ""
	}
}

func (l *loader) parseSession(cfg *Config, name string, n *node, path string) *Session {
	if n.kind != kindObject {
		l.errorf(n, path, "expected an object, got %s", n.kind)
		return nil
	}
	s := &Session{Name: name, servers: cfg.Servers}
	var sources []member
	var serversN, overridesN *node
	for _, m := range n.members {
		p := joinKey(path, m.key)
		switch m.key {
		case "token", "tokenFile", "tokenEnv":
			sources = append(sources, m)
		case "servers":
			serversN = m.val
		case "overrides":
			overridesN = m.val
		case "description":
			s.Description, _ = l.str(m.val, p)
		case "names":
			if v, ok := l.str(m.val, p); ok {
				switch v {
				case NamesAuto, NamesPrefixed, NamesBare:
					s.Names = v
				default:
					l.errorf(m.val, p, "expected %q, %q or %q, got %q", NamesAuto, NamesPrefixed, NamesBare, v)
				}
			}
		default:
			l.unknownKey(m.keyOff, p, m.key, sessionKeys)
		}
	}
	if s.Names == "" {
		s.Names = NamesAuto
	}
	s.Token, s.TokenSource, _ = l.token(n, path, sources, fmt.Sprintf("session %q", name))

	if serversN != nil {
		p := joinKey(path, "servers")
		if list, ok := l.strList(serversN, p); ok {
			s.Servers = list
			seen := make(map[string]bool)
			for i, name := range list {
				e, ep := serversN.elems[i], joinIndex(p, i)
				switch {
				case !l.known[name]:
					l.errorf(e, ep, "no server named %q in mcpServers", name)
				case seen[name]:
					l.errorf(e, ep, "server %q is listed twice", name)
				}
				seen[name] = true
			}
		}
	}
	if overridesN != nil {
		s.Overrides = l.overrides(s, overridesN, joinKey(path, "overrides"))
	}

	// Warn about settings that will have no effect.
	if s.Servers != nil {
		for i, name := range s.Servers {
			if !s.enabled(name) && cfg.Servers[name] != nil {
				l.warnAt(serversN.elems[i].off, joinIndex(joinKey(path, "servers"), i), "server %q is disabled", name)
			}
		}
		if overridesN != nil && overridesN.kind == kindObject {
			for _, m := range overridesN.members {
				if l.known[m.key] && !s.listed(m.key) {
					l.warnAt(m.keyOff, joinKey(joinKey(path, "overrides"), m.key), "the session does not use this server (see %q), so the override has no effect", joinKey(path, "servers"))
				}
			}
		}
	}
	return s
}

func (l *loader) overrides(s *Session, n *node, path string) map[string]Override {
	if n.kind != kindObject {
		l.errorf(n, path, "expected an object, got %s", n.kind)
		return nil
	}
	out := make(map[string]Override, len(n.members))
	for _, m := range n.members {
		p := joinKey(path, m.key)
		if !l.known[m.key] {
			l.errorAt(m.keyOff, p, "no server named %q in mcpServers", m.key)
		}
		if o, ok := l.override(m.val, p); ok {
			out[m.key] = o
		}
	}
	return out
}

func (l *loader) override(n *node, path string) (Override, bool) {
	var o Override
	if n.kind != kindObject {
		l.errorf(n, path, "expected an object, got %s", n.kind)
		return o, false
	}
	for _, m := range n.members {
		p := joinKey(path, m.key)
		if l.metadata(m.key, m.val, p, &o.Settings) {
			continue
		}
		switch {
		case m.key == "disabled":
			if b, ok := l.boolean(m.val, p); ok {
				o.Disabled = &b
			}
		case m.key == "prefix":
			o.Prefix = l.prefix(m.val, p)
		case m.key == "instructions":
			if b, ok := l.boolean(m.val, p); ok {
				o.Instructions = &b
			}
		case transportKeys[m.key]:
			l.errorAt(m.keyOff, p, "a session override may only set trust, includeTools, excludeTools, alwaysLoadTools, disabled, prefix and instructions; transport settings are shared by all sessions")
		case l.extra[m.key]:
			if o.Settings.Extra == nil {
				o.Settings.Extra = make(map[string]json.RawMessage)
			}
			o.Settings.Extra[m.key] = l.raw(m.val)
		default:
			l.inSettings = true
			l.unknownKey(m.keyOff, p, m.key, l.withExtra(overrideKeys))
			l.inSettings = false
		}
	}
	return o, true
}

// minTokenLen is the length below which a token draws a warning.
const minTokenLen = 16

// token resolves the one token source among sources (members named token,
// tokenFile or tokenEnv of the object n at path). owner names who uses the
// token, for the duplicate-token check. The token's value never appears in
// an error or warning.
func (l *loader) token(n *node, path string, sources []member, owner string) (tok, src string, ok bool) {
	switch len(sources) {
	case 0:
		l.errorf(n, path, `expected exactly one of "token", "tokenFile" or "tokenEnv", found none`)
		return "", "", false
	case 1:
	default:
		keys := make([]string, len(sources))
		for i, m := range sources {
			keys[i] = m.key
			l.str(m.val, joinKey(path, m.key)) // still report type errors
		}
		l.errorf(n, path, `expected exactly one of "token", "tokenFile" or "tokenEnv", found %s`, quoteList(keys))
		return "", "", false
	}
	m := sources[0]
	p := joinKey(path, m.key)
	v, ok := l.str(m.val, p)
	if !ok {
		return "", "", false
	}
	switch m.key {
	case "token":
		tok, src = strings.TrimSpace(v), "token"
		if tok == "" {
			l.errorf(m.val, p, "must not be empty")
			return "", "", false
		}
	case "tokenFile":
		if v == "" {
			l.errorf(m.val, p, "must not be empty")
			return "", "", false
		}
		file := l.resolve(v)
		data, err := l.readFile(file)
		if err != nil {
			reason := err.Error()
			var pe *fs.PathError
			if errors.As(err, &pe) {
				reason = pe.Err.Error()
			}
			l.errorf(m.val, p, "cannot read token file %q: %s", file, reason)
			return "", "", false
		}
		tok, src = strings.TrimSpace(string(data)), "tokenFile "+file
		if tok == "" {
			l.errorf(m.val, p, "token file %q is empty", file)
			return "", "", false
		}
	case "tokenEnv":
		if v == "" {
			l.errorf(m.val, p, "must not be empty")
			return "", "", false
		}
		if !envName(v) {
			// Not quoted: a value that is no variable name may be the
			// token itself, written under the wrong key.
			l.errorf(m.val, p, `not an environment variable name (letters, digits and "_"); a token is given under "token"`)
			return "", "", false
		}
		val, set := l.lookupEnv(v)
		if !set {
			l.errorf(m.val, p, "environment variable %q is not set", v)
			return "", "", false
		}
		tok, src = strings.TrimSpace(val), "tokenEnv "+v
		if tok == "" {
			l.errorf(m.val, p, "environment variable %q is empty", v)
			return "", "", false
		}
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] <= ' ' || tok[i] >= 0x7f {
			l.errorf(m.val, p, "the token must be printable ASCII without spaces")
			return "", "", false
		}
	}
	if other, dup := l.tokens[tok]; dup {
		l.errorf(m.val, p, "the same token is used by %s; every session and the admin API need their own token", other)
		return "", "", false
	}
	l.tokens[tok] = owner
	if len(tok) < minTokenLen {
		l.warnAt(m.val.off, p, "the token is shorter than %d characters; use a long random token", minTokenLen)
	}
	return tok, src, true
}

// envName reports whether v is a POSIX environment variable name: letters,
// digits and '_', not starting with a digit.
func envName(v string) bool {
	for i, c := range v {
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return v != ""
}
