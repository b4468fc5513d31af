package pool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/internal/clip"
)

// A Dialer turns a spec into an unconnected MCP transport. The pool calls
// it once per connection attempt (initial connect and each restart) and
// then connects an MCP client over the transport. Tests inject dialers that
// return in-memory transports.
type Dialer func(ctx context.Context, spec Spec) (mcp.Transport, error)

// An ExitReporter is a transport a Dialer may return for a server run as
// a process: once the connection made over it has closed, Exited returns
// how the process ended (the error of its wait: "exit status 3", "signal:
// killed"), nil while it runs or after a clean exit. When connecting fails,
// the pool adds it to the error: the go-sdk's own ("calling \"initialize\":
// ... EOF") does not say that the server exited, nor how.
type ExitReporter interface {
	Exited() error
}

// CommandField is the key of the server entry at fault when
// Spec.CheckCommand returns err: "cwd" or "command".
func CommandField(err error) string {
	if errors.Is(err, ErrBadCwd) {
		return "cwd"
	}
	return "command"
}

// connectFailure returns err, the failure of a connection attempt over t
// bounded by ctx (its connection closed), with what the go-sdk's error
// leaves out: that timeout, the server's, ended the attempt ("context
// deadline exceeded" alone does not say which limit that was), or else how
// the server's process ended, when t can tell (see ExitReporter).
func connectFailure(ctx context.Context, t mcp.Transport, timeout time.Duration, err error) error {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%w (no answer within the server's timeout, %s)", err, timeout)
	case ctx.Err() != nil:
		return err // the caller gave up
	}
	if x, ok := t.(ExitReporter); ok {
		if exit := x.Exited(); exit != nil {
			return fmt.Errorf("%w (the server's process ended: %v)", err, exit)
		}
	}
	return err
}

// upstreamErrorBytes bounds the message of an error an upstream's answer
// made (its JSON-RPC error during the handshake or a listing, of up to 16
// MiB) in the entry's error, which is logged at every retry and shown in
// /v1/state and reload answers.
const upstreamErrorBytes = 4 << 10

// cutError returns err, or, when its message is longer than
// upstreamErrorBytes, err with its message cut in the middle (the start
// and the end are kept, where wrappers put what names the server and the
// request); errors.Is and errors.As still see err.
func cutError(err error) error {
	msg := err.Error()
	if len(msg) <= upstreamErrorBytes {
		return err
	}
	head := clip.String(msg, upstreamErrorBytes/2)
	head = strings.TrimSuffix(head, "…")
	tail := len(msg) - upstreamErrorBytes/4
	for tail < len(msg) && !utf8.RuneStart(msg[tail]) {
		tail++
	}
	return &cutErr{err: err, msg: fmt.Sprintf("%s… (%d bytes cut) …%s", head, tail-len(head), msg[tail:])}
}

// A cutErr is an error whose message cutError cut.
type cutErr struct {
	err error
	msg string
}

func (e *cutErr) Error() string { return e.msg }
func (e *cutErr) Unwrap() error { return e.err }

// DefaultDialer reaches stdio servers through mcp.CommandTransport (the
// process inherits the daemon's environment plus spec.Env, runs in
// spec.Cwd, and is not tied to ctx: it lives until the pool closes the
// connection; see HidingDialer for one that keeps variables back),
// httpUrl servers through mcp.StreamableClientTransport and
// url servers through streamable HTTP or, for servers that refuse it,
// HTTP+SSE, as a probe on connecting finds (fallbackTransport), with
// spec.Headers added to every request to the server's own host (not to a
// host a redirect or an SSE endpoint event points to).
func DefaultDialer(ctx context.Context, spec Spec) (mcp.Transport, error) {
	return dial(ctx, spec, nil)
}

// HidingDialer is DefaultDialer, except that a stdio server's process does
// not inherit the daemon's environment variables that hidden names (those
// holding wasmhost's own tokens, "tokenEnv"); it still gets spec.Env as
// written, even a variable of the same name. hidden is called at every
// dial, so that it may follow reloads.
func HidingDialer(hidden func() []string) Dialer {
	return func(ctx context.Context, spec Spec) (mcp.Transport, error) {
		return dial(ctx, spec, hidden())
	}
}

// dial is DefaultDialer leaving the variables named in hide out of a stdio
// server's inherited environment.
func dial(_ context.Context, spec Spec, hide []string) (mcp.Transport, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.Command != "" {
		// os/exec reports a working directory it cannot enter as the
		// command itself not existing ("fork/exec CMD: no such file or
		// directory"): say which it is.
		if err := spec.checkCwd(); err != nil {
			return nil, err
		}
		cmd := exec.Command(spec.Command, spec.Args...)
		cmd.Dir = spec.Cwd
		cmd.Env = inheritedEnv(hide)
		for _, kv := range sortedPairs(spec.Env) {
			cmd.Env = append(cmd.Env, kv[0]+"="+kv[1])
		}
		return &mcp.CommandTransport{Command: cmd}, nil
	}
	client := http.DefaultClient
	if len(spec.Headers) > 0 {
		endpoint := cmp.Or(spec.HTTPURL, spec.URL)
		u, err := url.Parse(endpoint)
		if err != nil {
			return nil, fmt.Errorf("server %s: %s: %w", spec.Name, redactURL(endpoint), err)
		}
		client = &http.Client{Transport: headerTransport{base: http.DefaultTransport, host: u.Host, headers: spec.Clone().Headers}}
	}
	if spec.HTTPURL != "" {
		return &mcp.StreamableClientTransport{Endpoint: spec.HTTPURL, HTTPClient: client, MaxRetries: streamRetries}, nil
	}
	return &fallbackTransport{endpoint: spec.URL, client: client, version: spec.ProtocolVersion}, nil
}

