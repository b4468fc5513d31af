package config

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"
)

// The values of a session's "names" (see the package documentation).
const (
	NamesAuto     = "auto"
	NamesPrefixed = "prefixed"
	NamesBare     = "bare"
)

// MaxPrefixLen bounds a server's "prefix", leaving room in the 64
// characters clients allow a tool name.
const MaxPrefixLen = 32

// DefaultListen is the address the daemon listens on when the config file
// has no "listen" key: loopback only, on a fixed port so that session URLs
// stay the same from one run to the next.
const DefaultListen = "127.0.0.1:8750"

// Default policy limits, used when the policy block leaves them out. They
// are the ABI's defaults (abi.DefaultMemoryLimitBytes,
// abi.DefaultCallTimeoutMillis), written out so that config stays plain
// data that imports no other layer; TestDefaultsAreTheABIs keeps them equal.
const (
	DefaultPolicyMemoryMiB = 256
	DefaultPolicyTimeout   = 2000 * time.Millisecond
)

// Bounds the loader enforces on numeric settings.
const (
	// MaxPolicyMemoryMiB is the whole 32-bit wasm address space.
	MaxPolicyMemoryMiB = 4096
	// MaxPolicyTimeoutMs bounds policy.timeoutMs (ten minutes).
	MaxPolicyTimeoutMs = 10 * 60 * 1000
	// MaxPolicyCompileTimeoutMs bounds policy.compileTimeoutMs (an hour).
	MaxPolicyCompileTimeoutMs = 60 * 60 * 1000
	// MaxServerTimeoutMs bounds a server's "timeout" (thirty days).
	MaxServerTimeoutMs = 30 * 24 * 60 * 60 * 1000
	// MaxListingBytes bounds a server's "maxListingBytes" (4 GiB).
	MaxListingBytes = 4 << 30
)

// A Config is one loaded config file. Load and Parse return a Config that is
// fully validated; treat it as read-only and load a new one to change it.
type Config struct {
	// File is the name the config was loaded from, as given to Load or Parse.
	File string
	// Listen is the daemon's host:port; DefaultListen when not configured.
	Listen string
	// Admin configures the admin API; nil when the file has no "admin"
	// block, which leaves the admin API disabled.
	Admin *Admin
	// Servers holds every entry of "mcpServers", disabled ones included,
	// by name.
	Servers map[string]*Server
	// Sessions holds every session by name.
	Sessions map[string]*Session
	// Policy names the policy plugin and its limits.
	Policy Policy
}

// ServerNames returns the names of all servers, sorted.
func (c *Config) ServerNames() []string { return slices.Sorted(maps.Keys(c.Servers)) }

// SessionNames returns the names of all sessions, sorted.
func (c *Config) SessionNames() []string { return slices.Sorted(maps.Keys(c.Sessions)) }

// TokenFiles returns the files the admin block and the sessions read their
// tokens from ("tokenFile", resolved), sorted and without duplicates.
func (c *Config) TokenFiles() []string { return c.tokenSources("tokenFile ") }

// TokenEnvs returns the environment variables the admin block and the
// sessions read their tokens from ("tokenEnv"), sorted and without
// duplicates. A daemon keeps them from the processes it starts.
func (c *Config) TokenEnvs() []string { return c.tokenSources("tokenEnv ") }

