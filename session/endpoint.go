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
	"github.com/wasmhost/wasmhost/internal/mcpname"
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
	// Session is the upstream connection; nil when it is not ready.
	Session *mcp.ClientSession
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

// taken reports (and logs) whether another server than server already holds
// exposed among k's routes; if so, put, which registers server's item,
// waits for the name to be let go. e.mu is held.
func (e *Endpoint) taken(k *kind, exposed, server string, put func()) bool {
	old, ok := k.routes[exposed]
	if !ok || old.server == server {
		return false
	}
	if k.waiting[exposed] == nil {
		k.waiting[exposed] = make(map[string]func())
	}
	k.waiting[exposed][server] = put
	e.log.Warn("name collision: "+k.name+" left out", "name", exposed, "server", server, "owner", old.server)
	return true
}

// unregister removes the exposed names of k that server holds, from k and
// from the MCP server, and forgets those of server's that wait for their
// name. A name let go goes to the registration waiting for it, if any
// (promote). e.mu is held.
func (e *Endpoint) unregister(k *kind, server string, exposed []string) {
	var gone []string
	for _, x := range exposed {
		if r, ok := k.routes[x]; ok && r.server == server {
			delete(k.routes, x)
			gone = append(gone, x)
		} else if ws := k.waiting[x]; ws != nil {
			delete(ws, server)
			if len(ws) == 0 {
				delete(k.waiting, x)
			}
		}
	}
	if len(gone) > 0 {
		k.remove(gone...)
		e.changes += uint64(len(gone))
	}
	for _, x := range gone {
		k.promote(x)
	}
}

// promote registers the item that waits for exposed, from the first server
// by name, now that nothing holds the name; if that item cannot be
// registered (a put may refuse it), the next waiting one gets the name.
// e.mu is held.
func (k *kind) promote(exposed string) {
	for {
		ws := k.waiting[exposed]
		if len(ws) == 0 {
			return
		}
		if _, held := k.routes[exposed]; held {
			return
		}
		first := slices.Min(slices.Collect(maps.Keys(ws)))
		put := ws[first]
		delete(ws, first)
		if len(ws) == 0 {
			delete(k.waiting, exposed)
		}
		put()
	}
}

// PutTools implements view.Registry: it registers each tool under the name
// the session's naming gives it (see Names in the package documentation),
// replacing an earlier registration.
func (e *Endpoint) PutTools(server string, tools []*mcp.Tool) {
	e.putMu.Lock()
	defer e.putMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	adds := make(map[string]func(string) error, len(tools))
	upstream := make(map[string]string)
	var refused []string
	for _, t := range tools {
		if err := checkToolName(t.Name); err != nil {
			e.log.Warn("upstream tool cannot be served, left out", "server", server, "tool", t.Name, "err", err)
			refused = append(refused, t.Name) // an earlier version of it
			continue
		}
		if up, ok := upstreamName(t.Meta); ok {
			upstream[t.Name] = up
		}
		adds[t.Name] = func(exposed string) error {
			c, err := exposedTool(t, exposed)
			if err == nil {
				err = addTool(e.srv, c, e.forwardTool)
			}
			return err
		}
	}
	if len(refused) > 0 {
		e.deleteNamed(&e.tools, server, refused)
	}
	e.putNamed(&e.tools, server, adds, upstream)
}

// putChunk is how many items a Put method registers between two pauses
// (pause). The go-sdk's Add methods take tens of microseconds an item
// (AddTool encodes and decodes the input schema twice), and every call of
// the session waits for e.mu to look its name up: holding it for a whole
// batch of a large server held its calls for as long.
const putChunk = 32

// pause lets go of e.mu for a moment before item i of a batch when i is a
// multiple of putChunk, so that calls waiting to look a name up get it
// (sync.Mutex hands itself to a waiter that has waited a millisecond).
// Each item is registered under e.mu whole; a call made meanwhile sees
// the batch part done, as a call made a moment earlier or later would see
// none or all of it. e.mu is held.
func (e *Endpoint) pause(i int) {
	if i > 0 && i%putChunk == 0 {
		e.mu.Unlock()
		e.mu.Lock()
	}
}

