package session

import (
	"context"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// SetInstructions names the servers whose instructions (the "instructions"
// of their initialize result) the endpoint may pass on to its clients; nil
// passes none. A client gets them when it connects (see Instructions in the
// package documentation): one connected earlier keeps the text it got, as
// MCP has no notification of new instructions.
func (e *Endpoint) SetInstructions(servers []string) {
	s := slices.Clone(servers)
	slices.Sort(s)
	s = slices.Compact(s)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.instructed = s
}

// Instructions returns the instructions a client connecting now gets: those
// of each server SetInstructions allows that the session sees something of
// and whose upstream connection is up, in server name order. One server's
// text is passed as it is; several are each put under a heading line
// "## <server>" and joined with a blank line.
func (e *Endpoint) Instructions() string {
	e.mu.Lock()
	var servers []string
	for _, s := range e.instructed {
		if e.shows(s) {
			servers = append(servers, s)
		}
	}
	e.mu.Unlock()
	type part struct{ server, text string }
	var parts []part
	for _, s := range servers {
		cs := e.upstream(s).Conn
		if cs == nil {
			continue
		}
		init := cs.InitializeResult()
		if init == nil {
			continue
		}
		if text := strings.TrimSpace(init.Instructions); text != "" {
			parts = append(parts, part{s, text})
		}
	}
	switch len(parts) {
	case 0:
		return ""
	case 1:
		return parts[0].text
	}
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString("## " + p.server + "\n" + p.text)
	}
	return b.String()
}

// shows reports whether the session sees anything of server: a tool,
// prompt, resource or resource template. e.mu is held.
func (e *Endpoint) shows(server string) bool {
	for _, k := range []*kind{&e.tools, &e.prompts} {
		for _, it := range k.items[server] {
			if it.exposed != "" {
				return true
			}
		}
	}
	for _, k := range []*kind{&e.resources, &e.templates} {
		for _, r := range k.routes {
			if r.server == server {
				return true
			}
		}
	}
	return false
}

// instruct sets the instructions of an initialize (or, from protocol
// 2026-07-28, server/discover) result to Instructions: the go-sdk takes
// them from its ServerOptions, fixed when the server is made, and a reload
// may change them.
func (e *Endpoint) instruct(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if err != nil {
			return res, err
		}
		switch r := res.(type) {
		case *mcp.InitializeResult:
			r.Instructions = e.Instructions()
		case *mcp.DiscoverResult:
			r.Instructions = e.Instructions()
		}
		return res, err
	}
}
