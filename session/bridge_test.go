package session_test

//lint:file-ignore SA1019 the tests use sampling, roots and logging, deprecated (SEP-2577) but still used during their deprecation window

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
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
	"github.com/wasmhost/wasmhost/session"
	"github.com/wasmhost/wasmhost/view"
)

// oldProtocol is the protocol of the links to the bridge upstream: from
// 2026-07-28 on, a server asks its questions within a call as an
// input-required result, and the go-sdk's refuses to send them on its own.
const oldProtocol = "2025-11-25"

// askIn is the input of the bridge upstream's tools: who calls (each test
// client passes its own name).
type askIn struct {
	Who string `json:"who"`
}

// A bridgeUpstream is an upstream whose tools ask their caller things
// (sampling, elicitation, roots), log and report progress.
type bridgeUpstream struct {
	server *mcp.Server
	late   chan struct{} // releases "late"
	mute   chan struct{} // releases "mute"
	// lateDone has the outcome of the late tool's questions, asked after
	// its call was given up: "refused: ..." or what a client answered.
	lateDone chan string
	started  chan string // the who of each "ask" call, once it is under way
	mu       sync.Mutex
	sessions []*mcp.ServerSession
}

func newBridgeUpstream() *bridgeUpstream {
	u := &bridgeUpstream{late: make(chan struct{}), mute: make(chan struct{}), lateDone: make(chan string, 4), started: make(chan string, 256)}
	u.server = mcp.NewServer(&mcp.Implementation{Name: "bridge-upstream", Version: "1"}, &mcp.ServerOptions{
		Logger: quiet,
		InitializedHandler: func(_ context.Context, req *mcp.InitializedRequest) {
			u.mu.Lock()
			u.sessions = append(u.sessions, req.Session)
			u.mu.Unlock()
		},
		// A completion of the prompt "p" logs and asks its caller (the
		// argument's value names it), and suggests what it was answered.
		CompletionHandler: func(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			who := req.Params.Argument.Value
			_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "warning", Logger: "complete", Data: "who:" + who})
			v := ""
			res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "who:" + who}}}})
			if err != nil {
				v = "refused: " + err.Error()
			} else {
				v = res.Content.(*mcp.TextContent).Text
			}
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{v}}}, nil
		},
	})
	u.server.AddPrompt(&mcp.Prompt{Name: "p", Arguments: []*mcp.PromptArgument{{Name: "x"}}}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{}, nil
	})
	mcp.AddTool(u.server, &mcp.Tool{Name: "ask"}, func(ctx context.Context, req *mcp.CallToolRequest, in askIn) (*mcp.CallToolResult, any, error) {
		ss := req.Session
		u.started <- in.Who
		for _, l := range []mcp.LoggingLevel{"debug", "info", "warning"} {
			_ = ss.Log(ctx, &mcp.LoggingMessageParams{Level: l, Logger: "ask", Data: "who:" + in.Who})
		}
		if tok := req.Params.GetProgressToken(); tok != nil {
			_ = ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Message: "who:" + in.Who})
		}
		var out []string
		sres, err := ss.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "who:" + in.Who}}}})
		if err != nil {
			out = append(out, "sample=refused: "+err.Error())
		} else {
			out = append(out, "sample="+sres.Content.(*mcp.TextContent).Text)
		}
		eres, err := ss.Elicit(ctx, &mcp.ElicitParams{Message: "who:" + in.Who, RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}})
		if err != nil {
			out = append(out, "elicit=refused: "+err.Error())
		} else {
			out = append(out, fmt.Sprintf("elicit=%v", eres.Content["name"]))
		}
		rres, err := ss.ListRoots(ctx, nil)
		switch {
		case err != nil:
			out = append(out, "roots=refused: "+err.Error())
		case len(rres.Roots) == 0:
			out = append(out, "roots=")
		default:
			out = append(out, "roots="+rres.Roots[0].URI)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(out, "\n")}}}, nil, nil
	})
	mcp.AddTool(u.server, &mcp.Tool{Name: "mute"}, func(ctx context.Context, req *mcp.CallToolRequest, in askIn) (*mcp.CallToolResult, any, error) {
		u.started <- in.Who
		<-u.mute // never answers while the test runs, as a TypeScript SDK server never answers a call once cancelled
		return &mcp.CallToolResult{}, nil, nil
	})
	mcp.AddTool(u.server, &mcp.Tool{Name: "late"}, func(ctx context.Context, req *mcp.CallToolRequest, in askIn) (*mcp.CallToolResult, any, error) {
		<-u.late // answers late: its caller has given up by then
		// Asked on a stream its caller has left, a question may find no
		// one to answer it: the upstream then gives up on it.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "warning", Data: "who:" + in.Who})
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "who:" + in.Who}}}})
		if err != nil {
			u.lateDone <- "refused: " + err.Error()
		} else {
			u.lateDone <- res.Content.(*mcp.TextContent).Text
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "late"}}}, nil, nil
	})
	return u
}

