// Package session serves one wasmhost session to MCP clients: an
// [Endpoint] is a go-sdk *mcp.Server whose tools, prompts and resources are
// exactly the session's current projection, and whose handlers forward each
// call to the shared upstream connection.
//
// # Registry
//
// An Endpoint implements [view.Registry]: the session's views put and delete
// items as their projections change, and the Endpoint adds them to or removes
// them from its mcp.Server, which tells connected clients with
// notifications/tools/list_changed (and the prompt and resource ones). The
// views only call when what a session sees actually changed, so clients are
// notified when, and only when, their list changed. The Endpoint never calls
// back into a view.
//
// # Names
//
// Several upstream servers share one session namespace. How tools and
// prompts are named is the session's [Naming] ([Endpoint.SetNaming]):
// [NamesAuto] exposes each under the upstream's own name, and as
// "<server>__<name>" ([Separator], [ExposedName]) only where another item
// of the session could use that name; [NamesPrefixed] always prefixes;
// [NamesBare] never does. A server's fixed prefix (Naming.Prefix) applies
// whatever the mode, "" meaning its own names. The result depends only on
// the items and the naming, never on the order they came in: each item
// gets the first of its candidate names (own, then prefixed, for auto) that
// no other item has among its candidates, and is left out, with a warning,
// when none is free. So a name one item holds never goes to another while
// the first is there: when a server arriving brings a clash, both items of
// it move to their prefixed names (clients get list_changed) and the bare
// name becomes unknown; in bare mode both are left out. Every exposed name
// is at most [MaxNameLen] bytes ([ShortName]). The zero Naming prefixes
// everything; the config's default is auto (see docs/architecture.md for
// the trade-off).
//
// A policy plugin that renames (abi/SPEC.md section 5.3) names an item
// first: the view's projection carries the plugin's name as the item's
// name and the upstream's in _meta (view.MetaUpstreamName). The naming
// above then applies to the plugin's name, as it would to an upstream
// name: prefixed, a tool the plugin names "short" on server "gh" is
// "gh__short". Calls of the exposed name reach the upstream under its own
// name, and clients never see view.MetaUpstreamName.
//
// A name a server let go because it went down is remembered until it
// registers again, so that a call of it is told the server is down
// ([Options.Unavailable]), whatever the naming.
//
// # Instructions
//
// [Endpoint.SetInstructions] names the servers whose instructions (from
// their initialize result) reach the session's clients: at initialize, a
// client gets those of the servers the session sees something of and that
// are connected, combined by [Endpoint.Instructions]. A client connected
// before a change keeps the text it got.
//
// Resources keep their URIs, because tool results and clients refer to
// resources by URI; the Endpoint records which server owns each URI and
// forwards reads there. Two servers publishing the same URI in one session
// collide the same way: the first keeps it. Resource templates keep their
// URI templates too ([Endpoint] is a [view.TemplateRegistry]): a read of a
// URI that no resource has and a template matches goes to the template's
// server.
//
// The session flags set by the view are left in each tool's _meta, under
// "wasmhost/trust" ([view.MetaTrust]) and "wasmhost/alwaysLoad"
// ([view.MetaAlwaysLoad]).
//
// # Forwarding
//
// Each handler looks the upstream up at call time through
// [Options.Upstream], so a call made after a transport restart uses the new
// connection. tools/call forwards the arguments unchanged and the request's
// _meta minus the protocol's reserved per-request keys; a progress token is
// replaced by one unique to the upstream connection and the upstream's
// notifications/progress are relayed back to the caller with the client's
// own token (through a [ProgressRelay], which reads them off the upstream
// connection in wire order, so each reaches the client before the call's
// result). A tool result with isError is relayed as is, and so is a JSON-RPC
// error from the upstream. When the upstream is restarting or gone, or the
// connection breaks during the call, the client gets a tool result with
// isError set and a message naming the server (prompts/get and
// resources/read, which have no such result, get a JSON-RPC error).
// prompts/get and resources/read are forwarded the same way. A client's
// cancellation cancels the upstream call (the go-sdk sends
// notifications/cancelled on both legs), and so, over HTTP
// ([Endpoint.HTTPHandler]), does a client's leaving: the POST that carried
// the call ending first, a DELETE of its session, or [Endpoint.Close].
// Over HTTP, a call's response headers are sent as soon as the call goes
// upstream, and an event stream with nothing to carry gets an SSE comment
// every [Options.KeepAlive] ([DefaultKeepAlive], as the TypeScript SDK's
// servers do): the go-sdk's server sends nothing until it has a message,
// and clients drop a stream silent for long (after 300 s for those on
// Node's fetch and for the Python SDK's).
//
// completion/complete is forwarded too: a prompt reference by the name the
// session exposes it under (see Names),
// a resource reference by URI template (or resource URI), each only when
// the session sees it. The Endpoint announces completions for the whole
// session, so a server that announces none gets no request and the client
// an empty list of values.
//
// # Subscriptions
//
// A client may subscribe to the URI of a resource the session sees, or one
// a resource template of it matches. The Endpoint holds one subscription
// per URI for all its clients, through the server's [pool.Subscriber]
// ([Target.Subscriptions]), and the pool one per URI and connection for all
// its sessions, so an upstream hears of each URI once. Its
// notifications/resources/updated go to the clients subscribed, queued off
// the upstream's notification goroutine, without the reserved _meta keys of
// the upstream hop. The Endpoint lets the upstream subscription go when its
// last client unsubscribes or leaves (a client of a protocol before
// 2026-07-28 that leaves without unsubscribing is noticed when the go-sdk
// has seen it go), and moves it
// when a reload hides the URI (then it is let go) or routes it through
// another connection, trying again with a growing delay while that
// connection is not ready; the pool subscribes again after an upstream
// restart. A URI that templates of two servers match routes like a read:
// to the first template in sorted order.
//
// Not forwarded, in either direction, and not announced: sampling,
// elicitation and roots requests an upstream sends on its own, and logging.
// Each concerns one client, and the upstream connection serves many.
//
// # Input requests
//
// What an upstream asks within one call is forwarded: an input-required
// result (SEP-2322, protocol 2026-07-28) of tools/call, prompts/get or
// resources/read goes to the client that made the call, and the call it
// repeats with the answers (inputResponses and the echoed requestState)
// back to the same server. A client of an older protocol is asked by the
// go-sdk's server on the Endpoint's behalf. Each forwarded call tells the
// upstream the calling client's elicitation and sampling capabilities
// (under mcp.MetaKeyClientCapabilities in the request's _meta, when the
// upstream link speaks 2026-07-28), so the upstream asks only a client
// that can answer.
//
// # Enforcement
//
// A call is served only if its name (or URI) is in the session's projection
// at the moment the call starts; otherwise it is refused exactly like an
// unknown name (invalid params for tools and prompts, resource not found for
// resources), so a client guessing a hidden tool learns nothing. Only when
// the name's server is one of the session's own and shows it nothing
// because it is down ([Options.Unavailable]) does the refusal say so. The check
// reads the Endpoint's own registrations, which are this session's views'
// doing only: a call racing with a reload that hides the tool is either
// refused or completed through this session's upstream handle, never routed
// through another session. The name is checked again once the call has its
// upstream, and [Options.Upstream] gives none while the registrations lag
// the session's settings (a reload taken during a restart, until the
// restart's fan-out replays it: pool.Handle.Session), so a call made after
// a reload was answered never reaches the upstream under the old
// projection. No policy (wasm) call is made on the call path.
package session
