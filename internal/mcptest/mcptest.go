// Package mcptest has helpers for tests that run MCP servers in process:
// connections, upstreams over HTTP, slow calls, and waits for events. Only
// tests import it. It may start processes and install npm packages under
// the user's cache directory.
package mcptest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Connect serves srv over a fresh in-process pipe and returns the client's
// transport and the server's end of the pipe. Closing that end breaks the
// connection the way a crashed upstream does. (go-sdk's in-memory
// transports can only be broken with ServerSession.Close, which waits for
// in-flight requests, and a client's subscriptions/listen request stays in
// flight until it is cancelled, so such a "crash" can hang.)
func Connect(ctx context.Context, srv *mcp.Server) (mcp.Transport, net.Conn, error) {
	cc, sc := net.Pipe()
	if _, err := srv.Connect(ctx, &mcp.IOTransport{Reader: sc, Writer: sc}, nil); err != nil {
		_ = cc.Close()
		_ = sc.Close()
		return nil, nil, err
	}
	return &mcp.IOTransport{Reader: cc, Writer: cc}, sc, nil
}

// ToolNames lists, sorted, the tools cs sees.
func ToolNames(ctx context.Context, cs *mcp.ClientSession) ([]string, error) {
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(res.Tools))
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names, nil
}

// Text returns the text of a tool result's first content item, or "".
func Text(res *mcp.CallToolResult) string {
	if res == nil || len(res.Content) == 0 {
		return ""
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}

// A LogBuffer is a log sink that tests read while servers write to it:
// Write and String are safe for concurrent use.
type LogBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// HasLine reports whether one line written so far holds every one of
// words.
func (b *LogBuffer) HasLine(words ...string) bool {
	for line := range strings.SplitSeq(b.String(), "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			return true
		}
	}
	return false
}

// ChunkedReader returns a reader of s that returns at most n bytes a Read,
// for tests of code that must not depend on how a stream is cut into reads.
func ChunkedReader(s string, n int) io.Reader { return &chunked{s: s, n: n} }

type chunked struct {
	s string
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	k := min(len(p), c.n, len(c.s))
	copy(p, c.s[:k])
	c.s = c.s[k:]
	return k, nil
}

// CacheDir returns dir when a file can be made in it (it is created if
// need be), else a new temporary directory, with a func that removes what
// CacheDir made. Tests that share the user's compilation cache
// (host.DefaultCacheDir) use it, so that they still run where that cache is
// unusable: no home directory, or a read-only one, as in package builds.
func CacheDir(dir string) (string, func()) {
	if dir != "" && os.MkdirAll(dir, 0o700) == nil {
		if f, err := os.CreateTemp(dir, ".probe-*"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return dir, func() {}
		}
	}
	tmp, err := os.MkdirTemp("", "wasmhost-test-cache-")
	if err != nil {
		panic(fmt.Sprintf("mcptest: no usable compilation cache directory: %q is not writable, and no temporary one: %v", dir, err))
	}
	return tmp, func() { os.RemoveAll(tmp) }
}

// A OnceByKey runs a function once per key, and gives every caller of that
// key its error, not only the first: tests in parallel that need the same
// expensive preparation (a plugin compiled into the shared cache) wait for
// one run of it. The zero value is ready to use.
type OnceByKey struct{ m sync.Map }

// Do runs f the first time key is given, waits for it, and returns its
// error; later calls with the key return that error without running f.
func (o *OnceByKey) Do(key string, f func() error) error {
	type result struct {
		once sync.Once
		err  error
	}
	v, _ := o.m.LoadOrStore(key, &result{})
	r := v.(*result)
	r.once.Do(func() { r.err = f() })
	return r.err
}
