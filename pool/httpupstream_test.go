package pool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

// A restartable is the pool's tools upstream (see upstream) served over
// streamable HTTP by an mcptest.HTTPUpstream, which also counts the event
// streams being served.
type restartable struct {
	*mcptest.HTTPUpstream
	up    *mcptest.Upstream // the current process's; used on the test goroutine only
	tools []string          // the next process's

	mu     sync.Mutex
	active int // event stream requests being served by the MCP handler
}

// isStream reports whether a request opens an event stream that carries
// list_changed: the standalone GET, or from protocol 2026-07-28 a
// subscriptions/listen POST.
func isStream(req *http.Request, method string) bool {
	return req.Method == http.MethodGet || method == "subscriptions/listen"
}

func newRestartable(t *testing.T, opts mcp.StreamableHTTPOptions) *restartable {
	t.Helper()
	opts.Logger = quiet
	r := &restartable{tools: []string{"read"}}
	r.HTTPUpstream = mcptest.NewHTTPUpstream(t, mcptest.HTTPUpstreamConfig{
		NewServer: func() *mcp.Server {
			r.up = newUpstream(t, "web", r.tools...)
			return r.up.Server
		},
		Options: opts,
		Headers: []string{"X-Api-Key"},
		Serve:   r.serveMCP,
	})
	return r
}

func (r *restartable) serveMCP(w http.ResponseWriter, req *http.Request, method string, next http.Handler) {
	if isStream(req, method) {
		r.mu.Lock()
		r.active++
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.active--
			r.mu.Unlock()
		}()
	}
	next.ServeHTTP(w, req)
}

// activeStreams is how many event streams the MCP handler serves.
func (r *restartable) activeStreams() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active
}

// restart replaces the server process with one serving tools (see
// mcptest.HTTPUpstream.Restart).
func (r *restartable) restart(dropConns bool, tools ...string) {
	r.tools = tools
	r.Restart(dropConns)
}

// back restarts the server, serving tools, at the same address after Down.
func (r *restartable) back(tools ...string) {
	r.tools = tools
	r.Back()
}

