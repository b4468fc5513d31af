// Package metakey is the native Go reference implementation of the default
// session metadata policy. It owns the rules for the four per-server
// settings trust, alwaysLoadTools, includeTools and excludeTools. They are
// parsed by [ParseSettings] and reduced to one canonical form by
// [Settings.Canonical]; [Canonical.Key] is the metadata key, and
// [Canonical.Visible] decides which tools and prompts a session sees.
// Resources are never filtered.
//
// [Reference] implements [abi.Policy] with these rules and no sandbox. It
// is the oracle: differential tests and the public golden suite
// (conformance/golden/default) compare a plugin's answers with it. It is
// the baseline: the wasm plugin's benchmarks in internal/bench are read
// against the same work done by it. The daemon never runs it in place of
// a policy plugin (docs/design.md says why).
//
// It imports abi and internal/jsonvalid, and touches nothing but the
// values it is given.
package metakey
