package pool

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A Spec is the transport identity of one upstream MCP server: everything
// that changes how the connection is made, and nothing else. The session
// metadata settings (trust, includeTools, excludeTools, alwaysLoadTools)
// and display fields such as a description are deliberately absent, so
// sessions whose entries differ only in those share one transport. Exactly
// one of Command, URL and HTTPURL is set.
type Spec struct {
	// Name is the server's name in the config. It may contain "::".
	Name string
	// Command, Args, Env and Cwd start a process spoken to over stdio.
	Command string
	Args    []string
	Env     map[string]string
	Cwd     string
	// URL and HTTPURL are MCP endpoints reached over HTTP.
	URL     string
	HTTPURL string
	// Headers are sent with every HTTP request.
	Headers map[string]string
	// Timeout bounds connecting plus discovery, and each snapshot refresh
	// or fan-out step; 0 means the pool's default. (Forwarded calls are the
	// caller's to bound, with the same value.)
	Timeout time.Duration
	// Pooled specs share one connection among all sessions with the same
	// fingerprint; an unpooled spec gets a connection per Acquire. The
	// zero value is unpooled; the config loader defaults a server
	// entry's "pooled" to true, which reconcile.SpecOf carries over.
	Pooled bool
	// ProtocolVersion is the MCP protocol version the pool's client asks
	// for (mcp.ClientSessionOptions.ProtocolVersion); empty means the
	// go-sdk's default.
	ProtocolVersion string
	// NoBridgeInference is true for a server whose entry says
	// "bridgeInference": false: a request it sends on its own reaches a
	// client only on the stream of the call that caused it (see Bridging).
	NoBridgeInference bool
	// MaxListingBytes caps the bytes of each of the server's listings
	// (tools, prompts, resources, resource templates; all pages of one
	// together); 0 means DefaultMaxListingBytes. See ListingCap.
	MaxListingBytes int64
}

// ListingCap returns the byte cap of each of s's listings: MaxListingBytes,
// or DefaultMaxListingBytes when it is 0. A listing past it fails the
// entry with an error wrapping ErrListingTooLarge.
func (s Spec) ListingCap() int64 {
	if s.MaxListingBytes > 0 {
		return s.MaxListingBytes
	}
	return DefaultMaxListingBytes
}

// Clone returns a deep copy of s: its slices and maps are not shared.
func (s Spec) Clone() Spec {
	s.Args = slices.Clone(s.Args)
	s.Env = maps.Clone(s.Env)
	s.Headers = maps.Clone(s.Headers)
	return s
}

// Transport names how the server is reached: "stdio", "url" or "httpUrl"
// ("" when none is set).
func (s Spec) Transport() string {
	switch {
	case s.Command != "":
		return "stdio"
	case s.URL != "":
		return "url"
	case s.HTTPURL != "":
		return "httpUrl"
	}
	return ""
}

// Validate reports whether s can be dialed: a name, and exactly one of
// Command, URL and HTTPURL.
func (s Spec) Validate() error {
	if s.Name == "" {
		return fmt.Errorf("%w: server name is empty", ErrInvalidSpec)
	}
	n := 0
	for _, v := range []string{s.Command, s.URL, s.HTTPURL} {
		if v != "" {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("%w: server %q: exactly one of command, url and httpUrl must be set (%d are)", ErrInvalidSpec, s.Name, n)
	}
	if s.Timeout < 0 {
		return fmt.Errorf("%w: server %q: negative timeout %v", ErrInvalidSpec, s.Name, s.Timeout)
	}
	if s.MaxListingBytes < 0 {
		return fmt.Errorf("%w: server %q: negative maxListingBytes %d", ErrInvalidSpec, s.Name, s.MaxListingBytes)
	}
	return nil
}

// fingerprintForm is the canonical encoding hashed by Fingerprint. Maps
// become lists sorted by key, nil and empty collections encode alike, and
// JSON framing keeps field boundaries unambiguous.
type fingerprintForm struct {
	Format    int         `json:"format"`
	Name      string      `json:"name"`
	Transport string      `json:"transport"`
	Command   string      `json:"command"`
	Args      []string    `json:"args"`
	Env       [][2]string `json:"env"`
	Cwd       string      `json:"cwd"`
	URL       string      `json:"url"`
	HTTPURL   string      `json:"httpUrl"`
	Headers   [][2]string `json:"headers"`
	Timeout   int64       `json:"timeoutNanos"`
	Pooled    bool        `json:"pooled"`
	// ProtocolVersion is left out when empty, so that specs without one
	// keep the fingerprints they had before it existed.
	ProtocolVersion string `json:"protocolVersion,omitempty"`
	// MaxListingBytes is left out when 0, for the same reason.
	MaxListingBytes int64 `json:"maxListingBytes,omitempty"`
	// NoBridgeInference is left out when false, for the same reason: it
	// changes what the connection announces, so it is part of identity.
	NoBridgeInference bool `json:"noBridgeInference,omitempty"`
}

func sortedPairs(m map[string]string) [][2]string {
	out := make([][2]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, [2]string{k, m[k]})
	}
	return out
}

