// Package conformance runs golden case suites against a policy: the
// embedded default plugin, a plugin file an author is writing, or any
// other [abi.Policy] such as the native reference in metakey.
//
// A suite file is {"suite": "name", "description": "...", "cases": [...]}
// and each case is one of five kinds: canonical, same, differ, project and
// reject (format v1, docs/plugins.md "Golden cases"). [Load] reads files
// and directories; what is wrong inside a file is a failing case, not an
// error. [Run] runs every case and returns a [Report]; [RunBothWays] also
// compares a plugin's direct and Extism exports; [RunT] and [RunPolicyT]
// report each case as a subtest:
//
//	func TestGolden(t *testing.T) {
//		conformance.RunT(t, "plugin.wasm", "golden")
//	}
//
// It loads plugins through host and checks projections with view; it
// touches nothing else. Every key is computed twice and every project case
// projected twice, to catch a plugin whose answers are not a function of
// its input (docs/design.md).
package conformance