// checkToolName refuses an upstream tool name that breaks the MCP naming
// rule (A-Z, a-z, 0-9, '_', '-' and '.'), or is longer than the rule's 128
// characters. The go-sdk serves such a tool and only logs it, but strict
// clients, and the model APIs behind them, refuse a whole tool list for one
// such name, so one server's odd name would cost the session every other
// server's tools. (The server's own name is the operator's: the config
// loader warns about one outside the rule.)
func checkToolName(name string) error {
	if len(name) > mcpname.MaxLen {
		return fmt.Errorf("the name is %d bytes long, over the %d the MCP naming rule allows", len(name), mcpname.MaxLen)
	}
	if r, bad := mcpname.BadRune(name); bad {
		return fmt.Errorf("the name has %q, outside the MCP naming rule (A-Z, a-z, 0-9, '_', '-', '.')", r)
	}
	return nil
}

// DeleteTools implements view.Registry.
func (e *Endpoint) DeleteTools(server string, names []string) {
	e.putMu.Lock()
	defer e.putMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.deleteNamed(&e.tools, server, names)
}

// PutPrompts implements view.Registry: it registers each prompt under the
// name the session's naming gives it, as PutTools does.
func (e *Endpoint) PutPrompts(server string, prompts []*mcp.Prompt) {
	e.putMu.Lock()
	defer e.putMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	adds := make(map[string]func(string) error, len(prompts))
	upstream := make(map[string]string)
	for _, p := range prompts {
		if up, ok := upstreamName(p.Meta); ok {
			upstream[p.Name] = up
		}
		adds[p.Name] = func(exposed string) error {
			c := *p
			c.Name = exposed
			c.Meta = withoutUpstreamName(p.Meta)
			e.srv.AddPrompt(&c, e.forwardPrompt)
			return nil
		}
	}
	e.putNamed(&e.prompts, server, adds, upstream)
}

// DeletePrompts implements view.Registry.
func (e *Endpoint) DeletePrompts(server string, names []string) {
	e.putMu.Lock()
	defer e.putMu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.deleteNamed(&e.prompts, server, names)
}

// PutResources implements view.Registry: resources keep their URIs.
func (e *Endpoint) PutResources(server string, resources []*mcp.Resource) {
	defer e.routesChanged() // after the lock: see syncSubscriptions
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, r := range resources {
		e.pause(i)
		e.putResource(server, r)
	}
}

// putResource registers one resource of server. e.mu is held.
func (e *Endpoint) putResource(server string, r *mcp.Resource) {
	if e.taken(&e.resources, r.URI, server, func() { e.putResource(server, r) }) {
		return
	}
	if err := addResource(e.srv, r, e.forwardResource); err != nil {
		e.log.Warn("upstream resource cannot be served, left out", "server", server, "uri", r.URI, "err", err)
		return
	}
	e.resources.routes[r.URI] = route{server, r.URI}
	e.changes++
}

// DeleteResources implements view.Registry.
func (e *Endpoint) DeleteResources(server string, uris []string) {
	defer e.routesChanged() // after the lock: see syncSubscriptions
	e.mu.Lock()
	defer e.mu.Unlock()
	e.unregister(&e.resources, server, uris)
}

// PutResourceTemplates implements view.TemplateRegistry: templates keep
// their URI templates, and a read of a URI that no resource has and a
// template matches goes to the template's server.
func (e *Endpoint) PutResourceTemplates(server string, templates []*mcp.ResourceTemplate) {
	defer e.routesChanged() // after the lock: see syncSubscriptions
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, t := range templates {
		e.pause(i)
		e.putTemplate(server, t)
	}
}

// putTemplate registers one resource template of server. e.mu is held.
func (e *Endpoint) putTemplate(server string, t *mcp.ResourceTemplate) {
	key := t.URITemplate
	if e.taken(&e.templates, key, server, func() { e.putTemplate(server, t) }) {
		return
	}
	read := func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return e.read(ctx, req, &e.templates, key)
	}
	if err := addTemplate(e.srv, t, read); err != nil {
		e.log.Warn("upstream resource template cannot be served, left out", "server", server, "uriTemplate", key, "err", err)
		return
	}
	e.templates.routes[key] = route{server, key}
	e.changes++
}

