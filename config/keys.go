package config

import (
	"fmt"
	"slices"
	"strings"
)

// The keys each object of the file may hold. A key outside its object's
// list is an error (see unknownKey): a misspelt filter key such as
// "includeTool" would otherwise leave the filter out, and a session would
// see every tool.
var (
	topKeys      = []string{"mcpServers", "sessions", "policy", "listen", "admin"}
	policyKeys   = []string{"path", "sha256", "memoryMiB", "timeoutMs", "compileTimeoutMs", "config"}
	tokenKeys    = []string{"token", "tokenFile", "tokenEnv"}
	sessionKeys  = []string{"token", "tokenFile", "tokenEnv", "servers", "overrides", "description", "names"}
	metadataKeys = []string{"trust", "alwaysLoadTools", "includeTools", "excludeTools"}
	overrideKeys = append(slices.Clone(metadataKeys), "disabled", "prefix", "instructions")
	serverKeys   = append(slices.Clone(metadataKeys),
		"command", "args", "env", "cwd", "url", "httpUrl", "headers", "timeout",
		"pooled", "bridgeInference", "protocolVersion", "maxListingBytes", "disabled", "description", "prefix", "instructions")
)

// IgnoredServerKeys are the keys of a gemini-cli or qwen-code server entry
// that wasmhost accepts, so that an entry can be pasted, but does not use:
// each draws a warning, not an error. None of them narrows what a session
// sees, so ignoring one cannot widen access.
var IgnoredServerKeys = []string{
	"oauth",                // OAuth for the upstream: wasmhost sends "headers" only
	"authProviderType",     // gemini-cli's Google credentials provider
	"targetAudience",       // its ID-token audience
	"targetServiceAccount", // its impersonated service account
	"tcp",                  // a transport wasmhost does not speak
	"type",                 // the transport's name; wasmhost reads it from "command", "url" or "httpUrl"
	"extensionName",        // set by gemini-cli for servers its extensions bring
	"extension",
}

// unknownKey reports key, found at path in an object whose keys are known
// (and, for server entries and overrides, those the loader was given to
// accept besides), as an error, with the nearest known key when the key
// looks like a misspelling of one.
func (l *loader) unknownKey(off int, path, key string, known []string) {
	if s := suggest(key, known); s != "" {
		l.errorAt(off, path, "unknown key; did you mean %q?", s)
		return
	}
	if l.inSettings && l.unknownOK {
		l.warnAt(off, path, "not checked: the policy block is refused, and the plugin it names may declare this key in its settingsKeys")
		l.unchecked++
		return
	}
	l.errorAt(off, path, "unknown key (expected one of %s)%s", quoteList(known), l.ownerHint())
}

// ownerHint is the end of an unknown server or override key's error: who
// would have to declare the key for wasmhost to accept it.
func (l *loader) ownerHint() string {
	if !l.inSettings {
		return ""
	}
	if l.owner == "" {
		return "; a policy plugin's own key is accepted only when the plugin declares it in its handshake's settingsKeys"
	}
	return fmt.Sprintf("; %s would have to declare it in its handshake's settingsKeys", l.owner)
}

// suggest returns the key of known nearest to key when it is near enough
// to be a misspelling of it (an edit distance of at most 2, ignoring case,
// and less than half the key's length); "" otherwise.
func suggest(key string, known []string) string {
	best, bestDist := "", -1
	lower := strings.ToLower(key)
	for _, k := range known {
		d := editDistance(lower, strings.ToLower(k))
		if bestDist < 0 || d < bestDist {
			best, bestDist = k, d
		}
	}
	if bestDist < 0 || bestDist > 2 || 2*bestDist >= len([]rune(key)) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
