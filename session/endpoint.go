package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmhost/wasmhost/internal/clip"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/internal/inflight"
	"github.com/wasmhost/wasmhost/internal/telemetry"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
)

// ErrUnavailable is wrapped by the error (or the isError tool result text)
// a forwarded call gets when the server's upstream connection is not ready:
// connecting, restarting after a crash, or failed.
var ErrUnavailable = errors.New("upstream unavailable")

// ErrTimeout is wrapped by the error (or the isError tool result text) a
// forwarded call gets when it runs past the server's timeout (its config
// entry's "timeout"); the upstream request is cancelled.
var ErrTimeout = errors.New("upstream call timed out")

// ErrDraining is wrapped by the error (or the isError tool result text) a
// call gets once Drain has been called: the session is shutting down and
// takes no new calls.
var ErrDraining = errors.New("session shutting down")

// A Target is the upstream a call is forwarded to.
type Target struct {
	// Conn is the upstream connection; nil when it is not ready.
	Conn *mcp.ClientSession
	// Timeout bounds the forwarded call; 0 means only the client's own
	// cancellation bounds it.
	Timeout time.Duration
	// Subscriptions holds the session's resource subscriptions to the
	// server; nil means subscriptions to it are refused.
	Subscriptions pool.Subscriber
}

// Options configure an Endpoint.
type Options struct {
	// Name is the session's name, used in logs and errors.
	Name string
	// Upstream returns the upstream for one of the session's servers. It is
	// called for every forwarded call, so it must be cheap, and it must
	// resolve through this session's own handles; it must give no Session
	// while the session's registrations for server lag its settings (see
	// Enforcement in the package documentation). Required.
	Upstream func(server string) Target
	// Progress relays upstream progress notifications back to clients; nil
	// means progress tokens are dropped from forwarded requests.
	Progress *ProgressRelay
	// Implementation is what the endpoint announces to clients; nil means
	// {Name: "wasmhost", Version: "dev"}.
	Implementation *mcp.Implementation
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Redact, when not nil, hides secrets (an API key in an upstream URL's
	// query, say) in the text of the upstream errors a client is told
	// about; it must keep errors.Is and errors.As working.
	Redact func(error) error
	// KeepAlive is how often HTTPHandler writes a comment on an event
	// stream that has carried nothing for that long; 0 means
	// DefaultKeepAlive, a negative value never.
	KeepAlive time.Duration
	// Unavailable, when set, says why one of the session's servers shows
	// nothing to it ("" when it is not one of the session's servers, or is
	// healthy), in words for the session's clients: a client calling a
	// tool or prompt of that server by name then learns that the server is
	// down, not only that the name is unknown. It is called only for such
	// names.
	Unavailable func(server string) string
	// Naming is how tools and prompts are named at first (SetNaming
	// changes it); its zero value prefixes every name.
	Naming Naming
	// OnCall, when set, is told of every tools/call, prompts/get and
	// resources/read the endpoint forwards or fails to forward to an
	// upstream, once it has ended (see Call). It runs on the call's path:
	// it must be cheap and must not block.
	OnCall func(Call)
}

// A route is where an exposed name leads.
type route struct {
	server string
	name   string // upstream tool or prompt name, or resource URI
}

// A kind is the state of one kind of item an Endpoint serves: tools,
// prompts, resources or resource templates. It is guarded by the
// endpoint's mu.
type kind struct {
	name   string           // for logs: "tool", "prompt", ...
	remove func(...string)  // the MCP server's Remove method for the kind
	routes map[string]route // exposed name (URI, URI template) -> upstream
	// waiting holds, for resources and templates, the registrations left
	// out because another server holds their URI (see taken): URI ->
	// server -> the function that registers that server's item. When the
	// holder lets the URI go, the first of them by server name gets it
	// (promote).
	waiting map[string]map[string]func()
	// items holds, for tools and prompts, every item of every server, by
	// server and upstream name, exposed or left out (see resolveNames).
	items map[string]map[string]*named
	// gone holds, for tools and prompts, the exposed names each server let
	// go since it last registered any (deleteNamed).
	gone map[string]map[string]bool
	// names indexes the items' candidate names (see resolveNames).
	names nameIndex
}

func newKind(name string, remove func(...string)) kind {
	return kind{
		name: name, remove: remove, routes: make(map[string]route), waiting: make(map[string]map[string]func()),
		items: make(map[string]map[string]*named), gone: make(map[string]map[string]bool),
	}
}

// An Endpoint is one session's MCP server. It implements view.Registry and is
// safe for concurrent use. See the package documentation.
type Endpoint struct {
	name     string
	srv      *mcp.Server
	upstream func(string) Target
	redact   func(error) error // never nil
	relay    *ProgressRelay
	log      *slog.Logger
	leftOut  *leftOutLog     // bounds the warnings about items left out
	calls    inflight.Gate   // forwarded calls; closed by Drain
	abort    context.Context // ended when Drain cuts the calls under way short
	cutShort context.CancelFunc
	carriers carriers // the HTTP requests carrying calls (HTTPHandler)
	// keepAlive is Options.KeepAlive with its default (<= 0: none).
	keepAlive time.Duration
	onCall    func(Call)          // Options.OnCall
	down      func(string) string // Options.Unavailable

	// levels holds the log level each client set with logging/setLevel
	// (*mcp.ServerSession to mcp.LoggingLevel) while it is connected
	// (keepLevels).
	levels sync.Map

	// matchers caches the matchers of resource templates (see matcher),
	// templatesParsed counts the templates parsed into one;
	// templatesInOrder is the templates sorted (templateOrder) when
	// e.changes was templateOrderAt, templateSorts counts the sorts. e.mu
	// guards them.
	matchers         map[string]func(string) bool
	templatesParsed  uint64
	templatesInOrder []string
	templateOrderAt  uint64
	templateSorts    uint64

	subscribed  atomic.Int32 // len(subs), read without subMu
	syncPending atomic.Bool  // a syncSubscriptions is on its way
	retryReset  atomic.Bool  // the next sync starts its retry delay afresh

	// subMu serialises the resource subscriptions (subscribe.go); it is
	// held across upstream requests, and never with mu held.
	subMu      sync.Mutex
	subs       map[string]*subscription        // resource URI -> the clients subscribed
	watched    map[*mcp.ServerSession]struct{} // clients a goroutine waits to see leave
	retryDelay time.Duration                   // before the next sync, when one left a URI unheld
	retryTimer *time.Timer

	// updMu guards the queue of upstream updates to send (subscribe.go).
	updMu      sync.Mutex
	updates    []*mcp.ResourceUpdatedNotificationParams
	delivering bool // a deliver goroutine runs

	// putMu serialises the changes to tools and prompts (names.go), which
	// let go of mu now and then (pause); it is taken before mu.
	putMu sync.Mutex

	mu                                   sync.Mutex
	naming                               Naming
	instructed                           []string // SetInstructions, sorted
	tools, prompts, resources, templates kind
	changes                              uint64 // registrations added, replaced or removed
}

var _ view.TemplateRegistry = (*Endpoint)(nil)

// New returns an endpoint with nothing registered. It panics if
// opts.Upstream is nil.
func New(opts Options) *Endpoint {
	if opts.Upstream == nil {
		panic("session.New: Upstream is required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	impl := opts.Implementation
	if impl == nil {
		impl = &mcp.Implementation{Name: "wasmhost", Version: "dev"}
	}
	redact := opts.Redact
	if redact == nil {
		redact = func(err error) error { return err }
	}
	keepAlive := opts.KeepAlive
	if keepAlive == 0 {
		keepAlive = DefaultKeepAlive
	}
	abort, cutShort := context.WithCancel(context.Background())
	e := &Endpoint{
		keepAlive: keepAlive,
		onCall:    opts.OnCall,
		down:      opts.Unavailable,
		redact:    redact,
		abort:     abort,
		cutShort:  cutShort,
		name:      opts.Name,
		upstream:  opts.Upstream,
		relay:     opts.Progress,
		log:       log.With("session", opts.Name),
		leftOut:   newLeftOutLog(),
		subs:      make(map[string]*subscription),
		naming:    Naming{Mode: opts.Naming.mode(), Prefix: maps.Clone(opts.Naming.Prefix)},
	}
	e.srv = mcp.NewServer(impl, &mcp.ServerOptions{
		// The go-sdk logs every client connect at info level; keep its
		// warnings and errors only.
		Logger: slog.New(sdkLogs{e.log.Handler(), slog.LevelWarn}),
		// Announce the three lists (with list_changed) even while the
		// projection is empty: a reload may fill them later.
		Capabilities: &mcp.ServerCapabilities{
			Tools:     &mcp.ToolCapabilities{ListChanged: true},
			Prompts:   &mcp.PromptCapabilities{ListChanged: true},
			Resources: &mcp.ResourceCapabilities{ListChanged: true, Subscribe: true},
			// logging/setLevel is per client: the go-sdk keeps each
			// client's level, and the log messages an upstream sends
			// during a client's call reach it at that level (bridge.go).
			//lint:ignore SA1019 logging is deprecated (SEP-2577) but still used during its deprecation window
			Logging: &mcp.LoggingCapabilities{},
		},
		// What a session lists, and may read, is its own policy's doing: a
		// shared cache must not hand one session's answer to another.
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
			c.CacheScope = "private"
		},
		// Announces completions: references are routed like prompts/get
		// and resources/read (complete.go).
		CompletionHandler: e.complete,
		// One upstream subscription per URI for all the session's clients
		// (subscribe.go).
		SubscribeHandler:   e.subscribe,
		UnsubscribeHandler: e.unsubscribe,
	})
	// Traces (off unless telemetry.Start enabled them) see what the client
	// is answered with: outermost.
	e.srv.AddReceivingMiddleware(telemetry.Server(opts.Name), internalErrors, e.unknownNames, e.instruct, e.keepLevels)
	e.tools = newKind("tool", e.srv.RemoveTools)
	e.prompts = newKind("prompt", e.srv.RemovePrompts)
	e.resources = newKind("resource", e.srv.RemoveResources)
	e.templates = newKind("resource template", e.srv.RemoveResourceTemplates)
	return e
}

// internalErrors gives the errors of the endpoint's own making (an upstream
// not ready, a timeout, a drain) the JSON-RPC code of an internal error:
// the go-sdk sends a plain error with code 0, which JSON-RPC does not
// define. Errors that carry a code (the upstream's own, a refused name)
// keep it.
func internalErrors(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		var coded *jsonrpc.Error
		if err != nil && !errors.As(err, &coded) {
			err = fmt.Errorf("%w%w", err, &jsonrpc.Error{Code: jsonrpc.CodeInternalError})
		}
		return res, err
	}
}

// unknownNames adds to the refusal of an unknown tool or prompt name that
// its server is down for this session, when Options.Unavailable says so:
// the go-sdk's server refuses a name nothing registered before a handler
// runs, and a server that is down has its names unregistered. Only the
// session's own servers are named (Unavailable says nothing of others), so
// a client guessing names learns nothing it could not see when the server
// was up.
func (e *Endpoint) unknownNames(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		var coded *jsonrpc.Error
		if err == nil || e.down == nil || !errors.As(err, &coded) || coded.Code != jsonrpc.CodeInvalidParams {
			return res, err
		}
		var name string
		switch r := req.(type) {
		case *mcp.CallToolRequest:
			name = r.Params.Name
		case *mcp.GetPromptRequest:
			name = r.Params.Name
		default:
			return res, err
		}
		if !strings.HasPrefix(coded.Message, "unknown ") {
			return res, err
		}
		server := e.goneServer(method, name)
		if server == "" {
			server, _, _ = strings.Cut(name, Separator) // a prefixed name never registered
		}
		if why := e.down(server); why != "" {
			return res, &jsonrpc.Error{Code: coded.Code, Message: fmt.Sprintf("%s: server %q is %s", coded.Message, server, why)}
		}
		return res, err
	}
}

