// Package clip cuts text that clients or upstreams choose to a bound, for
// the places that keep or show it (spans, /v1/state). It is a leaf: it
// imports nothing of wasmhost's.
package clip

import "unicode/utf8"

// String returns s cut to at most n bytes on a rune boundary, marked with
// "…" when cut.
func String(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
