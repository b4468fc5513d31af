// Package config defines the wasmhost daemon's config file and its strict
// loader.
//
// # File format
//
// The file is one JSON object:
//
//	{
//	  "listen": "127.0.0.1:8750",
//	  "admin": {"tokenEnv": "WASMHOST_ADMIN_TOKEN"},
//	  "policy": {"path": "policy.wasm", "sha256": "…64 hex digits…", "memoryMiB": 64, "timeoutMs": 500},
//	  "mcpServers": {
//	    "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"], "trust": true},
//	    "search": {"httpUrl": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer …"}, "timeout": 30000}
//	  },
//	  "sessions": {
//	    "alice": {"tokenFile": "alice.token"},
//	    "bob": {"tokenEnv": "BOB_TOKEN", "servers": ["fs"], "overrides": {"fs": {"includeTools": ["read_file"], "trust": null}}}
//	  }
//	}
//
// "listen" is the daemon's host:port; when absent it is [DefaultListen]
// (loopback, fixed port 8750, so session URLs are stable across runs).
//
// "admin" configures the admin API's bearer token; when absent the admin
// API is disabled. "policy" names the policy plugin: "path" (absent means
// the embedded default policy), "sha256" (optional digest pin, 64 hex
// digits), "memoryMiB" (1 to 4096, default 256), "timeoutMs" (1 to
// 600000, default 2000), "compileTimeoutMs" (1 to 3600000, default
// 300000: how long compiling the plugin at load may take, past the module
// limits abi/SPEC.md lists, which are checked before compiling) and "config" (any JSON: the plugin's
// own configuration, the input of its handshake; shown only through
// [Policy.RedactedConfig]).
//
// "mcpServers" takes the server entries gemini-cli and qwen-code users
// already have, so theirs can be pasted: exactly one of "command" (with
// "args", "env", "cwd"), "url" (streamable HTTP, falling back to the older
// HTTP+SSE transport for a server that refuses it, so gemini-cli's SSE
// entries work) or "httpUrl" (streamable HTTP only), plus "headers" (sent
// with every request to the server's host, never to another host a
// redirect points to), "timeout" (milliseconds; it bounds connecting plus discovery, and each
// forwarded call; 0 or absent: 30 s for connecting and no bound on calls
// but the client's own cancellation), "description", the four session metadata settings "trust",
// "alwaysLoadTools" (boolean or null) and "includeTools", "excludeTools"
// (array of strings or null), and wasmhost's own "disabled" (default false),
// "pooled" (default true), "bridgeInference" (default true: a request
// the server sends on its own, such as sampling, may go to the one client
// with calls in flight on its connection; false passes on only what
// arrives on the stream of the call that caused it; see "What a session
// passes on" in README.md) and "protocolVersion" (the MCP protocol version
// wasmhost's client asks the server for, one of the go-sdk's supported
// versions; absent: the newest, with the go-sdk's fallback to the legacy
// initialize handshake; a version before 2026-07-28 has no input-required
// results, so a server's questions within a call cannot reach the calling
// client), "prefix" (a fixed prefix for the server's tool and prompt names
// in every session, whatever the session's "names" says: letters, digits,
// '_', '-' and '.', at most 32; "" means the upstream's own names),
// "maxListingBytes" (the most bytes each of the server's listings, tools,
// prompts, resources and resource templates, may take, all its pages
// together; 1 to 4 GiB, absent: 32 MiB; a server past it fails, naming
// the cap) and
// "instructions" (default false: whether the server's instructions, from
// its initialize result, reach the clients of the sessions that use it;
// off by default because they are the upstream's text, read by the
// client's model). The gemini-cli and qwen-code keys "oauth",
// "authProviderType", "targetAudience", "targetServiceAccount", "tcp",
// "type", "extensionName" and "extension" ([IgnoredServerKeys]) are
// accepted with a warning and ignored; any other key is an error. Values are used as written: unlike gemini-cli, wasmhost does not
// expand "$VAR" references (it warns when an env or header value looks like
// one).
//
// "sessions" maps a session name (letters, digits, '.', '_', '-'; not "." or
// "..", so it is safe in a URL path) to its settings: exactly one token
// source, "token" (inline), "tokenFile" (a file whose contents, trimmed, are
// the token; the daemon reloads when it changes, so a token is rotated by
// rewriting its file) or "tokenEnv" (an environment variable holding it);
// optional "servers", the names of the servers the session uses (absent:
// all of them); optional "overrides", a map from server name to an object
// with any of "trust", "includeTools", "excludeTools", "alwaysLoadTools",
// "disabled", "prefix" and "instructions"; optional "names", how the
// session names its servers' tools and prompts: "auto" (the default: the
// upstream's own name, or "<server>__<name>" where another item of the
// session could use that name), "prefixed" (always "<server>__<name>") or
// "bare" (the upstream's own names; items whose names clash are left out);
// and an optional "description". Tokens are trimmed of
// surrounding white space and must then be non-empty printable ASCII
// without spaces; no two sessions, nor a session and the admin API, may
// share a token.
//
// Relative "tokenFile", "cwd" and policy "path" values are resolved against
// the directory of the config file. A "command" is run as os/exec runs it:
// a name without a slash is looked up in the daemon's PATH, and a relative
// path ("./bin/server") is taken from "cwd" when it is set and from the
// daemon's working directory otherwise, not from the config's directory.
// Its environment is the daemon's, without the variables any "tokenEnv"
// names (an upstream is not handed the admin token or a session's), plus
// its "env".
//
// # Overrides
//
// An override works key by key: each key present in the override replaces
// the server's key of the same name, whole (lists are not merged), and a key
// written as null replaces the server's value with null (for
// "includeTools", null means every tool is allowed). Keys the override
// leaves out keep the server's value. A "disabled" override enables or
// disables the server for that session only. [Session.Effective] applies
// this rule and hands out the resulting settings object as raw JSON, ready
// for the policy plugin.
//
// # Validation
//
// Parsing is strict. A syntax error is reported with its line and column;
// anything else with the file name, the JSON path and what was expected,
// for example
//
//	config.json: mcpServers.fs.args[2]: expected a string, got a number
//
//	config.json: mcpServers.fs.includeTool: unknown key; did you mean "includeTools"?
//
// Every problem is reported, not just the first (see [ErrInvalid] and
// [Error]). Duplicate keys are errors anywhere in the file, and so are
// unknown keys, at the top level, in "policy", "admin", a server entry, a
// session and an override: a misspelt filter key would otherwise leave
// its filter out and show a session every tool. The message names the
// known key an unknown one is likely a misspelling of. Only the gemini-cli
// keys above are [Warning]s, as are settings that have no effect. A caller
// may declare more keys a server entry and an override accept
// ([Options.ServerKeys]: the daemon passes the keys its policy plugin
// declares, having read the policy block first with [PeekPolicy]); their
// raw values are kept in [Settings.Extra] and are part of the settings
// object the plugin sees ([Settings.JSON]). The metadata settings are type-checked here, with
// their exact paths, and their raw values are still what reaches the
// policy plugin, which decides what they mean.
//
// Tokens never appear in errors, warnings, String, GoString or slog output.
package config