// DeleteResourceTemplates implements view.TemplateRegistry.
func (e *Endpoint) DeleteResourceTemplates(server string, uriTemplates []string) {
	defer e.routesChanged() // after the lock: see syncSubscriptions
	e.mu.Lock()
	defer e.mu.Unlock()
	e.unregister(&e.templates, server, uriTemplates)
}

// exposedTool returns a copy of t named exposed, with an input schema the
// go-sdk server accepts: a missing schema or one without "type" becomes an
// object schema. The projection's tool is never modified.
func exposedTool(t *mcp.Tool, exposed string) (*mcp.Tool, error) {
	c := *t
	c.Name = exposed
	c.Meta = withoutUpstreamName(t.Meta)
	switch s := t.InputSchema.(type) {
	case nil:
		c.InputSchema = map[string]any{"type": "object"}
	case map[string]any:
		if _, ok := s["type"]; !ok {
			m := maps.Clone(s)
			m["type"] = "object"
			c.InputSchema = m
		} else if s["type"] != "object" {
			return nil, fmt.Errorf("input schema type is %v, not \"object\"", s["type"])
		}
	}
	return &c, nil
}

// upstreamName returns the upstream's own name of an item the policy
// renamed (view.MetaUpstreamName in its Meta), and whether there is one.
func upstreamName(m mcp.Meta) (string, bool) {
	up, ok := m[view.MetaUpstreamName].(string)
	return up, ok && up != ""
}

// withoutUpstreamName returns m without view.MetaUpstreamName, copying it
// only when it has that key (and nil when nothing else is left): the
// upstream's name of a renamed item is the session's to route by, not its
// clients' to see.
func withoutUpstreamName(m mcp.Meta) mcp.Meta {
	if _, ok := m[view.MetaUpstreamName]; !ok {
		return m
	}
	c := maps.Clone(m)
	delete(c, view.MetaUpstreamName)
	if len(c) == 0 {
		return nil
	}
	return c
}

// addTool calls srv.AddTool, turning its panics (an input schema it
// refuses) into errors.
func addTool(srv *mcp.Server, t *mcp.Tool, h mcp.ToolHandler) error {
	return unpanic(func() { srv.AddTool(t, h) })
}

// addResource calls srv.AddResource, turning its panic (an unparsable URI)
// into an error.
func addResource(srv *mcp.Server, r *mcp.Resource, h mcp.ResourceHandler) error {
	return unpanic(func() { srv.AddResource(r, h) })
}

// addTemplate calls srv.AddResourceTemplate, turning its panic (an invalid
// URI template) into an error.
func addTemplate(srv *mcp.Server, t *mcp.ResourceTemplate, h mcp.ResourceHandler) error {
	return unpanic(func() { srv.AddResourceTemplate(t, h) })
}

// unpanic runs add, one of the go-sdk's Add methods, and returns the panic
// it raises for input it refuses as an error.
func unpanic(add func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	add()
	return nil
}

// lookup returns the route of exposed in k at this instant.
func (e *Endpoint) lookup(k *kind, exposed string) (route, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := k.routes[exposed]
	return r, ok
}

// begin looks exposed up in k for a call to forward and, when it is found,
// admits the call (the caller then calls e.calls.Leave). Once the endpoint
// drains, it returns an error wrapping ErrDraining instead.
func (e *Endpoint) begin(k *kind, exposed string) (_ route, ok bool, err error) {
	if !e.calls.Enter() {
		return route{}, false, fmt.Errorf("session %q: %w", e.name, ErrDraining)
	}
	r, ok := e.lookup(k, exposed)
	if !ok {
		e.calls.Leave()
	}
	return r, ok, nil
}

// still reports whether exposed still routes to r in k. A call checks it
// once target has given it its upstream: Options.Upstream gives none while
// the session's registrations lag its settings (pool.Handle.Session), so a
// call that found its name in registrations a reload had already made
// stale, and got its upstream only once they caught up, is refused here
// rather than forwarded under the old projection.
func (e *Endpoint) still(k *kind, exposed string, r route) bool {
	cur, ok := e.lookup(k, exposed)
	return ok && cur == r
}

