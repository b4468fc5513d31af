// Package policydefaultas embeds the source of the AssemblyScript default
// policy, which `wasmhost new-plugin --lang assemblyscript` copies into a
// project of its own. The plugin itself is built with npm (build.sh), not
// Go.
package policydefaultas

import "embed"

// Source holds the plugin's sources, compiler configuration and the npm
// package files with their lockfile (pinned assemblyscript and
// @extism/as-pdk).
//
//go:embed assembly/*.ts asconfig.json package.json package-lock.json
var Source embed.FS
