//go:build !wasip1

package policydefault

import "embed"

// Source holds the plugin's own source: the wasip1 exports (main.go,
// kernel.go, direct.go) and package internal/policy, tests left out.
// `wasmhost new-plugin --from default` copies it into a project of its
// own, so that a new policy starts from the default one.
//
//go:embed main.go kernel.go direct.go internal/policy/batch.go internal/policy/encode.go internal/policy/fast.go internal/policy/policy.go internal/policy/scan.go internal/policy/words.go
var Source embed.FS