// tokenSources returns what follows kind in the token sources of the admin
// block and the sessions that have one of that kind, sorted and without
// duplicates.
func (c *Config) tokenSources(kind string) []string {
	var out []string
	add := func(source string) {
		if v, ok := strings.CutPrefix(source, kind); ok {
			out = append(out, v)
		}
	}
	if c.Admin != nil {
		add(c.Admin.TokenSource)
	}
	for _, s := range c.Sessions {
		add(s.TokenSource)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// A Settings holds the session metadata settings of a server entry or of a
// session override, as raw JSON values exactly as written in the file
// (whitespace removed): wasmhost's four, and the keys the policy plugin
// owns (Extra). A nil field means the key is absent; a key written as null
// holds the bytes `null`. The four are type-checked by the loader, but
// their meaning is the policy plugin's business.
type Settings struct {
	Trust           json.RawMessage
	AlwaysLoadTools json.RawMessage
	IncludeTools    json.RawMessage
	ExcludeTools    json.RawMessage
	// Extra holds the raw values of the keys the loader was told to accept
	// besides its own (Options.ServerKeys: the keys the policy plugin
	// declares in its handshake), unchecked; nil when there are none.
	Extra map[string]json.RawMessage
}

// JSON returns a fresh JSON object holding the keys that are present, in
// the order trust, alwaysLoadTools, includeTools, excludeTools, then the
// Extra keys sorted; `{}` when none is. This is the settings object the
// policy plugin canonicalizes and projects with, so a change of any of
// them is a change of metadata, never of transport.
func (s Settings) JSON() json.RawMessage {
	if len(s.Extra) > 0 {
		return s.jsonWithExtra()
	}
	n := 2
	for _, f := range s.fields() {
		if f.v != nil {
			n += len(f.key) + len(f.v) + 1
		}
	}
	// One allocation: a reload builds one per (session, server).
	return s.appendJSON(make([]byte, 0, n))
}

// A settingField is one of the four settings, with its JSON key and colon.
type settingField struct {
	key string
	v   json.RawMessage
}

// fields is s's four settings in JSON's order.
func (s Settings) fields() [4]settingField {
	return [4]settingField{
		{`"trust":`, s.Trust},
		{`"alwaysLoadTools":`, s.AlwaysLoadTools},
		{`"includeTools":`, s.IncludeTools},
		{`"excludeTools":`, s.ExcludeTools},
	}
}

// appendJSON appends JSON's object to b; s has no Extra keys.
func (s Settings) appendJSON(b []byte) []byte {
	start := len(b)
	b = append(b, '{')
	for _, f := range s.fields() {
		if f.v == nil {
			continue
		}
		if len(b) > start+1 {
			b = append(b, ',')
		}
		b = append(append(b, f.key...), f.v...)
	}
	return append(b, '}')
}

// jsonWithExtra is JSON for settings with Extra keys.
func (s Settings) jsonWithExtra() json.RawMessage {
	four := s
	four.Extra = nil
	b := bytes.Clone(four.JSON())
	b = b[:len(b)-1]
	for _, k := range slices.Sorted(maps.Keys(s.Extra)) {
		if len(b) > 1 {
			b = append(b, ',')
		}
		key, _ := json.Marshal(k) // a string always marshals
		b = append(append(append(b, key...), ':'), s.Extra[k]...)
	}
	return append(b, '}')
}

// Clone returns a deep copy of s.
func (s Settings) Clone() Settings {
	c := Settings{
		Trust:           bytes.Clone(s.Trust),
		AlwaysLoadTools: bytes.Clone(s.AlwaysLoadTools),
		IncludeTools:    bytes.Clone(s.IncludeTools),
		ExcludeTools:    bytes.Clone(s.ExcludeTools),
	}
	if s.Extra != nil {
		c.Extra = make(map[string]json.RawMessage, len(s.Extra))
		for k, v := range s.Extra {
			c.Extra[k] = bytes.Clone(v)
		}
	}
	return c
}

// with returns s with each setting that o has replaced by o's, sharing
// their bytes.
func (s Settings) with(o Settings) Settings {
	if o.Trust != nil {
		s.Trust = o.Trust
	}
	if o.AlwaysLoadTools != nil {
		s.AlwaysLoadTools = o.AlwaysLoadTools
	}
	if o.IncludeTools != nil {
		s.IncludeTools = o.IncludeTools
	}
	if o.ExcludeTools != nil {
		s.ExcludeTools = o.ExcludeTools
	}
	if len(o.Extra) > 0 {
		merged := make(map[string]json.RawMessage, len(s.Extra)+len(o.Extra))
		maps.Copy(merged, s.Extra)
		maps.Copy(merged, o.Extra)
		s.Extra = merged
	}
	return s
}

// A Server is one entry of "mcpServers". Exactly one of Command, URL and
// HTTPURL is set.
type Server struct {
	// Name is the entry's key in "mcpServers".
	Name string
	// Command, Args, Env and Cwd describe a server started as a process
	// and spoken to over stdio. Cwd, when relative in the file, is resolved
	// against the config file's directory.
	Command string
	Args    []string
	Env     map[string]string
	Cwd     string
	// URL is the server's SSE/streamable endpoint ("url" in the file).
	URL string
	// HTTPURL is the server's streamable HTTP endpoint ("httpUrl").
	HTTPURL string
	// Headers are sent with every HTTP request to URL or HTTPURL.
	Headers map[string]string
	// Timeout bounds each request to the server; 0 means the transport's
	// default.
	Timeout time.Duration
	// Pooled is true (the default) when sessions share one connection.
	Pooled bool
	// NoBridgeInference is true when the entry says "bridgeInference":
	// false: a request the server sends on its own then never goes to a
	// client on the inference that it is the one client with calls in
	// flight on the connection (see docs/protocol.md, "Requests an
	// upstream sends on its own"). It belongs to the transport, so sessions cannot
	// override it.
	NoBridgeInference bool
	// ProtocolVersion is the MCP protocol version wasmhost's client asks
	// the server for ("protocolVersion"), one of
	// mcp.SupportedProtocolVersions; empty means the go-sdk's choice: the
	// newest version, falling back to the legacy initialize handshake
	// with servers that do not speak it. It belongs to the transport, so
	// sessions cannot override it.
	ProtocolVersion string
	// MaxListingBytes caps the bytes of each of the server's listings
	// (tools, prompts, resources, resource templates; all pages of one
	// together), "maxListingBytes"; 0 means the pool's default, 32 MiB.
	// A server past it fails with a reason naming the cap.
	MaxListingBytes int64
	// Disabled servers are never started. After Session.Effective it is
	// the session's effective value.
	Disabled bool
	// Description is free text shown to operators.
	Description string
	// Settings holds the raw session metadata settings, the plugin's own
	// keys (Options.ServerKeys) in Settings.Extra.
	Settings Settings
	// Prefix, when not nil, is the prefix the server's tool and prompt
	// names always get in a session ("prefix"; "" means the upstream's own
	// names), whatever the session's Names says. A session override may
	// replace it.
	Prefix *string
	// Instructions is whether the server's instructions (from its
	// initialize result) reach the clients of the sessions that use it
	// ("instructions", default false). A session override may replace it.
	Instructions bool
}

// Metadata returns the server's metadata settings as a fresh raw JSON object
// holding only the keys that are present (see Settings.JSON). This is what
// the policy plugin canonicalizes.
func (s *Server) Metadata() json.RawMessage { return s.Settings.JSON() }

// Transport names how the server is reached: "stdio", "url" or "httpUrl".
func (s *Server) Transport() string {
	switch {
	case s.Command != "":
		return "stdio"
	case s.HTTPURL != "":
		return "httpUrl"
	case s.URL != "":
		return "url"
	}
	return ""
}

// Clone returns a deep copy of s; nil for nil.
func (s *Server) Clone() *Server {
	if s == nil {
		return nil
	}
	c := *s
	c.Args = slices.Clone(s.Args)
	c.Env = maps.Clone(s.Env)
	c.Headers = maps.Clone(s.Headers)
	c.Settings = s.Settings.Clone()
	if s.Prefix != nil {
		p := *s.Prefix
		c.Prefix = &p
	}
	return &c
}

// String describes the server without argument, environment or header
// values, which often hold secrets.
func (s Server) String() string {
	return fmt.Sprintf("server %q (%s)", s.Name, s.Transport())
}

// GoString is like String; it keeps %#v from printing secrets.
func (s Server) GoString() string { return s.String() }

// LogValue implements slog.LogValuer. Environment and header values are left
// out (only their names are logged), as are arguments; URLs have their
// password masked.
func (s Server) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("name", s.Name),
		slog.String("transport", s.Transport()),
	}
	if s.Command != "" {
		attrs = append(attrs, slog.String("command", s.Command), slog.Int("args", len(s.Args)))
	}
	for _, u := range []struct{ key, val string }{{"url", s.URL}, {"httpUrl", s.HTTPURL}} {
		if u.val == "" {
			continue
		}
		if pu, err := url.Parse(u.val); err == nil {
			pu.RawQuery = ""
			attrs = append(attrs, slog.String(u.key, pu.Redacted()))
		}
	}
	if len(s.Env) > 0 {
		attrs = append(attrs, slog.Any("env", slices.Sorted(maps.Keys(s.Env))))
	}
	if len(s.Headers) > 0 {
		attrs = append(attrs, slog.Any("headers", slices.Sorted(maps.Keys(s.Headers))))
	}
	if s.ProtocolVersion != "" {
		attrs = append(attrs, slog.String("protocolVersion", s.ProtocolVersion))
	}
	attrs = append(attrs, slog.Bool("pooled", s.Pooled), slog.Bool("disabled", s.Disabled))
	return slog.GroupValue(attrs...)
}