// httpPool returns a pool that dials with DefaultDialer and restarts a
// connection that went away up to three times, as the daemon's does.
func httpPool(t *testing.T, opts pool.Options) *pool.Pool {
	t.Helper()
	if opts.Counters == nil {
		opts.Counters = &opcount.Counters{}
	}
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	p := pool.New(opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

func acquireFrom(t *testing.T, p *pool.Pool, spec pool.Spec, reg *viewtest.Registry) *pool.Handle {
	t.Helper()
	v := view.New(view.Config{Session: "alice", Server: spec.Name, Registry: reg,
		Counters: p.Counters(), Policy: metakey.Reference{}, Logger: quiet})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := p.Acquire(ctx, spec, v)
	require.NoError(t, err)
	return h
}

// callRead calls the upstream tool "read" through h's current session.
func callRead(ctx context.Context, h *pool.Handle) (string, error) {
	cs := h.Conn()
	if cs == nil {
		return "", errNotReady
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read", Arguments: map[string]any{"path": "x"}})
	if err != nil {
		return "", err
	}
	return mcptest.Text(res), nil
}

var errNotReady = &notReady{}

type notReady struct{}

func (*notReady) Error() string { return "entry not ready" }

// eventuallyCalls waits until a call through h succeeds.
func eventuallyCalls(t *testing.T, h *pool.Handle, within time.Duration, msg string) {
	t.Helper()
	var last error
	ok := assert.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		text, err := callRead(ctx, h)
		last = err
		return err == nil && strings.HasSuffix(text, "says hi")
	}, within, 20*time.Millisecond, msg)
	if !ok {
		t.Fatalf("last call error: %v; entry %+v", last, h.Entry().Info())
	}
}

type versionCase struct {
	name      string
	version   string
	stateless bool
}

var versionCases = []versionCase{
	{name: "2025-11-25", version: "2025-11-25"},
	{name: "2025-06-18", version: "2025-06-18"},
	{name: "unpinned"},
	{name: "stateless/unpinned", stateless: true},
}

// TestHTTPUpstreamRestartIsRecovered: an upstream that restarts (a new
// process: the session id the pool holds is answered with 404, as the
// go-sdk server does) is noticed, and the pool starts a new session on its
// own, re-initializing and rediscovering, as the MCP specification tells a
// client to when a request with a session id gets 404 — with or without
// the event stream being dropped with the old process.
func TestHTTPUpstreamRestartIsRecovered(t *testing.T) {
	t.Parallel()
	for _, vc := range versionCases {
		for _, drop := range []bool{true, false} {
			t.Run(vc.name+map[bool]string{true: "/conns-dropped", false: "/conns-kept"}[drop], func(t *testing.T) {
				r := newRestartable(t, mcp.StreamableHTTPOptions{Stateless: vc.stateless})
				p := httpPool(t, pool.Options{CrashRestarts: 3})
				reg := viewtest.NewRegistry()
				h := acquireFrom(t, p, pool.Spec{Name: "web", Pooled: true, HTTPURL: r.URL(), ProtocolVersion: vc.version, Timeout: 5 * time.Second}, reg)
				eventuallyCalls(t, h, 5*time.Second, "first call")
				v1 := h.Entry().Info().Version

				r.restart(drop, "read", "write")
				eventuallyCalls(t, h, 10*time.Second, "calls after the restart")
				require.Eventually(t, func() bool {
					return assert.ObjectsAreEqual([]string{"read", "write"}, snapshotToolNames(h.Entry().Snapshot()))
				}, 10*time.Second, 20*time.Millisecond, "rediscovered")
				assert.Greater(t, h.Entry().Info().Version, v1)
				assert.Equal(t, pool.StateReady, h.Entry().State())
			})
		}
	}
}

// hang makes the upstream hang on the requests match selects until the
// test ends (see mcptest.HTTPUpstream.Hang).
func (r *restartable) hang(t *testing.T, match func(r *http.Request, method string) bool) {
	t.Cleanup(r.Hang(match))
}

// streamCases are the two kinds of event stream an HTTP upstream carries
// list_changed on: the standalone GET before protocol 2026-07-28, a
// subscriptions/listen request (of a stateless server) from it on.
var streamCases = []struct {
	name, version string
	stateless     bool
}{
	{name: "get-stream/2025-11-25", version: "2025-11-25"},
	{name: "listen/2026-07-28", stateless: true},
}

// TestHTTPUpstreamHangingStreamBoundsConnect: an upstream that answers
// its other requests but never the one that opens its event stream (a
// proxy holding it back, say: the standalone GET before protocol
// 2026-07-28, the subscriptions/listen POST from it on) fails the
// connection attempt, as a silent stdio handshake does, instead of leaving
// the entry connecting for ever, with an Acquire, a reload and the pool's
// Close waiting on it. Each request waits the server's timeout at most; the
// go-sdk tries the GET three times, a second or two apart.
func TestHTTPUpstreamHangingStreamBoundsConnect(t *testing.T) {
	if testing.Short() {
		t.Skip("an HTTP upstream end to end, waiting on its reconnects; TestHTTPUpstreamRestartIsRecovered, TestHTTPUpstreamBadAnswers and TestHTTPUpstreamHeadersStayWithTheirHost stay in -short; run without -short")
	}
	for _, tc := range streamCases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRestartable(t, mcp.StreamableHTTPOptions{Stateless: tc.stateless})
			r.hang(t, isStream)
			p := httpPool(t, pool.Options{})
			v := view.New(view.Config{Session: "alice", Server: "web", Registry: viewtest.NewRegistry(),
				Counters: p.Counters(), Policy: metakey.Reference{}, Logger: quiet})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			_, err := p.Acquire(ctx, pool.Spec{Name: "web", Pooled: true, HTTPURL: r.URL(), ProtocolVersion: tc.version, Timeout: 500 * time.Millisecond}, v)
			require.Error(t, err)
			t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
			require.ErrorIs(t, err, pool.ErrTerminal, "the attempt failed, not the caller's wait: %v", err)
			assert.Less(t, time.Since(start), 10*time.Second)
			closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, p.Close(closeCtx), "the pool's Close waits for the attempt")
		})
	}
}