// A bridgeClient is one session with one client that answers sampling
// with "from NAME", elicitation with {"name": NAME}, has the root
// file:///NAME and records the log messages and progress it gets.
type bridgeClient struct {
	name string
	cs   *mcp.ClientSession
	pipe net.Conn // the client's end of its connection
	ep   *session.Endpoint
	// block, when set, makes sampling wait until it is closed.
	block chan struct{}
	// asked has one value per sampling request the client got.
	asked chan struct{}

	mu    sync.Mutex
	got   []string // "sample:", "elicit:", "log:LEVEL:", "progress:" + the who of each
	level mcp.LoggingLevel
}

func (c *bridgeClient) record(s string) {
	c.mu.Lock()
	c.got = append(c.got, s)
	c.mu.Unlock()
}

func (c *bridgeClient) received() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got...)
}

// waitReceived waits until c has received want, in any order (the go-sdk
// hands a client its notifications asynchronously), and fails if it
// received anything else.
func (c *bridgeClient) waitReceived(t *testing.T, want ...string) {
	t.Helper()
	if !assert.Eventually(t, func() bool { return len(c.received()) >= len(want) }, 60*time.Second, 5*time.Millisecond) {
		t.Logf("%s received %q", c.name, c.received())
	}
	assert.ElementsMatch(t, want, c.received(), c.name)
}

// whoOf returns the who in s, "who:NAME" at its end.
func whoOf(s string) string {
	_, who, _ := strings.Cut(s, "who:")
	return who
}

// A bridgeRig is a pool with one upstream (dialed by dial) shared by
// sessions of one client each.
type bridgeRig struct {
	t     *testing.T
	up    *bridgeUpstream
	pool  *pool.Pool
	relay *session.ProgressRelay
	spec  pool.Spec
}

func newBridgeRig(t *testing.T, up *bridgeUpstream, spec pool.Spec, dial pool.Dialer) *bridgeRig {
	return newBridgeRigWith(t, up, spec, dial, nil)
}

// newBridgeRigWith is newBridgeRig with the pool's bridge wrap(relay)
// (nil: the relay).
func newBridgeRigWith(t *testing.T, up *bridgeUpstream, spec pool.Spec, dial pool.Dialer, wrap func(*session.ProgressRelay) pool.Bridge) *bridgeRig {
	relay := session.NewProgressRelay()
	var bridge pool.Bridge = relay
	if wrap != nil {
		bridge = wrap(relay)
	}
	p := pool.New(pool.Options{Dialer: relay.Dialer(dial), OnProgress: relay.Handle, Bridge: bridge, Counters: &opcount.Counters{}, Logger: quiet})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return &bridgeRig{t: t, up: up, pool: p, relay: relay, spec: spec}
}

// stdioRig reaches up over a pipe, as a pooled stdio server.
func stdioRig(t *testing.T, up *bridgeUpstream, spec pool.Spec) *bridgeRig {
	return newBridgeRig(t, up, spec, func(ctx context.Context, _ pool.Spec) (mcp.Transport, error) {
		ct, _, err := mcptest.Connect(ctx, up.server)
		return ct, err
	})
}