// An Override is one session's change to one server: each metadata setting
// it holds replaces the server's (a key written as null replaces it with
// null), and Disabled, when set, replaces the server's Disabled. Lists are
// replaced whole, never merged. Transport fields cannot be overridden.
type Override struct {
	Settings Settings
	Disabled *bool
	// Prefix and Instructions, when set, replace the server's (see
	// Session.Prefix and Session.Instructions).
	Prefix       *string
	Instructions *bool
}

// Layer returns a server's metadata settings and Disabled flag as a
// session with override o sees them: each setting o holds replaces the
// server's, sharing its bytes, and o.Disabled, when set, replaces
// disabled. It is the rule Session.Effective applies, for callers that
// keep their own copies of a server's settings and a session's overrides.
func (o Override) Layer(settings Settings, disabled bool) (Settings, bool) {
	if o.Disabled != nil {
		disabled = *o.Disabled
	}
	return settings.with(o.Settings), disabled
}

// A Session is one entry of "sessions": a client-facing endpoint with its
// own bearer token and its own view of the servers.
type Session struct {
	// Name is the session's key in "sessions"; it matches [A-Za-z0-9._-]+
	// and is neither "." nor "..", so it can be used as a URL path segment.
	Name string
	// Description is free text shown to operators.
	Description string
	// Token is the resolved bearer token. It is never printed or logged by
	// this package; compare it with TokenMatches.
	Token string `json:"-"`
	// TokenSource says where the token came from, without its value:
	// "token", "tokenFile <path>" or "tokenEnv <NAME>".
	TokenSource string
	// Servers lists the servers the session uses, as written in the file;
	// nil means every server. Use Enabled for the effective list.
	Servers []string
	// Overrides holds the session's overrides by server name.
	Overrides map[string]Override
	// Names is how the session names its servers' tools and prompts
	// ("names"): NamesAuto (the default), NamesPrefixed or NamesBare.
	Names string

	servers map[string]*Server // the config's servers, for Effective
}

