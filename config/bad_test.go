package config

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// badEnv is the environment the bad corpus is parsed with.
var badEnv = map[string]string{
	"A_TOKEN":             "env-token-0123456789",
	"WASMHOST_TEST_EMPTY": "  \n",
}

// badSecrets are token values used in the bad corpus; no message may
// contain them.
var badSecrets = []string{"0123456789abcdef", "fedcba9876543210", "admin-secret-token", "env-token-0123456789", "correct horse"}

// badCorpus maps each file of testdata/bad to the exact errors it must
// produce, in order. An entry starting with ':' is a syntax position and
// follows the file name directly; any other entry follows "file: ".
var badCorpus = map[string][]string{
	// Syntax.
	"syntax-missing-comma":    {`:4:5: syntax error: invalid character '"' after object key:value pair`},
	"syntax-trailing-comma":   {`:3:28: syntax error: invalid character '}' looking for beginning of object key string`},
	"syntax-truncated":        {`:3:26: syntax error: unexpected end of JSON input`},
	"syntax-empty":            {`:1:1: syntax error: unexpected end of JSON input`},
	"syntax-comment":          {`:2:3: syntax error: invalid character '/' looking for beginning of object key string`},
	"syntax-trailing-garbage": {`:2:1: syntax error: invalid character '}' after top-level value`},
	"top-level-array":         {`:1:1: expected an object at the top level, got an array`},

	// Every server field with a wrong type.
	"type-mcpservers":          {`mcpServers: expected an object, got an array`},
	"type-server":              {`mcpServers.fs: expected an object, got a string`},
	"type-command":             {`mcpServers.fs.command: expected a string, got a number`},
	"type-args":                {`mcpServers.fs.args: expected an array of strings, got a string`},
	"type-args-elem":           {`mcpServers.fs.args[2]: expected a string, got a number`},
	"type-env":                 {`mcpServers.fs.env: expected an object of strings, got an array`},
	"type-env-value":           {`mcpServers.fs.env.DEBUG: expected a string, got a boolean`},
	"type-cwd":                 {`mcpServers.fs.cwd: expected a string, got a number`},
	"type-url":                 {`mcpServers.fs.url: expected a string, got an object`},
	"type-httpurl":             {`mcpServers.fs.httpUrl: expected a string, got an array`},
	"type-headers":             {`mcpServers.fs.headers: expected an object of strings, got a string`},
	"type-header-value":        {`mcpServers.fs.headers.X-Retries: expected a string, got a number`},
	"type-timeout":             {`mcpServers.fs.timeout: expected a number, got a string`},
	"type-trust":               {`mcpServers.fs.trust: expected a boolean or null, got a string`},
	"type-alwaysloadtools":     {`mcpServers.fs.alwaysLoadTools: expected a boolean or null, got a number`},
	"type-includetools-string": {`mcpServers.fs.includeTools: expected an array of strings or null, got a string`},
	"type-includetools-elem":   {`mcpServers.fs.includeTools[1]: expected a string, got a number`},
	"type-excludetools-object": {`mcpServers.fs.excludeTools: expected an array of strings or null, got an object`},
	"type-excludetools-elem":   {`mcpServers.fs.excludeTools[0]: expected a string, got null`},
	"type-disabled":            {`mcpServers.fs.disabled: expected a boolean, got a string`},
	"type-pooled":              {`mcpServers.fs.pooled: expected a boolean, got a number`},
	"type-protocol-version":    {`mcpServers.fs.protocolVersion: expected a string, got a number`},
	"protocol-version-unknown": {`mcpServers.fs.protocolVersion: unsupported MCP protocol version "2024-01-01" (supported: 2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26, 2024-11-05)`},
	"type-description":         {`mcpServers.fs.description: expected a string, got an array`},

	// Every session field with a wrong type.
	"type-sessions":                 {`sessions: expected an object, got an array`},
	"type-session":                  {`sessions.a: expected an object, got a string`},
	"type-token":                    {`sessions.a.token: expected a string, got a number`},
	"type-tokenfile":                {`sessions.a.tokenFile: expected a string, got a boolean`},
	"type-tokenenv":                 {`sessions.a.tokenEnv: expected a string, got null`},
	"type-session-servers":          {`sessions.a.servers: expected an array of strings, got a string`},
	"type-session-servers-elem":     {`sessions.a.servers[1]: expected a string, got a number`},
	"type-session-description":      {`sessions.a.description: expected a string, got a number`},
	"type-overrides":                {`sessions.a.overrides: expected an object, got an array`},
	"type-override":                 {`sessions.a.overrides.fs: expected an object, got a boolean`},
	"type-override-trust":           {`sessions.a.overrides.fs.trust: expected a boolean or null, got a string`},
	"type-override-alwaysloadtools": {`sessions.a.overrides.fs.alwaysLoadTools: expected a boolean or null, got a number`},
	"type-override-includetools":    {`sessions.a.overrides.fs.includeTools[1]: expected a string, got a number`},
	"type-override-excludetools":    {`sessions.a.overrides.fs.excludeTools: expected an array of strings or null, got a string`},
	"type-override-disabled":        {`sessions.a.overrides.fs.disabled: expected a boolean, got null`},

	// Policy, listen and admin.
	"type-policy":             {`policy: expected an object, got a string`},
	"type-policy-path":        {`policy.path: expected a string, got a number`},
	"type-policy-sha256":      {`policy.sha256: expected a string, got a number`},
	"type-policy-memory":      {`policy.memoryMiB: expected a number, got a string`},
	"type-policy-timeout":     {`policy.timeoutMs: expected a number, got a boolean`},
	"policy-path-empty":       {`policy.path: must not be empty (leave "path" out to use the embedded default policy)`},
	"policy-sha256-short":     {`policy.sha256: expected 64 hexadecimal digits (a SHA-256 digest)`},
	"policy-sha256-nonhex":    {`policy.sha256: expected 64 hexadecimal digits (a SHA-256 digest)`},
	"policy-memory-zero":      {`policy.memoryMiB: must be an integer from 1 to 4096 (MiB), got 0`},
	"policy-memory-fraction":  {`policy.memoryMiB: must be an integer from 1 to 4096 (MiB), got 1.5`},
	"policy-memory-huge":      {`policy.memoryMiB: must be an integer from 1 to 4096 (MiB), got 8192`},
	"policy-timeout-negative": {`policy.timeoutMs: must be an integer from 1 to 600000 (milliseconds), got -1`},
	"type-listen":             {`listen: expected a string, got a number`},
	"listen-no-port":          {`listen: expected host:port, e.g. 127.0.0.1:8750`},
	"listen-bad-port":         {`listen: the port must be a number from 0 to 65535`},
	"type-admin":              {`admin: expected an object, got a string`},
	"admin-no-token":          {`admin: expected exactly one of "token", "tokenFile" or "tokenEnv", found none`},
	"admin-token-reused":      {`sessions.a.token: the same token is used by the admin API; every session and the admin API need their own token`},

	// Names and duplicates.
	"duplicate-key-top":             {`:4:3: duplicate key "mcpServers"`},
	"duplicate-key-server":          {`mcpServers.fs: duplicate key "command"`},
	"duplicate-server-name":         {`mcpServers: duplicate key "fs"`},
	"duplicate-session-name":        {`sessions: duplicate key "a"`},
	"duplicate-env-key":             {`mcpServers.fs.env: duplicate key "A"`},
	"duplicate-key-ignored-section": {`ui: unknown key (expected one of "mcpServers", "sessions", "policy", "listen" and "admin")`, `ui: duplicate key "theme"`},
	"empty-server-name":             {`mcpServers[""]: server name must not be empty`},
	"server-name-control":           {`mcpServers["fs\x01"]: server name must not contain control characters`},
	"empty-session-name":            {`sessions[""]: session name must not be empty`},
	"session-name-space":            {`sessions["alice bob"]: session name may only contain letters, digits, '.', '_' and '-'`},
	"session-name-slash":            {`sessions["team/alice"]: session name may only contain letters, digits, '.', '_' and '-'`},
	"session-name-dotdot":           {`sessions[".."]: session name must not be ".."`},

	// Transports.
	"empty-command":          {`mcpServers.fs.command: must not be empty`},
	"blank-command":          {`mcpServers.fs.command: must not be empty`},
	"command-and-url":        {`mcpServers.fs: expected exactly one of "command", "url" or "httpUrl", found "command" and "url"`},
	"all-three-transports":   {`mcpServers.fs: expected exactly one of "command", "url" or "httpUrl", found "command", "url" and "httpUrl"`},
	"no-transport":           {`mcpServers.fs: expected exactly one of "command", "url" or "httpUrl", found none`},
	"url-empty":              {`mcpServers.fs.url: must not be empty`},
	"url-relative":           {`mcpServers.fs.url: expected an absolute http or https URL, got a relative one`},
	"url-ftp":                {`mcpServers.fs.url: expected an http or https URL, got scheme "ftp"`},
	"url-unparsable":         {`mcpServers.fs.url: expected an absolute http or https URL: missing ']' in host`},
	"url-no-host":            {`mcpServers.fs.httpUrl: expected an http or https URL with a host`},
	"httpurl-missing-scheme": {`mcpServers.fs.httpUrl: expected an http or https URL, got scheme "localhost"`},
	"env-bad-name":           {`mcpServers.fs.env["A=B"]: environment variable name must not contain '=' or NUL`},
	"header-bad-name":        {`mcpServers.fs.headers["Bad Header"]: not a valid HTTP header name`},
	"header-bad-value":       {`mcpServers.fs.headers.X-Ok: header value must not contain CR, LF or NUL`},
	"timeout-negative":       {`mcpServers.fs.timeout: must be an integer from 0 to 2592000000 (milliseconds), got -1`},
	"timeout-fraction":       {`mcpServers.fs.timeout: must be an integer from 0 to 2592000000 (milliseconds), got 1.5`},

	// References between sessions and servers.
	"override-unknown-server":   {`sessions.a.overrides.nope: no server named "nope" in mcpServers`},
	"override-transport-key":    {`sessions.a.overrides.fs.command: a session override may only set trust, includeTools, excludeTools, alwaysLoadTools, disabled, prefix and instructions; transport settings are shared by all sessions`},
	"override-protocol-version": {`sessions.a.overrides.fs.protocolVersion: a session override may only set trust, includeTools, excludeTools, alwaysLoadTools, disabled, prefix and instructions; transport settings are shared by all sessions`},
	"servers-unknown":           {`sessions.a.servers[1]: no server named "nope" in mcpServers`},
	"servers-duplicate":         {`sessions.a.servers[1]: server "fs" is listed twice`},

	// Tokens.
	"token-missing":       {`sessions.a: expected exactly one of "token", "tokenFile" or "tokenEnv", found none`},
	"token-two-sources":   {`sessions.a: expected exactly one of "token", "tokenFile" or "tokenEnv", found "token" and "tokenEnv"`},
	"token-three-sources": {`sessions.a: expected exactly one of "token", "tokenFile" or "tokenEnv", found "token", "tokenFile" and "tokenEnv"`},
	"token-file-missing":  {`sessions.a.tokenFile: cannot read token file "testdata/bad/does-not-exist.token": no such file or directory`},
	"token-file-empty":    {`sessions.a.tokenFile: token file "testdata/bad/empty.token" is empty`},
	"token-env-unset":     {`sessions.a.tokenEnv: environment variable "WASMHOST_TEST_UNSET" is not set`},
	"token-env-empty":     {`sessions.a.tokenEnv: environment variable "WASMHOST_TEST_EMPTY" is empty`},
	// A token written under tokenEnv is not repeated in the message.
	"token-env-is-a-token": {`sessions.a.tokenEnv: not an environment variable name (letters, digits and "_"); a token is given under "token"`},
	"token-empty":          {`sessions.a.token: must not be empty`},
	"token-spaces":         {`sessions.a.token: the token must be printable ASCII without spaces`},
	"token-duplicate":      {`sessions.b.token: the same token is used by session "a"; every session and the admin API need their own token`},

	// Several problems in one file: all are reported, in file order.
	"multiple-problems": {
		`policy.sha256: expected 64 hexadecimal digits (a SHA-256 digest)`,
		`policy.memoryMiB: must be an integer from 1 to 4096 (MiB), got -5`,
		`sessions.a: expected exactly one of "token", "tokenFile" or "tokenEnv", found none`,
		`sessions.a.overrides.github: no server named "github" in mcpServers`,
		`sessions.a.overrides.github.trust: expected a boolean or null, got a string`,
		`sessions["b c"]: session name may only contain letters, digits, '.', '_' and '-'`,
		`mcpServers.fs.args[1]: expected a string, got a number`,
		`mcpServers.fs.includeTools[1]: expected a string, got a number`,
		`mcpServers.web: expected exactly one of "command", "url" or "httpUrl", found "url" and "command"`,
		`mcpServers.web.url: expected an http or https URL, got scheme "ftp"`,
		`mcpServers.web.command: must not be empty`,
	},
}

