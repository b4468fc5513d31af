package config

import (
	"encoding/json"
	"fmt"
	"regexp"
)

// Transport keys of a server entry, which a session override may not name.
var transportKeys = map[string]bool{
	"command": true, "args": true, "env": true, "cwd": true, "url": true,
	"httpUrl": true, "headers": true, "timeout": true, "pooled": true,
	"protocolVersion": true, "maxListingBytes": true, "bridgeInference": true,
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