// httpRig reaches up over streamable HTTP, as a pooled httpUrl server.
func httpRig(t *testing.T, up *bridgeUpstream) *bridgeRig {
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up.server }, nil))
	t.Cleanup(srv.Close)
	return newBridgeRig(t, up, pool.Spec{Name: "up", HTTPURL: srv.URL, Pooled: true, ProtocolVersion: oldProtocol}, func(context.Context, pool.Spec) (mcp.Transport, error) {
		return &mcp.StreamableClientTransport{Endpoint: srv.URL}, nil
	})
}

// pooledRigs are the two links over which the pool's bridge meets a pooled
// server's questions: stdio (it infers the caller) and streamable HTTP
// (the call's own stream carries them).
func pooledRigs() map[string]func(*testing.T, *bridgeUpstream) *bridgeRig {
	return map[string]func(*testing.T, *bridgeUpstream) *bridgeRig{
		"stdio": func(t *testing.T, up *bridgeUpstream) *bridgeRig {
			return stdioRig(t, up, pool.Spec{Name: "up", Command: "in-memory", Pooled: true, ProtocolVersion: oldProtocol})
		},
		"streamable-http": httpRig,
	}
}

// connect makes session name, with one client at level (logging/setLevel;
// "" sets none).
func (r *bridgeRig) connect(name string, level mcp.LoggingLevel) *bridgeClient {
	t := r.t
	t.Helper()
	c := &bridgeClient{name: name, asked: make(chan struct{}, 16), level: level}
	var handle *pool.Handle
	c.ep = session.New(session.Options{
		Name:     name,
		Progress: r.relay,
		Logger:   quiet,
		Upstream: func(string) session.Target {
			if handle == nil {
				return session.Target{}
			}
			return session.Target{Conn: handle.Conn(), Timeout: 30 * time.Second}
		},
	})
	v := view.New(view.Config{Session: name, Server: "up", Registry: c.ep, Counters: &opcount.Counters{}, Policy: metakey.Reference{}, Settings: json.RawMessage(`{}`), Logger: quiet})
	h, err := r.pool.Acquire(t.Context(), r.spec, v)
	require.NoError(t, err)
	handle = h
	cc, sc := net.Pipe()
	c.pipe = cc
	ss, err := c.ep.Server().Connect(t.Context(), &mcp.IOTransport{Reader: sc, Writer: sc}, nil)
	require.NoError(t, err)
	cl := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ClientOptions{
		Logger: quiet,
		CreateMessageHandler: func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			c.record("sample:" + whoOf(req.Params.Messages[0].Content.(*mcp.TextContent).Text))
			c.asked <- struct{}{}
			if c.block != nil {
				select {
				case <-c.block:
				case <-ctx.Done():
				}
			}
			return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: "from " + name}}, nil
		},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			c.record("elicit:" + whoOf(req.Params.Message))
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": name}}, nil
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			c.record(fmt.Sprintf("log:%s:%s", req.Params.Level, whoOf(fmt.Sprint(req.Params.Data))))
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			c.record("progress:" + whoOf(req.Params.Message))
		},
	})
	cl.AddRoots(&mcp.Root{URI: "file:///" + name})
	cs, err := cl.Connect(t.Context(), &mcp.IOTransport{Reader: cc, Writer: cc}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	require.NoError(t, err)
	if level != "" {
		require.NoError(t, cs.SetLoggingLevel(t.Context(), &mcp.SetLoggingLevelParams{Level: level}))
	}
	c.cs = cs
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	return c
}

// ask calls the upstream's "ask" tool as c, with a progress token.
func (c *bridgeClient) ask(ctx context.Context) (string, error) {
	res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__ask", Arguments: askIn{Who: c.name}, Meta: mcp.Meta{"progressToken": "tok-" + c.name}})
	if err != nil {
		return "", err
	}
	return text(res), nil
}