// goneServer returns the server that last exposed the tool (method
// "tools/call") or prompt name and has let it go, or "".
func (e *Endpoint) goneServer(method, name string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if method == "tools/call" {
		return e.tools.goneServer(name)
	}
	return e.prompts.goneServer(name)
}

// Name returns the session name.
func (e *Endpoint) Name() string { return e.name }

// Server returns the endpoint's MCP server, for a transport or an HTTP
// handler to serve.
func (e *Endpoint) Server() *mcp.Server { return e.srv }

// Changes counts the registrations added, replaced or removed so far; each
// change is (after the go-sdk's short debounce) a list_changed sent to every
// connected client. Compare two readings to see whether clients were
// notified in between.
func (e *Endpoint) Changes() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changes
}

// Clients returns how many client sessions are connected: those that have
// initialized, or, at protocol 2026-07-28, carry a request's initialize
// parameters. The short-lived session go-sdk opens to answer a client's
// server/discover probe is not one: counting it refused the same client's
// initialize, sent while the probe's session was still being closed, once
// the endpoint had one place left.
func (e *Endpoint) Clients() int {
	n := 0
	for ss := range e.srv.Sessions() {
		if ss.InitializeParams() != nil {
			n++
		}
	}
	return n
}

// A ClientInfo describes one connected client session as its initialize
// request did (the client's own words: display them as text).
type ClientInfo struct {
	Name            string `json:"name"`
	Version         string `json:"version,omitempty"`
	ProtocolVersion string `json:"protocolVersion,omitempty"`
}