// Effective returns the server entry named server as this session sees it:
// a fresh copy of the base entry with the session's override applied (so
// srv.Disabled is the effective value), its effective metadata settings as
// a raw JSON object (equal to srv.Metadata()), and whether the session
// uses the server: it is listed in Servers (or Servers is nil) and is not
// disabled. For an unknown server it returns nil, nil, false; so does a
// Session not made by Load or Parse, which knows no servers.
func (s *Session) Effective(server string) (srv *Server, settings json.RawMessage, enabled bool) {
	base, ok := s.servers[server]
	if !ok {
		return nil, nil, false
	}
	seen := *base // shallow: Clone below copies it, overridden settings included
	seen.Settings, seen.Disabled = s.overridden(server, base)
	srv = seen.Clone()
	return srv, srv.Metadata(), s.listed(server) && !srv.Disabled
}

// EffectiveSettings is Effective without the copy of the server entry:
// the settings object the session's policy sees for server, and whether
// the session uses it. A reload asks for every (session, server) pair, and
// only the transport fields, shared by all sessions, need the copy.
func (s *Session) EffectiveSettings(server string) (settings json.RawMessage, enabled bool) {
	base, ok := s.servers[server]
	if !ok {
		return nil, false
	}
	set, disabled := s.overridden(server, base)
	return set.JSON(), s.listed(server) && !disabled // JSON copies the bytes
}

