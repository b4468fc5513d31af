package config

import (
	"errors"
	"io/fs"
	"strings"
)

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
