// Package conformance runs golden case suites against a policy: the
// embedded default plugin, a plugin file an author is writing, or any other
// [abi.Policy] such as the native reference in metakey.
//
// The format of a suite is described in the project's golden case
// specification (format v1; docs/plugins.md, "Golden cases"). In short, a suite file is a JSON object
//
//	{"suite": "name", "description": "optional", "cases": [CASE, ...]}
//
// and each case has a name, unique in its file, and the keys of exactly one
// of five kinds: canonical (settings, canonical), same (same), differ
// (differ), project (settings, snapshot, project) and reject (settings,
// "reject": true).
//
// # Loading
//
// [Load] takes files and directories. A directory is walked recursively and
// its *.json files are read in name order; a file named explicitly is read
// whatever its name. Load fails only when a path cannot be read, or when a
// directory holds no *.json file at all (an empty or misspelled suite
// directory must not pass as "0 failed"). Everything that is wrong inside a
// file is reported as a failing case instead, so one broken file never hides
// the results of the others:
//
//   - a file that is not valid JSON, or whose top level is not the suite
//     object (missing "suite" or "cases", an unknown or duplicated key, a
//     value of the wrong type), counts as one failed case named after the
//     file, of kind "file";
//   - a case with an unknown or duplicated key, the keys of no kind or of
//     two kinds, a missing or duplicated name, or a value of the wrong shape
//     counts as one failed case of kind "malformed". So does a snapshot item
//     with a key given twice at any depth, or with two keys that differ only
//     in case outside its free-form fields (inputSchema, outputSchema,
//     _meta): the MCP SDK's decoder would read them as one field.
//
// # Running
//
// [Run] runs every case and returns a [Report]. Settings reach the policy as
// the raw bytes found in the file, ill-typed values included. Every key is
// computed twice, in two separate canonicalize calls (the second batch in
// reverse order), and a settings object that gets two different keys fails
// its case as nondeterministic; a project case is projected twice for the
// same reason. A reject case passes only when both canonicalize calls return
// a per-item error and project refuses the settings too, with an error
// wrapping [abi.ErrRefused] (a wasm plugin's error return); a call that
// fails as a whole, times out, traps or fails in any other way is not a
// refusal. A policy error
// or even a panic in a Go policy fails the case; it never stops the run.
//
// When the policy is an [abi.BatchProjector] (metakey.Reference, or a
// host.Plugin whose module exports project_batch), the project and reject
// cases of each suite also go through one ProjectBatch call, all of them in
// one batch, each settings object sent once. A case that passed otherwise
// then fails, with a message starting "batch path (project_batch): ", when
// its batched answer differs from the expected projection, refuses settings
// a project case accepts, or accepts settings a reject case refuses. When
// the batch fails as a whole, each of those cases is sent again alone: the
// cases that fail alone fail, and if none does, every case of the batch
// fails. A host.Plugin without project_batch is not checked this way, since
// its batches are the very project calls the cases have already made.
//
// [RunBothWays] runs the suites against a plugin with direct exports
// (abi/SPEC.md section 5.2) both ways, through its direct exports and with
// host.Options.NoDirect, as `wasmhost conformance` does. Besides failing a
// case that fails either way, it fails a case whose answers differ between
// the two ways (a key, a canonical form's bytes, a refusal message, a
// projection or a batch-path answer), naming the first such answer, with
// the Extism answer as want and the direct one as got.
//
// For project cases the runner also checks, on its own, that each projected
// tool differs from its snapshot tool only by the two session flags
// ([view.MetaTrust] and [view.MetaAlwaysLoad] in _meta), that projected
// prompts and resources are the snapshot's unchanged, and that the snapshot
// given to [view.Project] was not modified. For a policy that renames
// (abi/SPEC.md section 5.3), a project case states each renamed item's
// "rename" and each replaced "description" (a prompt then being an object
// rather than its name); the runner compares those with the projection,
// and the rest of each item with the snapshot's as above.
//
// # In go test
//
// [RunT] loads a plugin file and reports each case as a subtest (checking
// a plugin with direct exports both ways, as RunBothWays does), so a
// plugin author's test is one line:
//
//	func TestGolden(t *testing.T) {
//		conformance.RunT(t, "plugin.wasm", "golden")
//	}
//
// [RunPolicyT] does the same for any [abi.Policy].
package conformance