// Fingerprint returns s's transport identity: "NAME::" followed by the hex
// SHA-256 of a canonical encoding of every field (env and headers sorted by
// key, nil and empty collections alike). Equal transports give equal
// fingerprints whatever the map order; any transport difference, including
// the Pooled flag, gives a different one. The string is opaque: the name
// prefix is there for logs and is never parsed (names may contain "::").
func (s Spec) Fingerprint() string {
	args := s.Args
	if args == nil {
		args = []string{}
	}
	b, err := json.Marshal(fingerprintForm{
		Format:    1,
		Name:      s.Name,
		Transport: s.Transport(),
		Command:   s.Command,
		Args:      args,
		Env:       sortedPairs(s.Env),
		Cwd:       s.Cwd,
		URL:       s.URL,
		HTTPURL:   s.HTTPURL,
		Headers:   sortedPairs(s.Headers),
		Timeout:   int64(s.Timeout),
		Pooled:    s.Pooled,

		ProtocolVersion:   s.ProtocolVersion,
		MaxListingBytes:   s.MaxListingBytes,
		NoBridgeInference: s.NoBridgeInference,
	})
	if err != nil {
		// Strings, string slices, ints and bools always marshal.
		panic(fmt.Sprintf("pool: fingerprint of %q: %v", s.Name, err))
	}
	sum := sha256.Sum256(b)
	return s.Name + "::" + hex.EncodeToString(sum[:])
}

// String describes the spec without argument, environment or header
// values, which often hold secrets.
func (s Spec) String() string {
	switch s.Transport() {
	case "stdio":
		return fmt.Sprintf("%s (stdio %s, %d args, env %v, pooled %t)", s.Name, s.Command, len(s.Args), slices.Sorted(maps.Keys(s.Env)), s.Pooled)
	case "":
		return fmt.Sprintf("%s (no transport)", s.Name)
	}
	u := s.URL
	if u == "" {
		u = s.HTTPURL
	}
	return fmt.Sprintf("%s (%s %s, headers %v, pooled %t)", s.Name, s.Transport(), redactURL(u), slices.Sorted(maps.Keys(s.Headers)), s.Pooled)
}

// LogValue implements slog.LogValuer with the same redaction as String.
func (s Spec) LogValue() slog.Value { return slog.StringValue(s.String()) }

// SessionOptions are the options to connect a client session to s with:
// the protocol version s pins, if any.
func (s Spec) SessionOptions() *mcp.ClientSessionOptions {
	if s.ProtocolVersion == "" {
		return nil
	}
	return &mcp.ClientSessionOptions{ProtocolVersion: s.ProtocolVersion}
}

// NewClient returns the go-sdk client an upstream is connected with, by the
// pool: opts, leaving multi round-trip results
// (SEP-2322) to its caller, and announcing opts.Capabilities, or none when
// it is nil (the go-sdk's default would announce roots). The pool
// announces roots, sampling and elicitation only to upstreams whose
// requests its Bridge can pass on (see Bridging). An input-required result, which asks for the same things within
// one call, is what the session endpoint relays to the client that made
// the call; the go-sdk's default would try to answer it on the shared
// connection, which has no one to ask.
func NewClient(impl *mcp.Implementation, opts mcp.ClientOptions) *mcp.Client {
	if opts.Capabilities == nil {
		opts.Capabilities = &mcp.ClientCapabilities{}
	}
	opts.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true}
	return mcp.NewClient(impl, &opts)
}
