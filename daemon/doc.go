// Package daemon runs wasmhost as a long-lived MCP gateway: it loads a
// config file, loads the policy plugin, shares upstream MCP connections
// between sessions through a transport pool, and serves each session to MCP
// clients over streamable HTTP.
//
// # Endpoints
//
// Everything is served on the config's "listen" address (loopback by
// default; a non-loopback address needs [Options.AllowRemote]):
//
//	POST, GET, DELETE /mcp/{session}    the session's MCP endpoint (go-sdk streamable HTTP)
//	GET    /healthz                     "ok" while the process serves (no authentication)
//	GET    /readyz                      "ready" once the first config is applied, 503 while
//	                                    starting and once stopping (no authentication)
//	GET    /metrics                     Prometheus metrics               (admin token)
//	GET    /v1/state                    pool, sessions, counters as JSON (admin token)
//	POST   /v1/reload                   reload the config file now       (admin token)
//	PUT    /v1/sessions/{session}/servers/{server}   add or replace a runtime overlay; the
//	                                    JSON body is one "mcpServers" entry (admin token)
//	PATCH  /v1/sessions/{session}/servers/{server}   change it with a JSON merge patch
//	                                    (RFC 7386) over the session's entry (admin token)
//	DELETE /v1/sessions/{session}/servers/{server}   remove that overlay (admin token)
//	POST   /v1/servers/{server}/restart restart the server's connections (admin token)
//	GET    /v1/sessions/{session}/servers/{server}/tools   the tools the session sees of
//	                                    the server, with their trust flags (admin token)
//	GET    /ui/                         the operator page: HTML, script and style only (no
//	                                    authentication); it reads the two above with the admin
//	                                    token it asks for (docs/operations.md)
//
// /metrics counts reloads, policy swaps and retries, times policy calls,
// shows the pool's entries (a server whose connection could not be made
// counts as a failed entry, and /v1/state lists it with its last error and
// no id) and the (session, server) bindings by state
// (a binding is failed while its server cannot be reached, even one never
// reached, or while the policy fails its view closed), the sessions and
// their clients, and
// the churn counters; and for the requests sessions forward,
// wasmhost_upstream_requests_total by server, method and outcome (ok,
// tool_error, error, timeout, unavailable, cancelled, cut_short) and
// wasmhost_upstream_request_duration_seconds by server and method; the
// HTTP connections open (wasmhost_http_conns), refused connections by
// reason (wasmhost_http_conns_refused_total: max_conns, max_conns_per_ip)
// and refused requests by reason (wasmhost_http_requests_refused_total);
// and the Go runtime's and the process's standard metrics (go_*,
// process_*).
//
// An overlay changes a server the running config has, for a session it
// has: any other name is answered 404 naming it. A PUT body is a whole
// "mcpServers" entry (PUT replaces the resource, so a body that leaves a
// key out means that key's default, the same as in the file); a PATCH
// body is a merge patch over the entry the session has now: its overlay,
// else the file's entry with the session's override applied, so that
// {"includeTools": [...]} alone changes only the filter. Either body is
// validated as a file entry is, an unknown key refused (400) with the
// key it likely misspells; an overlay that widens a filter is config like
// any other.
//
// An overlay PUT or PATCH whose settings the policy refuses is answered 422 and
// changes nothing, and so is a DELETE that would bring back file settings
// the policy refuses (the overlay stays; the answer names the file and
// JSON path). A change the admin API has begun (a reload, an overlay, a
// restart) is carried through even if its client gives up waiting.
//
// A session endpoint takes "Authorization: Bearer <token>" with that
// session's token; the admin endpoints take the admin token (the config's
// "admin" block; without it they answer 404). Tokens are compared in
// constant time and never logged; a wrong token, another session's token
// and an unknown session name all get the same 401. The log says which,
// at info: no such session, no Authorization header, not a Bearer token,
// a wrong token (and whose it is when it is another session's or the
// admin's), a Host or Origin refused. Refusals are logged at most ten at
// once for each reason, then one every six seconds (the next line logged
// says how many were not), and a header or path they quote is cut to 256
// bytes, with its length; the metrics count every one.
//
// A session endpoint holds at most [Options.MaxClients] client sessions
// at once (1,024 by default; `wasmhost run --max-clients`); a client
// starting one more is answered 503 with Retry-After until another ends
// or has been idle for [Options.ClientIdleTimeout] (an hour by default;
// `wasmhost run --client-idle-timeout`). A client session ends at once on
// the client's DELETE, and a minute ([Options.ClientGoneAfter]) after a client closed its event
// stream (GET) if it sent nothing and opened no other stream meanwhile:
// one-shot clients such as the MCP Inspector CLI leave that way.
// Any request the daemon answers without reading the whole body it
// announces (a refusal, a 404, /healthz, /metrics...) gets
// "Connection: close" and its connection is closed as soon as the answer
// is written: the daemon never waits for a body it does not use. (It then
// drops what the client still sends for up to two seconds, so that the
// client sees the answer rather than a reset connection.) The daemon holds
// at most [Options.MaxConns] connections at once (4,096 by default;
// `wasmhost run --max-conns`) and [Options.MaxConnsPerIP] from one client
// address, an IPv6 client counted by its /64 (1,024;
// `--max-conns-per-ip`); a connection beyond either is answered 503 and
// closed when accepted. Behind a reverse proxy every client has the
// proxy's address: raise or lift (-1) the per-address limit there. A
// client has [Options.ReadHeaderTimeout] (10 s; `--read-header-timeout`)
// to send a request's headers, which may take 64 KiB (more is answered
// 431), and a kept-alive connection idle for
// [Options.IdleTimeout] (two minutes; `--idle-timeout`) is closed. No
// timeout bounds a request under way: event streams and long calls last
// as long as they need.
//
// With [Options.PerRequestHTTP] (`wasmhost run --per-request-protocol`),
// a POST of protocol 2026-07-28 or later without Mcp-Session-Id is served
// on its own by go-sdk's stateless handler on the session's server, with
// no client session, so that any replica answers it; each such request,
// and each subscriptions/listen stream, is one of the MaxClients while it
// lasts. Without it, go-sdk v1.8.0 refuses those requests and its clients
// fall back to a 2025-11-25 client session. docs/operations.md describes
// running several replicas.
//
// Every request's Host header must name the daemon: "localhost",
// "127.0.0.1", "::1", the listen host, the local IP address the request
// arrived on, or a name in [Options.AllowedHosts]. An Origin header, when
// present, must name one of those hosts too. Anything else gets 403: this
// defeats DNS rebinding, where a web page on an attacker's domain resolves
// that domain to 127.0.0.1 to reach a local server from the browser.
//
// What a client sees is described in package session: tools and prompts
// under the upstream's names, or "<server>__<name>" as the session's
// "names" says ([SessionNaming]), resources by URI, the session flags in
// each tool's _meta under "wasmhost/trust" and "wasmhost/alwaysLoad", and
// the instructions of the servers whose "instructions" allow it.
//
// # Reloads
//
// The daemon reloads when the config file, the policy plugin file or a
// "tokenFile" changes; SIGHUP and POST /v1/reload reload too. It watches
// the directories these files are in and those their symlinks point into
// (while one is missing, its nearest existing parent, so that it is
// watched again once made), again after each reload (which may name other
// files), and on any event there compares each file's identity, size and
// time with what it saw last, so replacing a file by rename (as editors do), a
// symlink pointed elsewhere, and a Kubernetes ConfigMap or Secret update
// (a "..data" symlink swapped in the mount) all count, and other files
// written beside them do not. After a refused reload, the files it read or
// tried to read are watched too, so that one that was missing (a Secret
// mounted after its ConfigMap) retries the reload when it appears. Watch
// and signal triggers are debounced ([Options.Debounce]). A reload parses
// and validates the whole file first (an unknown key is an error, as at
// start-up), checks that a changed server's new command can be started in
// its "cwd" (a missing command is a mistake to hear of, located in the
// file, before anything is touched), and loads and checks a changed policy
// plugin; it then asks the
// policy that will run (a new plugin, or the running one for settings that
// changed) for the key of every binding's settings
// ([reconcile.Reconciler.Check]). If anything is wrong it is logged with
// its file, JSON path, session and server, nothing is touched, and the
// running config keeps serving (the answer of POST /v1/reload says so too,
// with the config's warnings). A running policy that fails the check
// instead of answering it (it traps, or runs out of time or memory) does
// not refuse the reload: that is logged with the file and the JSON paths,
// sessions and servers of the settings the failed call carried, the reload
// goes on (its answer is "applied" but
// not "ok"), and the views whose settings the policy fails on fail closed,
// logged and shown in /v1/state, until a later reload or plugin swap
// gives them settings it answers. A server the reload adds whose command
// cannot start is not refused, as it has no connection to lose: it gets a
// warning with its file and JSON path, and is retried like a server that
// could not start at start-up. When nothing is wrong, the new policy (if
// any) re-keys every view at once, then the config is applied, and one
// line sums the reload up: sessions changed, transports reused, started
// and stopped, views replayed, clients notified, policy swapped or not,
// and each server whose transport changed.
//
// A server whose transport changed (command, args, env, cwd, url,
// headers, timeout, ...) is switched make before break: its sessions keep
// the running connection until the new one has started, initialized and
// listed within the server's "timeout"; then they move to it (a client
// hears list_changed only where what it sees differs) and the old one is
// closed once the calls under way on it are answered. Settings changed in
// the same reload apply at once, on the running connection. If the new
// connection cannot be made, the reload is applied but not "ok": its
// summary line ("server "X": transport not changed, N sessions keep the
// running connection: why"), the answer of POST /v1/reload (the
// bindings' errors and "transportChanges", with "kept" and "error") and
// the log name the server and the reason. Its sessions keep what they
// had, and the running transport stays in effect, surviving a crash
// restart or a supervisor retry, until a later reload makes the change
// (each reload tries it again) or takes it back. /v1/state shows each such
// binding with "identity" (and the pool entry) of the running transport,
// "desired" the one asked for, and "switchError" why it was not made;
// "pending" while the new connection is being made. A reload waits for the
// transports it changes: one asked for meanwhile runs after it, and
// supersedes it.
// The listen address and the admin block's absence or presence are read at
// start-up only (a changed listen address is reported, not applied).
//
// # Stopping
//
// When Run's context ends (`wasmhost run`: SIGTERM or Ctrl-C), the daemon
// first turns not ready (/readyz answers 503 "draining", wasmhost_ready
// is 0; /healthz stays "ok"), and from then on refuses every new MCP
// request (a new client session, a call, an event stream; not a DELETE)
// with 503 and Retry-After before reading it, so that a load balancer may
// send it to another replica. It then waits at most
// [Options.DrainTimeout] (10 s by default; `--drain-timeout`) for the
// calls under way; those still running then are cut short and answered
// so, with up to 2 s more for their answers to be written. Then it closes
// the client sessions, the HTTP server, the upstream connections and the
// plugin. A Kubernetes pod's terminationGracePeriodSeconds must cover the
// preStop delay, the drain timeout and those seconds (deploy/kubernetes).
//
// # Supervision
//
// The pool restarts an upstream whose connection ends by itself
// ([Options.CrashRestarts] times in a row, at once); views keep what they
// show during the restart and replay the rediscovered snapshot, and calls
// in flight get an error result. A binding whose upstream could not be
// (re)started is retried with exponential backoff, from
// [Options.RetryMin] to [Options.RetryMax], until it connects; /v1/state
// shows its error meanwhile.
package daemon