// Bounds of ClientInfos: a client chooses what its initialize says, and
// the operator page polls the list.
const (
	// MaxClientInfos is the most clients ClientInfos describes (Clients
	// counts them all).
	MaxClientInfos = 100
	// maxClientInfoLen bounds each field, in bytes; a longer one is cut
	// and marked with "…".
	maxClientInfoLen = 128
)

// ClientInfos describes the client sessions Clients counts, sorted by
// name, version and protocol version: at most MaxClientInfos of them,
// each field cut to 128 bytes.
func (e *Endpoint) ClientInfos() []ClientInfo {
	out := []ClientInfo{}
	for ss := range e.srv.Sessions() {
		p := ss.InitializeParams()
		if p == nil {
			continue
		}
		ci := ClientInfo{ProtocolVersion: clipInfo(p.ProtocolVersion)}
		if p.ClientInfo != nil {
			ci.Name, ci.Version = clipInfo(p.ClientInfo.Name), clipInfo(p.ClientInfo.Version)
		}
		out = append(out, ci)
	}
	slices.SortFunc(out, func(a, b ClientInfo) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Version, b.Version), cmp.Compare(a.ProtocolVersion, b.ProtocolVersion))
	})
	return out[:min(len(out), MaxClientInfos)]
}

// clipInfo cuts s to maxClientInfoLen bytes.
func clipInfo(s string) string { return clip.String(s, maxClientInfoLen) }

