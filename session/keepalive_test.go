package session_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/session"
)

// sseClient speaks streamable HTTP to an endpoint the way the TypeScript
// and Python SDKs' clients do, line by line, so that a test sees what is
// on the wire before the answer.
type sseClient struct {
	t   *testing.T
	url string
	sid string
}

// send POSTs (or, with body "", GETs) and returns the response once its
// headers arrive, or fails the test when they take longer than within.
func (c *sseClient) send(body string, within time.Duration) *http.Response {
	c.t.Helper()
	method, accept := http.MethodPost, "application/json, text/event-stream"
	if body == "" {
		method, accept = http.MethodGet, "text/event-stream"
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.url, strings.NewReader(body))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	if c.sid != "" {
		req.Header.Set("Mcp-Session-Id", c.sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	type answer struct {
		res *http.Response
		err error
	}
	got := make(chan answer, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		got <- answer{res, err}
	}()
	select {
	case a := <-got:
		require.NoError(c.t, a.err)
		c.t.Cleanup(func() { _ = a.res.Body.Close() })
		return a.res
	case <-time.After(within):
		c.t.Fatalf("%s %s: no response headers within %v", method, body, within)
		return nil
	}
}

// rawSession serves c's endpoint over HTTP and returns an sseClient that
// has initialized a client session there.
func rawSession(t *testing.T, c *client) *sseClient {
	t.Helper()
	srv := httptest.NewServer(c.ep.HTTPHandler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return c.ep.Server() }, nil)))
	t.Cleanup(func() {
		c.ep.Close()
		srv.Close()
	})
	hc := &sseClient{t: t, url: srv.URL}
	res := hc.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, 5*time.Second)
	hc.sid = res.Header.Get("Mcp-Session-Id")
	require.NotEmpty(t, hc.sid)
	_, _ = io.Copy(io.Discard, res.Body)
	res = hc.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, 5*time.Second)
	require.Equal(t, http.StatusAccepted, res.StatusCode)
	return hc
}