// TestHTTPUpstreamBadAnswers: a call answered with a server error, a body
// that is not JSON, an HTML page, a redirect or an endless body fails
// (within bounds, naming what went wrong), and the calls after it are
// served again without anyone restarting the entry.
func TestHTTPUpstreamBadAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter, r *http.Request)
		ok     bool // the call itself succeeds
	}{
		{name: "500", answer: func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", http.StatusInternalServerError) }},
		{name: "503", answer: func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "busy", http.StatusServiceUnavailable) }},
		{name: "501", answer: func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "nope", http.StatusNotImplemented) }},
		{name: "json-garbage", answer: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, "<html>not json</html>")
		}},
		{name: "html-200", answer: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html>login</html>")
		}},
		{name: "redirect-302-login", answer: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/login", http.StatusFound)
		}},
		{name: "redirect-307-same", ok: true, answer: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/mcp?moved=1", http.StatusTemporaryRedirect)
		}},
		{name: "endless-json", answer: func(w http.ResponseWriter, r *http.Request) {
			var msg struct{ ID json.RawMessage }
			_ = json.NewDecoder(r.Body).Decode(&msg)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(msg.ID)+`,"result":{"content":[{"type":"text","text":"`)
			chunk := bytes.Repeat([]byte("a"), 1<<20)
			for range 32 { // 32 MiB, twice the frame limit of stdio and SSE
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			_, _ = io.WriteString(w, `"}]}}`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRestartable(t, mcp.StreamableHTTPOptions{})
			p := httpPool(t, pool.Options{CrashRestarts: 3})
			h := acquireFrom(t, p, pool.Spec{Name: "web", Pooled: true, HTTPURL: r.URL(), ProtocolVersion: "2025-11-25", Timeout: 5 * time.Second}, viewtest.NewRegistry())
			eventuallyCalls(t, h, 5*time.Second, "first call")
			var once sync.Once
			r.SetFault(func(w http.ResponseWriter, req *http.Request, method string) bool {
				if req.URL.Path == "/login" {
					w.Header().Set("Content-Type", "text/html")
					_, _ = io.WriteString(w, "<html>login</html>")
					return true
				}
				answered := false
				if method == "tools/call" && req.URL.RawQuery == "" {
					once.Do(func() { tc.answer(w, req); answered = true })
				}
				return answered
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			text, err := callRead(ctx, h)
			t.Logf("call: %d bytes, %v (after %v); entry %v", len(text), err, time.Since(start).Round(time.Millisecond), h.Entry().State())
			require.NoError(t, ctx.Err(), "the call was not answered")
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
			eventuallyCalls(t, h, 10*time.Second, "calls after the bad answer")
		})
	}
}

// streams counts the event streams opened so far (see isStream).
func (r *restartable) streams() int {
	n := 0
	for _, q := range r.Requests() {
		if q.Verb == http.MethodGet || q.Method == "subscriptions/listen" {
			n++
		}
	}
	return n
}

// TestHTTPUpstreamStreamDropKeepsListChanged: when the upstream's event
// stream that carries list_changed drops, again and again (a proxy's idle
// timeout, a network blip, a restart of a stateless server), the pool still
// learns of every change to the upstream's tools: those made after the
// stream is back, and those made while it was down, which no notification
// will ever announce. Protocols before 2026-07-28 carry list_changed on the
// standalone GET stream, which the go-sdk reopens; 2026-07-28 on a
// subscriptions/listen request, which it does not.
func TestHTTPUpstreamStreamDropKeepsListChanged(t *testing.T) {
	if testing.Short() {
		t.Skip("an HTTP upstream end to end, waiting on its reconnects; TestHTTPUpstreamRestartIsRecovered, TestHTTPUpstreamBadAnswers and TestHTTPUpstreamHeadersStayWithTheirHost stay in -short; run without -short")
	}
	for _, tc := range streamCases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRestartable(t, mcp.StreamableHTTPOptions{Stateless: tc.stateless})
			p := httpPool(t, pool.Options{CrashRestarts: 3})
			h := acquireFrom(t, p, pool.Spec{Name: "web", Pooled: true, HTTPURL: r.URL(), ProtocolVersion: tc.version, Timeout: 5 * time.Second}, viewtest.NewRegistry())
			require.Eventually(t, func() bool { return r.activeStreams() == 1 }, 5*time.Second, 10*time.Millisecond, "no event stream")
			want := []string{"read"}
			// Three drops: the go-sdk ends a connection whose stream it had
			// to reopen twice without making progress, and the pool
			// restarts a connection that went away three times in a row.
			for i := range 3 {
				before := r.streams()
				// Hold the stream's reopening back, drop every connection,
				// and once the upstream has seen its stream go, change its
				// tools: the notification has nowhere to go.
				gate := make(chan struct{})
				r.SetFault(func(_ http.ResponseWriter, req *http.Request, method string) bool {
					if !isStream(req, method) {
						return false
					}
					select {
					case <-gate:
						return false
					case <-req.Context().Done():
						return true
					}
				})
				up := r.up
				// Idle connections are let go of first: a restart that races
				// the drop could send server/discover on one, which fails, and
				// the go-sdk then falls back to the legacy handshake, on which
				// a stateless server has no stream to offer (see the report).
				http.DefaultTransport.(*http.Transport).CloseIdleConnections()
				r.CloseClientConnections()
				require.Eventually(t, func() bool { return r.activeStreams() == 0 }, 5*time.Second, 10*time.Millisecond)
				gap := fmt.Sprintf("gap%d", i)
				up.AddTool(gap)
				want = append(want, gap)
				close(gate)
				r.SetFault(nil)

				listed := func() bool { return assert.ObjectsAreEqual(sorted(want), snapshotToolNames(h.Entry().Snapshot())) }
				require.Eventually(t, listed, 10*time.Second, 10*time.Millisecond,
					"drop %d: the change made while the stream was down is missed: the pool lists %v, the upstream %v", i, snapshotToolNames(h.Entry().Snapshot()), up.ToolNames())
				require.Eventually(t, func() bool { return r.streams() > before && r.activeStreams() == 1 }, 10*time.Second, 10*time.Millisecond,
					"drop %d: the stream was not opened again; entry %+v; streams %d, active %d, requests %+v", i, h.Entry().Info(), r.streams(), r.activeStreams(), r.Requests())
				after := fmt.Sprintf("after%d", i)
				up.AddTool(after)
				want = append(want, after)
				require.Eventually(t, listed, 10*time.Second, 10*time.Millisecond,
					"drop %d: the change made after the stream was back is missed: the pool lists %v, the upstream %v", i, snapshotToolNames(h.Entry().Snapshot()), up.ToolNames())
			}
			eventuallyCalls(t, h, 5*time.Second, "calls after the drops")
			t.Logf("%+v", p.Counters().Snapshot())
		})
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	slices.Sort(out)
	return out
}

