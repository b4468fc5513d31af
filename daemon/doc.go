// Package daemon runs wasmhost as a long-lived MCP gateway: it loads the
// config and the policy plugin, shares upstream connections between
// sessions through the pool, and serves each session over streamable HTTP
// at /mcp/{session}, with the admin API (/v1/...), /metrics, /healthz and
// /readyz beside it.
//
// It owns the HTTP edge (tokens, Host and Origin checks, connection and
// client limits, drains), reloads (file watching, SIGHUP, POST /v1/reload,
// policy swaps, runtime overlays) and supervision (retrying bindings whose
// upstream failed). It drives config, host, reconcile, pool, view and
// session, and is driven only by cmd/wasmhost. Every token refusal
// answers the same 401 and logs its reason at info, rate-limited; tokens
// are never logged.
//
// Routes, limits, reloads and stopping are described in docs/daemon.md;
// the reasons in docs/design.md.
package daemon
