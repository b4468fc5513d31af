package config

import (
	"encoding/json"
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/wasmhost/wasmhost/internal/mcpname"
)

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