// TestBridgeReachesTheCallingClient: with one client calling, what the
// upstream asks and logs during the call reaches that client, over a
// pooled stdio connection (by inference) and a pooled streamable HTTP one
// (on the call's own stream), and the log messages at that client's own
// level.
func TestBridgeReachesTheCallingClient(t *testing.T) {
	t.Parallel()
	for name, mk := range pooledRigs() {
		t.Run(name, func(t *testing.T) {
			up := newBridgeUpstream()
			r := mk(t, up)
			a := r.connect("alice", "info")
			b := r.connect("bob", "warning")
			for _, c := range []*bridgeClient{a, b} {
				out, err := c.ask(t.Context())
				require.NoError(t, err)
				assert.Equal(t, "sample=from "+c.name+"\nelicit="+c.name+"\nroots=file:///"+c.name, out)
			}
			a.waitReceived(t, "log:info:alice", "log:warning:alice", "progress:alice", "sample:alice", "elicit:alice")
			b.waitReceived(t, "log:warning:bob", "progress:bob", "sample:bob", "elicit:bob")
			assert.Zero(t, r.relay.Pending())
		})
	}
}

// TestBridgeRefusesWithoutInference: a pooled stdio server with
// "bridgeInference": false is announced no sampling, elicitation or roots,
// and what it asks anyway is refused, naming why; its log messages reach
// no client.
func TestBridgeRefusesWithoutInference(t *testing.T) {
	t.Parallel()
	up := newBridgeUpstream()
	r := stdioRig(t, up, pool.Spec{Name: "up", Command: "in-memory", Pooled: true, ProtocolVersion: oldProtocol, NoBridgeInference: true})
	a := r.connect("alice", "debug")
	out, err := a.ask(t.Context())
	require.NoError(t, err)
	// The upstream's go-sdk does not send an elicitation the client did
	// not announce; the rest is refused, saying why, but roots/list, which
	// gets an empty list.
	assert.Equal(t, "sample=refused: calling \"sampling/createMessage\": wasmhost: sampling/createMessage from server \"up\" not passed on to a client: server \"up\" has \"bridgeInference\": false\n"+
		"elicit=refused: client does not support elicitation\nroots=", out)
	a.waitReceived(t, "progress:alice") // progress still reaches its caller
	up.mu.Lock()
	caps := up.sessions[0].InitializeParams().Capabilities
	up.mu.Unlock()
	assert.Nil(t, caps.Sampling)
	assert.Nil(t, caps.Elicitation)
	assert.Nil(t, caps.RootsV2)
}