// TestHTTPUpstreamHeadersOnEveryRequest: the spec's headers go with every
// request to the upstream: the first connection's, its event stream's, and
// those of the connections made after the upstream restarted or came back.
func TestHTTPUpstreamHeadersOnEveryRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("an HTTP upstream end to end, waiting on its reconnects; TestHTTPUpstreamRestartIsRecovered, TestHTTPUpstreamBadAnswers and TestHTTPUpstreamHeadersStayWithTheirHost stay in -short; run without -short")
	}
	r := newRestartable(t, mcp.StreamableHTTPOptions{})
	p := httpPool(t, pool.Options{CrashRestarts: 3})
	for _, tr := range []string{"httpUrl", "url"} {
		t.Run(tr, func(t *testing.T) {
			spec := pool.Spec{Name: "web-" + tr, Pooled: true, Timeout: 5 * time.Second, Headers: map[string]string{"X-Api-Key": "k3y-s3cret"}}
			if tr == "url" {
				spec.URL = r.URL()
			} else {
				spec.HTTPURL = r.URL()
			}
			before := len(r.Requests()) // the other subtest's
			h := acquireFrom(t, p, spec, viewtest.NewRegistry())
			eventuallyCalls(t, h, 5*time.Second, "first call")
			r.restart(true, "read")
			eventuallyCalls(t, h, 10*time.Second, "after a restart")
			r.Down()
			require.Eventually(t, func() bool { return h.Entry().State() != pool.StateReady }, 10*time.Second, 10*time.Millisecond)
			r.back("read")
			require.NoError(t, h.Release(context.Background()))
			h = acquireFrom(t, p, spec, viewtest.NewRegistry())
			eventuallyCalls(t, h, 10*time.Second, "after coming back")
			require.NoError(t, h.Release(context.Background()))
			var verbs []string
			for _, q := range r.Requests()[before:] {
				assert.Equal(t, "k3y-s3cret", q.Header.Get("X-Api-Key"), "%+v", q)
				verbs = append(verbs, q.Verb)
			}
			assert.Contains(t, verbs, http.MethodGet)
			assert.Contains(t, verbs, http.MethodDelete)
		})
	}
}

// TestHTTPUpstreamHeadersStayWithTheirHost: an upstream that redirects to
// another host does not get the configured headers (often credentials)
// sent there; the upstream's own host gets them.
func TestHTTPUpstreamHeadersStayWithTheirHost(t *testing.T) {
	got := make(chan string, 4)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- "other:" + r.Header.Get("X-Api-Key")
		http.Error(w, "no", http.StatusNotFound)
	}))
	t.Cleanup(other.Close)
	// 127.0.0.1 and localhost are different hosts to a browser and to
	// net/http's redirect rules alike.
	otherURL := strings.Replace(other.URL, "127.0.0.1", "localhost", 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- "upstream:" + r.Header.Get("X-Api-Key")
		http.Redirect(w, r, otherURL+"/mcp", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(up.Close)

	tr, err := pool.DefaultDialer(t.Context(), pool.Spec{Name: "web", HTTPURL: up.URL + "/mcp", Headers: map[string]string{"X-Api-Key": "k3y"}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err = mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, tr, nil)
	require.Error(t, err)
	assert.Equal(t, "upstream:k3y", <-got)
	assert.Equal(t, "other:", <-got, "the header followed the redirect to another host")
}