// Tools returns the exposed tool names, sorted.
func (e *Endpoint) Tools() []string { return e.names(&e.tools) }

// Prompts returns the exposed prompt names, sorted.
func (e *Endpoint) Prompts() []string { return e.names(&e.prompts) }

// Resources returns the exposed resource URIs, sorted.
func (e *Endpoint) Resources() []string { return e.names(&e.resources) }

// ResourceTemplates returns the exposed URI templates, sorted.
func (e *Endpoint) ResourceTemplates() []string { return e.names(&e.templates) }

func (e *Endpoint) names(k *kind) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Sorted(maps.Keys(k.routes))
}

// Close closes every connected client session, first cancelling the
// upstream requests of the calls they have under way through HTTPHandler
// (closing a session waits for its calls). Registrations stay; the
// endpoint can still be served again.
func (e *Endpoint) Close() {
	for ss := range e.srv.Sessions() {
		done := func() {}
		if id := ss.ID(); id != "" {
			done = e.carriers.end(id)
		}
		_ = ss.Close()
		done()
	}
}

// The bounds of a stop, for the daemon and stdio mode alike.
const (
	// DrainGrace is how long a stop gives the calls under way (the ctx it
	// passes Drain) before they are cut short.
	DrainGrace = 10 * time.Second
	// AnswerGrace bounds the wait, once the calls have returned, for their
	// answers to be written to the client.
	AnswerGrace = 2 * time.Second
)

// cutShortGrace bounds how long Drain waits for the calls it cut short to
// return; a cancelled upstream call returns at once. A variable so that
// tests of a call stuck past it need not wait it out (SetCutShortGrace).
var cutShortGrace = 2 * time.Second

// Drain makes the endpoint refuse new tool calls, prompt gets and resource
// reads (with ErrDraining) and waits until those under way have returned.
// If ctx ends first, it cuts the calls still under way short: their
// upstream calls are cancelled and their clients get an answer wrapping
// ErrDraining; Drain then waits a moment for them to return and reports
// how many there were, wrapping ctx's cause. A daemon drains its sessions
// before it closes them, so that every call under way gets an answer. Drain
// may be called more than once; the endpoint stays draining.
func (e *Endpoint) Drain(ctx context.Context) error {
	e.calls.Close()
	err := e.calls.Wait(ctx)
	if err == nil {
		return nil
	}
	e.cutShort()
	wctx, cancel := context.WithTimeout(context.Background(), cutShortGrace)
	defer cancel()
	_ = e.calls.Wait(wctx)
	return fmt.Errorf("session %q: drain: calls cut short: %w", e.name, err)
}

// cutShortError is the error of a call Drain cut short, or nil when the
// call ended otherwise.
func (e *Endpoint) cutShortError(format string, args ...any) error {
	if e.abort.Err() == nil {
		return nil // checked on every call: nothing formatted
	}
	return fmt.Errorf("session %q: %s: %w (cut short: the call outlived the drain's grace)", e.name, fmt.Sprintf(format, args...), ErrDraining)
}

// sdkLogs is the handler of the go-sdk server's logger: it keeps records
// from level on, except that the warning the go-sdk logs when a
// notification finds no stream to go out on is demoted to debug. A client
// of streamable HTTP need not keep a GET stream open, and one that left
// without a DELETE (the Inspector CLI, curl) stays until the idle timeout:
// a list change for such a client is not a fault, and a reload would
// otherwise log a warning for each.
type sdkLogs struct {
	slog.Handler
	level slog.Level
}

func (h sdkLogs) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level && h.Handler.Enabled(ctx, l)
}

func (h sdkLogs) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && strings.HasPrefix(r.Message, "calling notifications/") && strings.Contains(r.Message, "stream not connected") {
		if !h.Handler.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	return h.Handler.Handle(ctx, r)
}

func (h sdkLogs) WithAttrs(attrs []slog.Attr) slog.Handler {
	return sdkLogs{h.Handler.WithAttrs(attrs), h.level}
}

func (h sdkLogs) WithGroup(name string) slog.Handler {
	return sdkLogs{h.Handler.WithGroup(name), h.level}
}
