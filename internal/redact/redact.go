// Package redact keeps the secrets of a config (API keys in URL queries,
// URL passwords, header values, session tokens) out of what wasmhost
// prints: log lines, admin API answers and the errors MCP clients get.
//
// Errors from the libraries below wasmhost quote upstream URLs whole:
// net/http's `Post "https://host/mcp?api_key=...": ...`, wrapped by the
// go-sdk, sometimes with %v so that no error chain leads back to it. So the
// secrets are replaced wherever they appear in the text, as the config
// spelled them and as JSON escapes them. It reads config's types and
// touches only the text, handlers and writers it is given.
package redact

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/wasmhost/wasmhost/config"
)

// Mask replaces a secret in redacted text.
const Mask = "[redacted]"

// minSecret is the length below which a single value (a header value, a
// query parameter, a password) is not treated as a secret: replacing every
// "1" or "yes" in a log line would make it unreadable, and values that
// short protect nothing.
const minSecret = 6

// A Set is the secrets seen in the configs a process has loaded. Secrets
// are only ever added: an error about a connection made under an older
// config may still be printed after a reload. A Set is safe for concurrent
// use; its zero value is empty and ready.
type Set struct {
	mu      sync.Mutex
	secrets map[string]struct{}

	r atomic.Pointer[strings.Replacer] // nil while the set is empty
}

// AddConfig adds the secrets of every server of cfg and the tokens of its
// sessions and admin API.
func (s *Set) AddConfig(cfg *config.Config) {
	if cfg == nil {
		return
	}
	var secrets []string
	for _, srv := range cfg.Servers {
		secrets = append(secrets, ServerSecrets(srv)...)
	}
	for _, sess := range cfg.Sessions {
		if sess != nil {
			secrets = append(secrets, sess.Token)
		}
	}
	if cfg.Admin != nil {
		secrets = append(secrets, cfg.Admin.Token)
	}
	s.Add(secrets...)
}

// ServerSecrets returns the secrets of one server entry: the query of its
// URL (whole and each value), the password of its URL and its header
// values.
func ServerSecrets(srv *config.Server) []string {
	if srv == nil {
		return nil
	}
	var out []string
	for _, raw := range []string{srv.URL, srv.HTTPURL} {
		out = append(out, urlSecrets(raw)...)
	}
	for _, v := range srv.Headers {
		out = append(out, v)
		// "Bearer <token>": the token alone may be printed too.
		if _, tok, ok := strings.Cut(v, " "); ok {
			out = append(out, tok)
		}
	}
	return out
}

// urlSecrets returns the query (whole, raw and decoded, and each value) and
// the password of the URL raw.
func urlSecrets(raw string) []string {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		// Not a URL the transports could use either; still keep what
		// follows a "?" out of messages.
		if _, q, ok := strings.Cut(raw, "?"); ok {
			return []string{q}
		}
		return nil
	}
	var out []string
	if u.RawQuery != "" {
		out = append(out, u.RawQuery)
		if q, err := url.QueryUnescape(u.RawQuery); err == nil {
			out = append(out, q)
		}
		for _, vs := range u.Query() {
			out = append(out, vs...)
		}
	}
	if p, ok := u.User.Password(); ok {
		out = append(out, p, url.QueryEscape(p), url.PathEscape(p))
	}
	return out
}

// Add adds secrets; those shorter than a few bytes are left out.
func (s *Set) Add(secrets ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	added := false
	for _, v := range secrets {
		if len(v) < minSecret {
			continue
		}
		if s.secrets == nil {
			s.secrets = make(map[string]struct{})
		}
		for _, form := range []string{v, jsonEscaped(v)} {
			if _, ok := s.secrets[form]; !ok {
				s.secrets[form] = struct{}{}
				added = true
			}
		}
	}
	if !added {
		return
	}
	// Longest first: a secret that contains another is replaced whole.
	all := slices.Collect(maps.Keys(s.secrets))
	slices.SortFunc(all, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	pairs := make([]string, 0, 2*len(all))
	for _, v := range all {
		pairs = append(pairs, v, Mask)
	}
	s.r.Store(strings.NewReplacer(pairs...))
}

// jsonEscaped returns v as encoding/json writes it inside a string (with
// HTML escaping, as json.Marshal and json.Encoder do by default).
func jsonEscaped(v string) string {
	b, _ := json.Marshal(v)
	return string(b[1 : len(b)-1])
}

// String returns text with every secret replaced by Mask.
func (s *Set) String(text string) string {
	if s == nil {
		return text
	}
	if r := s.r.Load(); r != nil {
		return r.Replace(text)
	}
	return text
}

// Write writes b to w with every secret replaced by Mask, as String
// would, piece by piece rather than from a redacted copy of the whole: an
// answer of the admin API can be megabytes long. (It still makes one copy
// of b, as a string.)
func (s *Set) Write(w io.Writer, b []byte) (int, error) {
	if s != nil {
		if r := s.r.Load(); r != nil {
			return r.WriteString(w, string(b))
		}
	}
	return w.Write(b)
}

// Bytes is String for a byte slice; it returns b itself when nothing in it
// is secret.
func (s *Set) Bytes(b []byte) []byte {
	if s == nil || s.r.Load() == nil {
		return b
	}
	out := s.String(string(b))
	if out == string(b) {
		return b
	}
	return []byte(out)
}

// Error returns err with its text redacted: an error that prints without
// the secrets and still unwraps to err, so errors.Is and errors.As see what
// they saw before. It returns err itself when its text has no secret.
func (s *Set) Error(err error) error {
	if err == nil || s == nil || s.r.Load() == nil {
		return err
	}
	text := err.Error()
	if red := s.String(text); red != text {
		return &redacted{err: err, text: red}
	}
	return err
}

// redacted is an error whose text had secrets replaced.
type redacted struct {
	err  error
	text string
}

func (r *redacted) Error() string { return r.text }
func (r *redacted) Unwrap() error { return r.err }

// Handler returns a slog.Handler that redacts each record's message and
// attributes (strings, errors, anything else by its text) before h sees
// them.
func (s *Set) Handler(h slog.Handler) slog.Handler {
	return &handler{set: s, next: h}
}

type handler struct {
	set  *Set
	next slog.Handler
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if h.set.r.Load() == nil {
		return h.next.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, h.set.String(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.set.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = h.set.attr(a)
	}
	return &handler{set: h.set, next: h.next.WithAttrs(red)}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{set: h.set, next: h.next.WithGroup(name)}
}

// attr returns a with its value redacted.
func (s *Set) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, s.String(v.String()))
	case slog.KindGroup:
		group := v.Group()
		red := make([]slog.Attr, len(group))
		for i, g := range group {
			red[i] = s.attr(g)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(red...)}
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.Any(a.Key, s.Error(err))
		}
		text := v.String()
		if red := s.String(text); red != text {
			return slog.String(a.Key, red)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
