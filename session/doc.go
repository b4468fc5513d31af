// Package session serves one wasmhost session to MCP clients: an
// [Endpoint] is a go-sdk *mcp.Server whose tools, prompts, resources and
// resource templates are exactly the session's current projection
// ([view.Registry]), and whose handlers forward each call to the server's
// upstream connection, looked up at call time ([Options.Upstream]).
//
// It owns what a client of the session sees and sends. That is exposed
// names ([Naming]: auto, prefixed or bare, [ShortName]) and call-time
// enforcement (a hidden name is refused like an unknown one). It is the
// forwarding of calls, completion, progress ([ProgressRelay]),
// cancellation, subscriptions and input-required results. It routes the
// requests and log messages an upstream sends on its own (to the client
// whose call caused them, or refused). It also owns instructions,
// keep-alive comments on event streams, and drains. It reads pool handles
// and views; it never calls back into a view and holds no transport.
//
// What passes through a session is described in docs/protocol.md; the
// naming rule and other reasons in docs/design.md.
package session