// TestBridgeNoMisrouting: many clients of different sessions call, at the
// same time, the tools of one pooled upstream that sample, elicit, log and
// report progress; one client leaves in the middle of being asked, and
// the upstream answers one call after its caller gave up. Everything each
// client receives is its own, and each question the upstream asked was
// answered by its own caller or refused.
func TestBridgeNoMisrouting(t *testing.T) {
	t.Parallel()
	for name, mk := range pooledRigs() {
		t.Run(name, func(t *testing.T) {
			up := newBridgeUpstream()
			r := mk(t, up)
			const sessions, rounds = 8, 6
			clients := make([]*bridgeClient, sessions)
			for i := range clients {
				clients[i] = r.connect(fmt.Sprintf("s%d", i), "debug")
			}
			// One client is asked and leaves before answering.
			gone := r.connect("gone", "debug")
			gone.block = make(chan struct{})
			goneDone := make(chan error, 1)
			go func() {
				_, err := gone.ask(context.Background())
				goneDone <- err
			}()
			select {
			case <-gone.asked:
			case <-time.After(60 * time.Second):
				t.Fatal("the leaving client was never asked")
			}

			var wg sync.WaitGroup
			outs := make(chan [2]string, sessions*rounds)
			for _, c := range clients {
				wg.Go(func() {
					for range rounds {
						out, err := c.ask(t.Context())
						if !assert.NoError(t, err, c.name) {
							return
						}
						outs <- [2]string{c.name, out}
					}
				})
			}
			// The leaving client goes while the others call.
			<-up.started
			require.NoError(t, gone.pipe.Close()) // the client crashes
			select {
			case <-goneDone:
			case <-time.After(60 * time.Second):
				t.Fatal("the leaving client's call did not end")
			}
			wg.Wait()
			close(outs)
			answered := 0
			for o := range outs {
				for line := range strings.SplitSeq(o[1], "\n") {
					k, v, _ := strings.Cut(line, "=")
					switch {
					case strings.HasPrefix(v, "refused: ") && name == "stdio":
						assert.Contains(t, v, `not passed on to a client: calls of`, "a refusal says why")
					case strings.HasPrefix(v, "refused: "):
						t.Errorf("%s: %s", o[0], line)
					case k == "sample":
						answered++
						assert.Equal(t, "from "+o[0], v, "a sampling answer of another client")
					case k == "elicit":
						assert.Equal(t, o[0], v, "an elicitation answer of another client")
					case k == "roots":
						if v != "" {
							assert.Equal(t, "file:///"+o[0], v, "roots of another client")
						}
					}
				}
			}
			for _, c := range append(clients, gone) {
				for _, got := range c.received() {
					assert.Equal(t, c.name, got[strings.LastIndex(got, ":")+1:], "%s received %q", c.name, got)
				}
			}
			if name == "streamable-http" {
				assert.Equal(t, sessions*rounds, answered, "on the call's own stream every question is answered")
			}

			// An upstream that answers late: its caller gave up, and what
			// it then asks and logs reaches no client. (Over HTTP the
			// go-sdk's server may find no stream to send it on, and hang.)
			if name != "stdio" {
				return
			}
			late := r.connect("late", "debug")
			ctx, cancel := context.WithCancel(t.Context())
			lateErr := make(chan error, 1)
			go func() {
				_, err := late.cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__late", Arguments: askIn{Who: "late"}})
				lateErr <- err
			}()
			require.Eventually(t, func() bool { return r.relay.Pending() == 0 && bridging(r) }, 60*time.Second, 10*time.Millisecond)
			cancel()
			require.Error(t, <-lateErr)
			require.Eventually(t, func() bool { return !bridging(r) }, 60*time.Second, 10*time.Millisecond)
			close(up.late)
			select {
			case out := <-up.lateDone:
				assert.True(t, strings.HasPrefix(out, "refused: "), "a late question was answered: %s", out) // or left unanswered
			case <-time.After(60 * time.Second):
				t.Fatal("the late tool did not ask")
			}
			for _, c := range append(clients, late) {
				for _, got := range c.received() {
					assert.NotEqual(t, "late", got[strings.LastIndex(got, ":")+1:], "%s received the late upstream's %q", c.name, got)
				}
			}
		})
	}
}

// bridging reports whether a call is in flight through r's relay.
func bridging(r *bridgeRig) bool { return session.BridgedCalls(r.relay) > 0 }

// TestLogLevelGoesWithTheCall: on an upstream link of protocol 2026-07-28,
// where the log level goes with each request, a call carries its caller's
// level (the one it set with logging/setLevel), and the upstream's log
// messages during the call reach it at that level.
func TestLogLevelGoesWithTheCall(t *testing.T) {
	t.Parallel()
	up := newBridgeUpstream()
	r := stdioRig(t, up, pool.Spec{Name: "up", Command: "in-memory", Pooled: true})
	a := r.connect("alice", "info")
	_, err := a.ask(t.Context())
	require.NoError(t, err)
	a.waitReceived(t, "log:info:alice", "log:warning:alice", "progress:alice")
	b := r.connect("bob", "")
	_, err = b.ask(t.Context())
	require.NoError(t, err)
	b.waitReceived(t, "progress:bob") // a client that set no level gets no log messages
}

// completeAs completes the argument of the upstream's prompt "p" as c
// (the value names c).
func (c *bridgeClient) completeAs(ctx context.Context) (string, error) {
	res, err := c.cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "up__p"}, Argument: mcp.CompleteParamsArgument{Name: "x", Value: c.name}})
	if err != nil {
		return "", err
	}
	return strings.Join(res.Completion.Values, ","), nil
}