// unknown is the refusal of a name (or URI) k does not have.
func unknown(k *kind, name string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown %s %q", k.name, name)}
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
// return; a cancelled upstream call returns at once.
const cutShortGrace = 2 * time.Second

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

// target returns the upstream for server and a context for a call with
// extra, bounded by the server's timeout (when it has one) and cancelled
// when Drain cuts calls short or the call's answer can no longer reach its
// client (see HTTPHandler), or an error wrapping ErrUnavailable (or
// ErrDraining, when Drain has already cut calls short).
func (e *Endpoint) target(ctx context.Context, extra *mcp.RequestExtra, server string) (*mcp.ClientSession, context.Context, context.CancelFunc, error) {
	t := e.upstream(server)
	if t.Session == nil {
		return nil, nil, nil, e.notReady(server)
	}
	var cancel context.CancelFunc
	if t.Timeout > 0 {
		ctx, cancel = context.WithTimeout(context.WithValue(ctx, callTimeoutKey{}, t.Timeout), t.Timeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	stop := context.AfterFunc(e.abort, cancel) // Drain cutting calls short
	stopCarrier := func() bool { return true }
	carrier := e.carriers.of(extra)
	if carrier != nil {
		stopCarrier = context.AfterFunc(carrier.ctx, cancel) // the client gone
	}
	if err := e.cutShortError("server %q", server); err != nil {
		// AfterFunc cancels in a goroutine of its own: the call must not
		// reach the upstream before that.
		stop()
		stopCarrier()
		cancel()
		return nil, nil, nil, err
	}
	if carrier != nil && carrier.w != nil {
		carrier.w.startCall() // its answer may take a while: keep its stream alive
	}
	return t.Session, ctx, func() { stop(); stopCarrier(); cancel() }, nil
}

// notReady is the error of a call (or subscription) to server while it has
// no connection: one being made or remade.
func (e *Endpoint) notReady(server string) error {
	return fmt.Errorf("session %q, server %q: %w (connecting or restarting; try again)", e.name, server, ErrUnavailable)
}

// forwardTool serves tools/call.
func (e *Endpoint) forwardTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	exposed := req.Params.Name
	r, ok, err := e.begin(&e.tools, exposed)
	if err != nil {
		return errorResult(err), nil
	}
	if !ok {
		return nil, unknown(&e.tools, exposed)
	}
	defer e.calls.Leave()
	cs, ctx, cancel, err := e.target(ctx, req.Extra, r.server)
	if err != nil {
		e.observe(r.server, "tools/call", time.Time{}, failureOutcome(nil, err, false))
		return errorResult(err), nil
	}
	defer cancel()
	if !e.still(&e.tools, exposed, r) {
		return nil, unknown(&e.tools, exposed)
	}
	params := &mcp.CallToolParams{
		Name:           r.name,
		Meta:           forwardMeta(cs, req.Session, req.Params.Meta, e.level(req.Session)),
		InputResponses: req.Params.InputResponses,
		RequestState:   req.Params.RequestState,
	}
	if len(req.Params.Arguments) > 0 {
		params.Arguments = req.Params.Arguments
	}
	end := e.relayProgress(ctx, req.Session, req.Params.GetProgressToken(), params)
	bctx, endBridge := e.relay.beginBridge(ctx, cs, req.Session)
	start := time.Now()
	res, err := cs.CallTool(bctx, params)
	endBridge()
	end()
	if err != nil {
		ferr, upstream := e.callFailure(ctx, err, r.server, "tool", exposed)
		e.observe(r.server, "tools/call", start, failureOutcome(ctx.Err(), ferr, upstream))
		switch {
		case upstream:
			return nil, ferr
		case errors.Is(ferr, ErrUnavailable) && ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
			return nil, err // the client went away or cancelled
		}
		return errorResult(ferr), nil
	}
	if res.IsError {
		e.observe(r.server, "tools/call", start, OutcomeToolError)
	} else {
		e.observe(r.server, "tools/call", start, OutcomeOK)
	}
	res.Meta = dropReserved(res.Meta)
	return res, nil
}

// forwardPrompt serves prompts/get.
func (e *Endpoint) forwardPrompt(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	exposed := req.Params.Name
	r, ok, err := e.begin(&e.prompts, exposed)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, unknown(&e.prompts, exposed)
	}
	defer e.calls.Leave()
	cs, ctx, cancel, err := e.target(ctx, req.Extra, r.server)
	if err != nil {
		e.observe(r.server, "prompts/get", time.Time{}, failureOutcome(nil, err, false))
		return nil, err
	}
	defer cancel()
	if !e.still(&e.prompts, exposed, r) {
		return nil, unknown(&e.prompts, exposed)
	}
	params := &mcp.GetPromptParams{
		Name:           r.name,
		Arguments:      req.Params.Arguments,
		Meta:           forwardMeta(cs, req.Session, req.Params.Meta, e.level(req.Session)),
		InputResponses: req.Params.InputResponses,
		RequestState:   req.Params.RequestState,
	}
	end := e.relayProgress(ctx, req.Session, req.Params.GetProgressToken(), params)
	bctx, endBridge := e.relay.beginBridge(ctx, cs, req.Session)
	start := time.Now()
	res, err := cs.GetPrompt(bctx, params)
	endBridge()
	end()
	if err != nil {
		ferr, upstream := e.callFailure(ctx, err, r.server, "prompt", exposed)
		e.observe(r.server, "prompts/get", start, failureOutcome(ctx.Err(), ferr, upstream))
		return nil, ferr
	}
	e.observe(r.server, "prompts/get", start, OutcomeOK)
	res.Meta = dropReserved(res.Meta)
	return res, nil
}

// forwardResource serves resources/read.
func (e *Endpoint) forwardResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	return e.read(ctx, req, &e.resources, req.Params.URI)
}

