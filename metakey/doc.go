// Package metakey is the native Go reference implementation of the default
// session metadata policy: how the four per-server settings trust,
// alwaysLoadTools, includeTools and excludeTools are parsed, reduced to one
// canonical form, turned into a metadata key, and applied to a server's
// tools, prompts and resources.
//
// The daemon never runs this package in place of a policy plugin: sessions
// are always projected by the wasm plugin the operator configured (by
// default plugins/policy-default). metakey exists for two other jobs:
//
//   - It is the oracle. Differential tests and the public golden suite
//     (conformance/golden/default) compare a plugin's answers with
//     [Reference], which implements [abi.Policy] without a sandbox.
//   - It is the baseline. The wasm plugin's benchmarks in internal/bench
//     are read against the same work done by [Reference], so the code here
//     avoids needless allocation. BenchmarkCanonicalize1000 and
//     BenchmarkProject1000 in this package time the reference alone on the
//     same input.
//
// # Settings
//
// [ParseSettings] decodes one raw settings object strictly. It refuses
// anything that is not a JSON object, values of the wrong JSON kind (a
// string where a boolean belongs, a number inside includeTools, ...) and
// duplicate keys, and says where the problem is as a JSON path inside the
// object, for example
//
//	includeTools[1]: expected a string, got a number
//
// Keys are matched exactly after JSON unescaping ("Trust" is not "trust");
// keys other than the four settings are ignored. String values are decoded
// exactly as encoding/json.Unmarshal decodes them.
//
// # Canonical form and key
//
// [Settings.Canonical] applies the rules of the policy semantics:
//
//   - trust keeps three distinct values: null (missing or null), false, true.
//   - alwaysLoadTools is true only when it was given as true.
//   - includeTools is null when missing or null, which allows every name;
//     otherwise each entry is cut at its first "(", and the list is
//     deduplicated and sorted by bytes. An empty list stays empty and allows
//     no name.
//   - excludeTools is always a list: missing, null and [] are all []. It is
//     deduplicated and sorted by bytes; entries are exact names and are never
//     cut.
//
// The metadata key is the compact JSON of the canonical form with the keys in
// the fixed order trust, alwaysLoadTools, includeTools, excludeTools, strings
// encoded exactly as encoding/json.Marshal encodes them. The default with no
// settings at all is
//
//	{"trust":null,"alwaysLoadTools":false,"includeTools":null,"excludeTools":[]}
//
// # Projection
//
// [Canonical.Visible] is the filter for tool and prompt names: a name is
// visible when it is not empty, is in includeTools (or includeTools is null),
// and is not in excludeTools. Resources are never filtered. Names are
// compared byte for byte.
package metakey