func TestBadCorpus(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "bad", "*.json"))
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".json"))
	}
	slices.Sort(names)
	rows := slices.Sorted(maps.Keys(badCorpus))
	require.Equal(t, rows, names, "every file in testdata/bad needs a row in badCorpus, and every row a file")

	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join("testdata", "bad", name+".json")
			data, err := os.ReadFile(file)
			require.NoError(t, err)
			cfg, _, err := Parse(file, data, fakeEnv(badEnv), os.ReadFile)
			require.Error(t, err)
			assert.Nil(t, cfg)
			assert.ErrorIs(t, err, ErrInvalid)

			var want []string
			for _, w := range badCorpus[name] {
				if strings.HasPrefix(w, ":") {
					want = append(want, file+w)
				} else {
					want = append(want, file+": "+w)
				}
			}
			var got []string
			for _, e := range unwrapAll(err) {
				var ce *Error
				require.True(t, errors.As(e, &ce), "%T is not a *config.Error", e)
				assert.Equal(t, file, ce.File)
				assert.Positive(t, ce.Line)
				assert.Positive(t, ce.Column)
				got = append(got, ce.Error())
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("errors mismatch (-want +got):\n%s", diff)
			}
			assert.Equal(t, strings.Join(want, "\n"), err.Error())
			for _, s := range badSecrets {
				assert.NotContains(t, err.Error(), s, "a token leaked into an error")
			}
		})
	}
}

// unwrapAll returns the errors joined in err, or err itself.
func unwrapAll(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func TestBadCorpusThroughLoad(t *testing.T) {
	// Load reads the real environment and file system; the file-based token
	// errors must come out the same as through Parse.
	for _, name := range []string{"token-file-missing", "token-file-empty", "type-args-elem", "syntax-missing-comma"} {
		file := filepath.Join("testdata", "bad", name+".json")
		_, _, err := Load(file)
		require.Error(t, err, name)
		assert.ErrorIs(t, err, ErrInvalid, name)
		w := badCorpus[name][0]
		if strings.HasPrefix(w, ":") {
			assert.Equal(t, file+w, err.Error())
		} else {
			assert.Equal(t, file+": "+w, err.Error())
		}
	}
}