// read forwards resources/read to the server that key (a resource's URI or
// a template's URI template) routes to in k.
func (e *Endpoint) read(ctx context.Context, req *mcp.ReadResourceRequest, k *kind, key string) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	r, ok, err := e.begin(k, key)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	defer e.calls.Leave()
	cs, ctx, cancel, err := e.target(ctx, req.Extra, r.server)
	if err != nil {
		e.observe(r.server, "resources/read", time.Time{}, failureOutcome(nil, err, false))
		return nil, err
	}
	defer cancel()
	if !e.still(k, key, r) {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	params := &mcp.ReadResourceParams{
		URI:            uri,
		Meta:           forwardMeta(cs, req.Session, req.Params.Meta, e.level(req.Session)),
		InputResponses: req.Params.InputResponses,
		RequestState:   req.Params.RequestState,
	}
	end := e.relayProgress(ctx, req.Session, req.Params.GetProgressToken(), params)
	bctx, endBridge := e.relay.beginBridge(ctx, cs, req.Session)
	start := time.Now()
	res, err := cs.ReadResource(bctx, params)
	endBridge()
	end()
	if err != nil {
		ferr, upstream := e.callFailure(ctx, err, r.server, "resource", uri)
		e.observe(r.server, "resources/read", start, failureOutcome(ctx.Err(), ferr, upstream))
		return nil, ferr
	}
	e.observe(r.server, "resources/read", start, OutcomeOK)
	res.Meta = dropReserved(res.Meta)
	return res, nil
}