// TestBridgeDuringCompletion: a completion/complete is a call of its
// client like any other. What the upstream asks and logs while it
// completes reaches the completing client when it alone has calls in
// flight (over stdio by inference, over HTTP on the completion's own
// stream), and never a client of another session whose call is in flight
// meanwhile. (Completions were not counted among the calls in flight: a
// pooled stdio server's questions during one session's completion went to
// another session's client, and over HTTP they were refused.)
func TestBridgeDuringCompletion(t *testing.T) {
	t.Parallel()
	for name, mk := range pooledRigs() {
		t.Run(name, func(t *testing.T) {
			up := newBridgeUpstream()
			r := mk(t, up)
			a := r.connect("alice", "debug")
			b := r.connect("bob", "debug")

			// Alone, alice is asked, and gets the log message.
			out, err := a.completeAs(t.Context())
			require.NoError(t, err)
			assert.Equal(t, "from alice", out)
			a.waitReceived(t, "log:warning:alice", "sample:alice")

			// With bob's call in flight (held by bob's sampling answer),
			// alice's completion reaches bob in no way.
			b.block = make(chan struct{})
			bobDone := make(chan error, 1)
			go func() {
				_, err := b.ask(context.Background())
				bobDone <- err
			}()
			select {
			case <-b.asked:
			case <-time.After(60 * time.Second):
				t.Fatal("bob was never asked")
			}
			done := make(chan string, 1)
			go func() {
				out, err := a.completeAs(t.Context())
				if err != nil {
					out = "error: " + err.Error()
				}
				done <- out
			}()
			select {
			case out = <-done:
			case <-b.asked:
				t.Error("bob was asked alice's question")
				close(b.block)
				out = <-done
			}
			if name == "stdio" {
				assert.Contains(t, out, "refused: ", "with two clients' calls in flight, no one is asked")
			} else {
				assert.Equal(t, "from alice", out, "on the completion's own stream alice is asked")
			}
			select {
			case <-b.block:
			default:
				close(b.block)
			}
			require.NoError(t, <-bobDone)
			for _, got := range b.received() {
				assert.Equal(t, "bob", got[strings.LastIndex(got, ":")+1:], "bob received %q", got)
			}
		})
	}
}

// TestBridgeForgetsCallsNeverAnswered: a call its client gave up on counts
// among the calls in flight on its connection only for a while when the
// upstream never answers it (a server that follows the protocol sends
// nothing for a cancelled request: the TypeScript SDK's never does; a
// connection that died never will). It counted until an answer that never
// came: after one client of one session cancelled a call, every question a
// pooled stdio server asked during another session's call was refused,
// and its log messages dropped, for as long as the connection lived; and
// each such call stayed in memory with its client session.
func TestBridgeForgetsCallsNeverAnswered(t *testing.T) {
	session.SetGivenUpFor(t, time.Millisecond)
	up := newBridgeUpstream()
	t.Cleanup(func() { close(up.mute) })
	r := stdioRig(t, up, pool.Spec{Name: "up", Command: "in-memory", Pooled: true, ProtocolVersion: oldProtocol})
	gone := r.connect("gone", "debug")
	bob := r.connect("bob", "debug")

	ctx, cancel := context.WithCancel(t.Context())
	muteErr := make(chan error, 1)
	go func() {
		_, err := gone.cs.CallTool(ctx, &mcp.CallToolParams{Name: "up__mute", Arguments: askIn{Who: "gone"}})
		muteErr <- err
	}()
	select {
	case <-up.started:
	case <-time.After(60 * time.Second):
		t.Fatal("the mute call did not start")
	}
	cancel()
	require.Error(t, <-muteErr)
	mcptest.WaitFor(t, 60*time.Second, func() bool { return session.CallsInFlight(r.relay) == 0 }, func() string { return "" },
		"the call given up on, never answered, still counts among the calls in flight")

	out, err := bob.ask(t.Context())
	require.NoError(t, err)
	assert.Equal(t, "sample=from bob\nelicit=bob\nroots=file:///bob", out)
	bob.waitReceived(t, "log:debug:bob", "log:info:bob", "log:warning:bob", "progress:bob", "sample:bob", "elicit:bob")
}

// gatedBridge is a relay whose answers to sampling requests wait, once
// entered, until release is closed.
type gatedBridge struct {
	*session.ProgressRelay
	entered chan struct{}
	release chan struct{}
}

func (g gatedBridge) Answer(ctx context.Context, cs *mcp.ClientSession, b pool.Bridging, method string, req mcp.Request, next mcp.MethodHandler) (mcp.Result, error) {
	if method == "sampling/createMessage" {
		close(g.entered)
		<-g.release
	}
	return g.ProgressRelay.Answer(ctx, cs, b, method, req, next)
}