// lines returns the response body's lines as they arrive.
func lines(res *http.Response) <-chan string {
	ch := make(chan string, 100)
	go func() {
		defer close(ch)
		r := bufio.NewReader(res.Body)
		for {
			l, err := r.ReadString('\n')
			if l != "" {
				ch <- strings.TrimRight(l, "\r\n")
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// waitLine returns the first line with prefix, failing the test if none
// comes within d.
func waitLine(t *testing.T, ch <-chan string, prefix string, d time.Duration) string {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case l, ok := <-ch:
			if !ok {
				t.Fatalf("the stream ended before a line starting %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			t.Fatalf("no line starting %q within %v", prefix, d)
		}
	}
}

// A keepAliveSpy is an HTTP transport that sends on seen each keep-alive
// comment in the answers to POST requests (a call's event stream) that it
// passes on.
type keepAliveSpy struct {
	base http.RoundTripper
	seen chan<- struct{}
}

func (k keepAliveSpy) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := k.base.RoundTrip(req)
	if err == nil && req.Method == http.MethodPost {
		resp.Body = &commentCounter{ReadCloser: resp.Body, seen: k.seen}
	}
	return resp, err
}

// A commentCounter counts the keep-alive comments read through it, across
// reads that cut one in two.
type commentCounter struct {
	io.ReadCloser
	seen chan<- struct{}
	tail []byte // the last bytes read, shorter than a comment
}

func (c *commentCounter) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	const comment = ": keepalive"
	buf := append(c.tail, p[:n]...)
	for range bytes.Count(buf, []byte(comment)) {
		select {
		case c.seen <- struct{}{}:
		default:
		}
	}
	c.tail = append([]byte(nil), buf[max(0, len(buf)-len(comment)+1):]...)
	return n, err
}

// TestKeepAliveOnSilentStreams: an event stream with nothing to carry
// (a call under way without progress, the GET stream between list
// changes) gets its headers (a call's after at most the keep-alive
// interval, here shorter than a second) and a comment at each keep-alive
// interval, as the TypeScript SDK's servers send, and clients of any SDK
// still read the answer. Before the fix the go-sdk sent nothing, not even
// a call's response headers, until the answer: Node's fetch gives up
// after 300 s of that, the Python SDK's client too, so a tool working for
// five minutes without progress failed through wasmhost and not directly.
func TestKeepAliveOnSilentStreams(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.keepAlive = 50 * time.Millisecond
	c := f.connect("alice", `{}`)
	hc := rawSession(t, c)
	srv := hc.url

	// The GET stream, which carries list changes.
	get := hc.send("", 5*time.Second)
	require.Equal(t, http.StatusOK, get.StatusCode)
	getLines := lines(get)
	waitLine(t, getLines, ": keepalive", 2*time.Second)
	waitLine(t, getLines, ": keepalive", 2*time.Second)

	// A call under way: its headers come before its answer, then comments.
	call := hc.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"demo__block","arguments":{}}}`, 2*time.Second)
	require.Equal(t, http.StatusOK, call.StatusCode)
	assert.Equal(t, "text/event-stream", call.Header.Get("Content-Type"))
	callLines := lines(call)
	select {
	case <-f.up.Started:
	case <-time.After(mcptest.EventWithin):
		t.Fatal("the call did not reach the upstream")
	}
	waitLine(t, callLines, ": keepalive", 2*time.Second)
	waitLine(t, callLines, ": keepalive", 2*time.Second)

	// A go-sdk client reads an answer that comes after comments on its
	// call's stream (and its GET stream).
	cl := mcp.NewClient(&mcp.Implementation{Name: "go", Version: "1"}, &mcp.ClientOptions{Logger: quiet})
	comments := make(chan struct{}, 64)
	spy := &http.Client{Transport: keepAliveSpy{base: http.DefaultTransport, seen: comments}}
	cs, err := cl.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: srv, HTTPClient: spy}, nil)
	require.NoError(t, err)
	defer cs.Close()
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	goAnswer := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "demo__block"})
		goAnswer <- answer{res, err}
	}()
	select {
	case <-f.up.Started:
	case <-time.After(mcptest.EventWithin):
		t.Fatal("the go-sdk client's call did not reach the upstream")
	}
	for i := range 3 { // three keep-alive comments reach the client on its call's stream
		select {
		case <-comments:
		case <-time.After(mcptest.EventWithin):
			t.Fatalf("keep-alive comment %d did not reach the go-sdk client's call stream", i+1)
		}
	}

	close(f.up.Release)
	data := waitLine(t, callLines, "data: ", 5*time.Second)
	var msg struct {
		ID     int                `json:"id"`
		Result mcp.CallToolResult `json:"result"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &msg), data)
	assert.Equal(t, 2, msg.ID)
	assert.Equal(t, "released", text(&msg.Result))
	select {
	case a := <-goAnswer:
		require.NoError(t, a.err)
		assert.Equal(t, "released", text(a.res))
	case <-time.After(mcptest.EventWithin):
		t.Fatal("the go-sdk client got no answer")
	}
}

// TestKeepAliveOff: a negative KeepAlive sends nothing extra, and 0 means
// the default. (The wire check alone could not tell "never" from the 15 s
// default.)
func TestKeepAliveOff(t *testing.T) {
	t.Parallel()
	assert.Equal(t, session.DefaultKeepAlive, session.New(session.Options{Name: "s", Logger: quiet, Upstream: func(string) session.Target { return session.Target{} }}).KeepAliveInterval())
	f := newFixture(t)
	f.keepAlive = -1
	c := f.connect("alice", `{}`)
	assert.LessOrEqual(t, c.ep.KeepAliveInterval(), time.Duration(0), "no keep-alive")
	hc := rawSession(t, c)
	getLines := lines(hc.send("", 5*time.Second))
	waitLine(t, getLines, ": ok", 2*time.Second)
	deadline := time.After(300 * time.Millisecond)
	for {
		select {
		case l := <-getLines:
			assert.Empty(t, l, "the stream carried more than the go-sdk's own opening comment")
		case <-deadline:
			return
		}
	}
}
