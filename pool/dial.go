package pool

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"os/exec"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A Dialer turns a spec into an unconnected MCP transport. The pool calls
// it once per connection attempt (initial connect and each restart) and
// then connects an MCP client over the transport. Tests inject dialers that
// return in-memory transports.
type Dialer func(ctx context.Context, spec Spec) (mcp.Transport, error)

// DefaultDialer reaches stdio servers through mcp.CommandTransport (the
// process inherits the daemon's environment plus spec.Env, runs in
// spec.Cwd, and is not tied to ctx: it lives until the pool closes the
// connection), httpUrl servers through mcp.StreamableClientTransport and
// url servers through streamable HTTP with a fallback to HTTP+SSE for
// servers that refuse it (fallbackTransport), with spec.Headers added to
// every request.
func DefaultDialer(_ context.Context, spec Spec) (mcp.Transport, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.Command != "" {
		cmd := exec.Command(spec.Command, spec.Args...)
		cmd.Dir = spec.Cwd
		cmd.Env = os.Environ()
		for _, kv := range sortedPairs(spec.Env) {
			cmd.Env = append(cmd.Env, kv[0]+"="+kv[1])
		}
		return &mcp.CommandTransport{Command: cmd}, nil
	}
	client := http.DefaultClient
	if len(spec.Headers) > 0 {
		client = &http.Client{Transport: headerTransport{base: http.DefaultTransport, headers: spec.Clone().Headers}}
	}
	if spec.HTTPURL != "" {
		return &mcp.StreamableClientTransport{Endpoint: spec.HTTPURL, HTTPClient: client}, nil
	}
	return &fallbackTransport{endpoint: spec.URL, client: client}, nil
}

// headerTransport adds fixed headers to each request.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
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