// AppendEffectiveSettings is EffectiveSettings appending the settings
// object to b instead of returning a fresh one (b is returned as it is
// when the server is unknown), for a caller that compares many with the
// settings it holds and keeps few.
func (s *Session) AppendEffectiveSettings(b []byte, server string) (_ []byte, enabled bool) {
	base, ok := s.servers[server]
	if !ok {
		return b, false
	}
	set, disabled := s.overridden(server, base)
	if len(set.Extra) > 0 {
		b = append(b, set.jsonWithExtra()...)
	} else {
		b = set.appendJSON(b)
	}
	return b, s.listed(server) && !disabled
}

// overridden applies the session's override for server to base's settings
// and disabled flag. The returned Settings share their bytes with base's
// and the override's.
func (s *Session) overridden(server string, base *Server) (Settings, bool) {
	if o, ok := s.Overrides[server]; ok {
		return o.Layer(base.Settings, base.Disabled)
	}
	return base.Settings, base.Disabled
}

// Prefix returns the fixed prefix the session gives server's tool and
// prompt names, its override's "prefix" or else the server's, and whether
// there is one; without one, the session's Names applies.
func (s *Session) Prefix(server string) (string, bool) {
	if o, ok := s.Overrides[server]; ok && o.Prefix != nil {
		return *o.Prefix, true
	}
	if base := s.servers[server]; base != nil && base.Prefix != nil {
		return *base.Prefix, true
	}
	return "", false
}

// Instructions reports whether server's instructions reach the session's
// clients: its override's "instructions", or else the server's.
func (s *Session) Instructions(server string) bool {
	if o, ok := s.Overrides[server]; ok && o.Instructions != nil {
		return *o.Instructions
	}
	base := s.servers[server]
	return base != nil && base.Instructions
}

// Uses reports whether the session uses server unless the server is
// disabled for it: the config has a server of that name and the session's
// server list names it (or the session lists none). The enabled result of
// Effective is Uses and not the effective Disabled (see Override.Layer).
func (s *Session) Uses(server string) bool {
	_, ok := s.servers[server]
	return ok && s.listed(server)
}

// listed reports whether server is in the session's server list.
func (s *Session) listed(server string) bool {
	return s.Servers == nil || slices.Contains(s.Servers, server)
}

// enabled is the enabled result of Effective, without building the entry
// or its settings.
func (s *Session) enabled(server string) bool {
	base, ok := s.servers[server]
	if !ok {
		return false
	}
	_, disabled := s.overridden(server, base)
	return s.listed(server) && !disabled
}

// Enabled returns, sorted, the names of the servers for which Effective
// reports enabled.
func (s *Session) Enabled() []string {
	var names []string
	for _, name := range slices.Sorted(maps.Keys(s.servers)) {
		if s.enabled(name) {
			names = append(names, name)
		}
	}
	return names
}

// TokenMatches reports, in constant time, whether bearer is the session's
// token. It is false when the session has no token.
func (s *Session) TokenMatches(bearer string) bool { return tokenMatches(s.Token, bearer) }

// String describes the session without its token.
func (s Session) String() string {
	return fmt.Sprintf("session %q (%s)", s.Name, tokenFrom(s.TokenSource))
}

// GoString is like String; it keeps %#v from printing the token.
func (s Session) GoString() string { return s.String() }

// LogValue implements slog.LogValuer; the token is never part of it.
func (s Session) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("name", s.Name),
		slog.String("token", "REDACTED"),
		slog.String("tokenSource", s.TokenSource),
		slog.Any("servers", s.Enabled()),
		slog.Int("overrides", len(s.Overrides)),
	)
}

// An Admin configures the admin API.
type Admin struct {
	// Token is the resolved admin bearer token; never printed or logged by
	// this package.
	Token string `json:"-"`
	// TokenSource says where the token came from, as in Session.
	TokenSource string
}

