// Package bench holds wasmhost's end-to-end benchmarks: the ones that span
// several packages (policy, view, pool, reconcile, session) and so belong to
// none of them. `make bench` runs them, with the per-package benchmarks they
// are compared against, through internal/benchreport, which writes
// BENCHMARKS.md.
//
// Every target is a ratio against a baseline measured in the same run, so
// most benchmarks here come in pairs: the same work through the default wasm
// policy plugin and through the native reference policy (metakey.Reference),
// or through a wasmhost session and through a direct client. Invariants the
// benchmarks rely on (how many plugin calls a reconcile makes, that an
// equivalent reload causes no churn) are asserted by ordinary tests in this
// package, never by timing.
//
// The non-test files hold the fixtures: realistic settings, tools and
// snapshots, a counting policy, an in-memory registry, and a World (pool,
// reconciler and in-memory upstreams) built from a Topology.
package bench
