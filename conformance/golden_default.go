package conformance

import "embed"

// DefaultGolden holds the public golden suite of the default policy, the
// files of golden/default. `wasmhost new-plugin` copies it into a project
// that starts from the default policy.
//
//go:embed golden/default/*.json
var DefaultGolden embed.FS