// inheritedEnv returns the daemon's environment without the variables
// named in hide.
func inheritedEnv(hide []string) []string {
	env := os.Environ()
	if len(hide) == 0 {
		return env
	}
	return slices.DeleteFunc(env, func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(hide, name)
	})
}

// ErrBadCwd is wrapped by the error of CheckCommand, and of DefaultDialer,
// for a command whose working directory (Spec.Cwd) does not exist or is not
// a directory.
var ErrBadCwd = errors.New("the working directory (cwd) cannot be used")

// CheckCommand reports whether s's command can be started as the dialer
// would start it: s.Cwd, when set, must be a directory (the error then
// wraps ErrBadCwd); a name without a slash is looked up in the daemon's
// PATH, as exec.Command does; a path is taken relative to s.Cwd (or the
// working directory, which a missing one's error names) and must be an
// executable file. It returns nil for a spec that is not a command. A
// caller checks a changed server before letting it replace a working
// connection.
func (s Spec) CheckCommand() error {
	if s.Command == "" {
		return nil
	}
	if err := s.checkCwd(); err != nil {
		return err
	}
	if !strings.Contains(s.Command, "/") {
		_, err := exec.LookPath(s.Command)
		return err
	}
	path := s.Command
	if !filepath.IsAbs(path) && s.Cwd != "" {
		path = filepath.Join(s.Cwd, path)
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil && !filepath.IsAbs(path):
		// Say where a relative path was looked for: not in the config
		// file's directory, as an operator may expect.
		if wd, werr := os.Getwd(); werr == nil {
			return fmt.Errorf("%w (a relative command is taken from the working directory, %s)", err, wd)
		}
		return err
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("%s: is a directory", path)
	case fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s: not executable", path)
	}
	return nil
}

// checkCwd returns an error wrapping ErrBadCwd when s.Cwd is set and is
// not a directory the process could be started in.
func (s Spec) checkCwd() error {
	if s.Cwd == "" {
		return nil
	}
	fi, err := os.Stat(s.Cwd)
	switch {
	case err != nil:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is named below
		}
		return fmt.Errorf("%w: %s: %w", ErrBadCwd, s.Cwd, err)
	case !fi.IsDir():
		return fmt.Errorf("%w: %s: not a directory", ErrBadCwd, s.Cwd)
	}
	return nil
}

// streamRetries is how often the go-sdk's streamable HTTP client tries to
// reopen a server's broken event stream before it ends the connection. Its
// default, 5, takes about 18 s, during which the entry looks ready and
// every call fails; after 2 (about 3 s) the connection ends, and the pool
// restarts it, or fails the entry for the supervisor to retry, as for a
// stdio server that exited.
const streamRetries = 2

// WithRoundTripper returns a copy of t whose HTTP requests go through wrap
// applied to the round tripper t used (http.DefaultTransport when it had
// none), and true, when t reaches its server over HTTP: a go-sdk
// StreamableClientTransport or SSEClientTransport, or a "url" transport of
// DefaultDialer. For any other transport it returns t and false. t itself
// is not changed.
func WithRoundTripper(t mcp.Transport, wrap func(http.RoundTripper) http.RoundTripper) (mcp.Transport, bool) {
	switch t := t.(type) {
	case *mcp.StreamableClientTransport:
		c := *t
		c.HTTPClient = wrapClient(t.HTTPClient, wrap)
		return &c, true
	case *mcp.SSEClientTransport:
		c := *t
		c.HTTPClient = wrapClient(t.HTTPClient, wrap)
		return &c, true
	case *fallbackTransport:
		c := *t
		c.client = wrapClient(t.client, wrap)
		return &c, true
	}
	return t, false
}

// wrapClient returns a copy of c (nil meaning http.DefaultClient) whose
// round tripper is wrap applied to c's.
func wrapClient(c *http.Client, wrap func(http.RoundTripper) http.RoundTripper) *http.Client {
	if c == nil {
		c = http.DefaultClient
	}
	cc := *c
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	cc.Transport = wrap(base)
	return &cc
}

// headerTransport adds fixed headers to each request to host. Requests to
// other hosts get none, as net/http drops credentials on a redirect to
// another domain: the headers often carry them.
type headerTransport struct {
	base    http.RoundTripper
	host    string
	headers map[string]string
}

func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.EqualFold(req.URL.Host, t.host) {
		return t.base.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	return t.base.RoundTrip(req)
}

// redactURL hides a URL's password and query values.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable url)"
	}
	if u.RawQuery != "" {
		u.RawQuery = "redacted"
	}
	return u.Redacted()
}
