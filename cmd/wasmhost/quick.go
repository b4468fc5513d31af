package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/daemon"
)

// quickSession is the one session `wasmhost run -- CMD` serves.
const quickSession = "default"

// quickConfigName names the config `wasmhost run -- CMD` builds, in
// messages; relative paths in it are relative to the working directory.
const quickConfigName = "command line"

// inspectorCLI is the MCP Inspector release the printed client command
// pins, as README does.
const inspectorCLI = "npx @modelcontextprotocol/inspector@0.17.2"

// quickConfig returns the config of `wasmhost run -- CMD ARGS...` (command
// non-empty) or `wasmhost run --url URL`: one server, named name (derived
// from the command or URL when empty), in one session "default" with the
// token tok, listening on listen, with the embedded policy and no admin
// API. It is JSON, so that the daemon parses and validates it as it does a
// config file.
func quickConfig(command []string, serverURL, name, listen, tok string) ([]byte, error) {
	if name == "" {
		name = quickName(command, serverURL)
	}
	server := map[string]any{}
	if len(command) > 0 {
		server["command"] = command[0]
		if len(command) > 1 {
			server["args"] = command[1:]
		}
	} else {
		server["url"] = serverURL
	}
	return json.Marshal(map[string]any{
		"listen":     listen,
		"mcpServers": map[string]any{name: server},
		"sessions":   map[string]any{quickSession: map[string]any{"token": tok}},
	})
}

// quickName is the server name `wasmhost run` gives a command (its base
// name without extension: "node", "server") or URL (its host's first
// label), keeping letters, digits, '_' and '-'; "server" when nothing is
// left.
func quickName(command []string, serverURL string) string {
	var s string
	if len(command) > 0 {
		s = filepath.Base(command[0])
		s = strings.TrimSuffix(s, filepath.Ext(s))
	} else if u, err := url.Parse(serverURL); err == nil {
		s, _, _ = strings.Cut(u.Hostname(), ".")
	}
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '_', r == '-', 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
			return r
		}
		return -1
	}, s)
	if s == "" {
		return "server"
	}
	return s
}

// quickListen is where `wasmhost run -- CMD` listens without --listen: the
// default address when it is free, else a free loopback port.
func quickListen() string {
	ln, err := net.Listen("tcp", config.DefaultListen)
	if err != nil {
		return "127.0.0.1:0"
	}
	_ = ln.Close()
	return config.DefaultListen
}

// newToken returns a fresh random session token: 32 bytes, hex.
func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("session token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// printQuick prints what `wasmhost run -- CMD` serves: the session's URL,
// its token and a client command to paste.
func printQuick(s stdio, d *daemon.Daemon, tok string) {
	u := d.URL() + "/mcp/" + quickSession
	fmt.Fprintf(s.out, "wasmhost listening on %s\n", d.URL())
	fmt.Fprintf(s.out, "  url    %s\n", u)
	fmt.Fprintf(s.out, "  token  %s\n", tok)
	fmt.Fprintf(s.out, "Connect an MCP client with the header \"Authorization: Bearer %s\", for example:\n", tok)
	fmt.Fprintf(s.out, "  %s --cli %s --transport http --header \"Authorization: Bearer %s\" --method tools/list\n", inspectorCLI, u, tok)
	fmt.Fprintf(s.out, "The token is new each run. Ctrl-C stops.\n")
}