// callFailure sorts out err, the failure of a call forwarded to server
// under ctx, the call's context from target (what is "tool", "prompt" or
// "resource", name the name or URI the client used): the upstream's own
// JSON-RPC error is returned as it is, with upstream true; any other
// failure is named, wrapping ErrDraining when Drain cut the call short,
// ErrTimeout when the server's timeout ended it, and ErrUnavailable
// otherwise.
func (e *Endpoint) callFailure(ctx context.Context, err error, server, what, name string) (_ error, upstream bool) {
	if werr := upstreamError(err); werr != nil {
		return werr, true
	}
	if cerr := e.cutShortError("server %q: %s %q", server, what, name); cerr != nil {
		return cerr, false
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The timeout the call ran under: the server's may have changed
		// since, or its binding gone.
		timeout, _ := ctx.Value(callTimeoutKey{}).(time.Duration)
		// Only the client hears of it otherwise: a server that hangs is
		// the operator's to look at.
		e.log.Warn("upstream call timed out; the upstream request was cancelled", "server", server, what, name, "timeout", timeout)
		return fmt.Errorf("session %q, server %q: %s %q: %w (the server entry's \"timeout\", %s); the upstream request was cancelled",
			e.name, server, what, name, ErrTimeout, timeout), false
	}
	return fmt.Errorf("session %q, server %q: %s %q: %w: %v", e.name, server, what, name, ErrUnavailable, e.redact(err)), false
}

// callTimeoutKey is the context key of the timeout target bounded a call
// by (a time.Duration), for callFailure to name.
type callTimeoutKey struct{}

// progressParams are request params that carry a progress token.
type progressParams interface {
	SetProgressToken(any)
}

// relayProgress, when the client asked for progress (token != nil) and a
// relay is configured, gives params a fresh upstream token whose progress
// notifications are sent to ss with the client's token. The returned func
// ends the relay after the call, once every notification received before
// the response has been passed on.
func (e *Endpoint) relayProgress(ctx context.Context, ss *mcp.ServerSession, token any, params progressParams) func() {
	if token == nil || e.relay == nil || ss == nil {
		return func() {}
	}
	upTok, end := e.relay.begin(func(p *mcp.ProgressNotificationParams) {
		err := ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			Meta:          dropReserved(maps.Clone(p.Meta)),
			ProgressToken: token,
			Progress:      p.Progress,
			Total:         p.Total,
			Message:       p.Message,
		})
		if err != nil {
			e.log.Debug("relaying progress", "err", err)
		}
	})
	params.SetProgressToken(upTok)
	return end
}

// reservedMeta starts the _meta keys the protocol reserves for a
// connection itself (protocol version, client and server info and
// capabilities, log level, subscription id): they describe one hop, the
// client's connection to wasmhost or wasmhost's to the upstream, and are
// never relayed across.
const reservedMeta = "io.modelcontextprotocol/"

// relayMeta returns the request _meta to forward: everything the client
// sent except the progress token (the relay sets its own) and the reserved
// keys.
func relayMeta(m mcp.Meta) mcp.Meta {
	n := 0
	for k := range m {
		if relayed(k) {
			n++
		}
	}
	if n == 0 {
		return nil // no map to make: most requests carry only dropped keys
	}
	out := make(mcp.Meta, n)
	for k, v := range m {
		if relayed(k) {
			out[k] = v
		}
	}
	return out
}

// relayed reports whether relayMeta forwards the request _meta key k.
func relayed(k string) bool {
	return k != "progressToken" && !strings.HasPrefix(k, reservedMeta)
}

// dropReserved removes the reserved keys from an upstream result's _meta
// (the result is the endpoint's own copy).
func dropReserved(m mcp.Meta) mcp.Meta {
	for k := range m {
		if strings.HasPrefix(k, reservedMeta) {
			delete(m, k)
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// upstreamError returns the upstream's own JSON-RPC error inside err, to be
// relayed unchanged, or nil when err is a transport failure. The go-sdk's
// client reports a request its transport could not deliver (an HTTP
// upstream that is gone, say) with a JSON-RPC error of its own making,
// jsonrpc2.ErrRejected: that one is a transport failure too, and the
// client gets the message that names the server.
func upstreamError(err error) *jsonrpc.Error {
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) {
		return nil
	}
	if werr.Code == rejectedCode && werr.Message == rejectedMessage {
		return nil
	}
	return werr
}

// The code and message of the go-sdk's jsonrpc2.ErrRejected (internal to
// the go-sdk, so matched by value).
const (
	rejectedCode    = -32005
	rejectedMessage = "rejected by transport"
)

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

// errorResult is a tool result reporting err to the client (and its model).
func errorResult(err error) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: "wasmhost: " + err.Error()}},
	}
}