// TokenMatches reports, in constant time, whether bearer is the admin token.
func (a *Admin) TokenMatches(bearer string) bool { return tokenMatches(a.Token, bearer) }

// String describes the admin block without its token.
func (a Admin) String() string { return fmt.Sprintf("admin (%s)", tokenFrom(a.TokenSource)) }

// tokenFrom says where a token came from, for String: "token in the config
// file" for one written inline, "token from tokenEnv NAME" otherwise.
func tokenFrom(source string) string {
	if source == "token" {
		return "token in the config file"
	}
	return "token from " + source
}

// GoString is like String.
func (a Admin) GoString() string { return a.String() }

// LogValue implements slog.LogValuer; the token is never part of it.
func (a Admin) LogValue() slog.Value {
	return slog.GroupValue(slog.String("token", "REDACTED"), slog.String("tokenSource", a.TokenSource))
}

func tokenMatches(want, got string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

// A Policy names the policy plugin and its limits.
type Policy struct {
	// Path is the plugin file; "" means the embedded default policy. When
	// relative in the file it is resolved against the config file's
	// directory.
	Path string
	// SHA256 is the pinned digest in lower-case hex; "" means no pin.
	SHA256 string
	// MemoryMiB caps each plugin instance's memory.
	MemoryMiB int
	// Timeout bounds one plugin call.
	Timeout time.Duration
	// CompileTimeout bounds compiling the plugin at load, past the
	// module limits checked before compiling; 0 means the host's default
	// (host.DefaultCompileTimeout).
	CompileTimeout time.Duration
	// Config is the plugin-wide configuration ("config"), any JSON value,
	// compacted; nil when absent. The plugin gets it as the input of its
	// handshake (abi/SPEC.md section 3). It may hold secrets: show it only
	// through RedactedConfig.
	Config json.RawMessage
}

// Equal reports whether p and o name the same plugin with the same limits
// and configuration.
func (p Policy) Equal(o Policy) bool {
	return p.Path == o.Path && p.SHA256 == o.SHA256 && p.MemoryMiB == o.MemoryMiB &&
		p.Timeout == o.Timeout && p.CompileTimeout == o.CompileTimeout && bytes.Equal(p.Config, o.Config) && (p.Config == nil) == (o.Config == nil)
}

// LogValue implements slog.LogValuer: the configuration is logged
// redacted (see RedactedConfig).
func (p Policy) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("path", p.Path), slog.String("sha256", p.SHA256),
		slog.Int("memoryMiB", p.MemoryMiB), slog.Duration("timeout", p.Timeout)}
	if p.Config != nil {
		attrs = append(attrs, slog.String("config", string(p.RedactedConfig())))
	}
	return slog.GroupValue(attrs...)
}

// RedactedConfig returns Config with every string, number and boolean
// replaced by the string "REDACTED": the object keys, the array lengths and
// nulls stay, so an operator can see the shape that is loaded, and no
// value shows. wasmhost cannot know which values a plugin treats as
// secrets (an allow list may hold a token, a URL a password), and a guess
// by key name that misses one leaks it; so every value is hidden. The
// digest (ConfigSHA256) tells two configurations apart. nil for none.
func (p Policy) RedactedConfig() json.RawMessage {
	if p.Config == nil {
		return nil
	}
	var v any
	if err := json.Unmarshal(p.Config, &v); err != nil {
		return json.RawMessage(`"REDACTED"`)
	}
	out, err := json.Marshal(redactValue(v))
	if err != nil {
		return json.RawMessage(`"REDACTED"`)
	}
	return out
}

func redactValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = redactValue(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = redactValue(e)
		}
		return x
	case nil:
		return nil
	}
	return "REDACTED"
}

// ConfigSHA256 returns the hex SHA-256 of Config's compact bytes; "" for
// none.
func (p Policy) ConfigSHA256() string {
	if p.Config == nil {
		return ""
	}
	sum := sha256.Sum256(p.Config)
	return hex.EncodeToString(sum[:])
}

// MemoryLimitBytes returns MemoryMiB in bytes.
func (p Policy) MemoryLimitBytes() uint64 { return uint64(p.MemoryMiB) << 20 }