// TestBridgeInfersWhenTheRequestArrives: on a pooled stdio server, the
// client a request is inferred to come from is the one whose calls were in
// flight when it arrived, not when the go-sdk's client gets round to
// handling it. An upstream that asks without waiting for the answer (a
// roots/list sent on the side, say) and answers alice's call at once had
// its question go to bob, whose call had begun in between.
func TestBridgeInfersWhenTheRequestArrives(t *testing.T) {
	t.Parallel()
	up := newBridgeUpstream()
	gate := gatedBridge{entered: make(chan struct{}), release: make(chan struct{})}
	asked := make(chan string, 1)
	mcp.AddTool(up.server, &mcp.Tool{Name: "fire"}, func(ctx context.Context, req *mcp.CallToolRequest, in askIn) (*mcp.CallToolResult, any, error) {
		go func() {
			res, err := req.Session.CreateMessage(context.WithoutCancel(ctx), &mcp.CreateMessageParams{MaxTokens: 10, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "who:" + in.Who}}}})
			if err != nil {
				asked <- "refused: " + err.Error()
			} else {
				asked <- res.Content.(*mcp.TextContent).Text
			}
		}()
		<-gate.entered // wasmhost has read the question: answer the call
		return &mcp.CallToolResult{}, nil, nil
	})
	hold := make(chan struct{})
	mcp.AddTool(up.server, &mcp.Tool{Name: "hold"}, func(ctx context.Context, req *mcp.CallToolRequest, in askIn) (*mcp.CallToolResult, any, error) {
		up.started <- in.Who
		select {
		case <-hold:
		case <-ctx.Done():
		}
		return &mcp.CallToolResult{}, nil, nil
	})
	r := newBridgeRigWith(t, up, pool.Spec{Name: "up", Command: "in-memory", Pooled: true, ProtocolVersion: oldProtocol},
		func(ctx context.Context, _ pool.Spec) (mcp.Transport, error) {
			ct, _, err := mcptest.Connect(ctx, up.server)
			return ct, err
		},
		func(relay *session.ProgressRelay) pool.Bridge { gate.ProgressRelay = relay; return gate })
	alice := r.connect("alice", "")
	bob := r.connect("bob", "")

	_, err := alice.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__fire", Arguments: askIn{Who: "alice"}})
	require.NoError(t, err)
	bobDone := make(chan error, 1)
	go func() {
		_, err := bob.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__hold", Arguments: askIn{Who: "bob"}})
		bobDone <- err
	}()
	select {
	case <-up.started:
	case <-time.After(60 * time.Second):
		t.Fatal("bob's call did not start")
	}
	close(gate.release)
	select {
	case out := <-asked:
		assert.True(t, strings.HasPrefix(out, "refused: "), "alice's question, asked during her call, was answered by %q", out)
	case <-time.After(60 * time.Second):
		t.Fatal("the upstream's question was never answered")
	}
	close(hold)
	require.NoError(t, <-bobDone)
	assert.Empty(t, bob.received(), "bob was asked alice's question")
}

// TestBridgeLargeRequests: a sampling request larger than the tap looks
// at (an image, say) still reaches the calling client over a pooled HTTP
// connection, where only a request on the call's own stream is passed
// on; so does a large log message.
func TestBridgeLargeRequests(t *testing.T) {
	t.Parallel()
	up := newBridgeUpstream()
	big := strings.Repeat("x", 200<<10)
	mcp.AddTool(up.server, &mcp.Tool{Name: "askbig"}, func(ctx context.Context, req *mcp.CallToolRequest, in askIn) (*mcp.CallToolResult, any, error) {
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "warning", Data: big + "who:" + in.Who})
		res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: big + "who:" + in.Who}}}})
		if err != nil {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "refused: " + err.Error()}}}, nil, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Content.(*mcp.TextContent).Text}}}, nil, nil
	})
	r := httpRig(t, up)
	a := r.connect("alice", "debug")
	res, err := a.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "up__askbig", Arguments: askIn{Who: "alice"}})
	require.NoError(t, err)
	assert.Equal(t, "from alice", text(res))
	a.waitReceived(t, "log:warning:alice", "sample:alice")
}
