// Package mcpname holds the MCP specification's rule for tool names:
// ASCII letters, digits, '_', '-' and '.', at most MaxLen characters.
// Strict clients (and the model APIs behind them) refuse a whole tool list
// for one name outside it. So wasmhost checks the names it makes: the
// config loader warns about a server name that would prefix tools with
// other characters, and a session leaves out an upstream tool whose
// exposed name breaks the rule.
package mcpname

// MaxLen is the longest tool name the rule allows.
const MaxLen = 128

// BadRune returns the first rune of name outside the rule's characters,
// and whether there is one.
func BadRune(name string) (rune, bool) {
	for _, r := range name {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_' || r == '-' || r == '.') {
			return r, true
		}
	}
	return 0, false
}
