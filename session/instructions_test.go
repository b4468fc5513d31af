package session_test

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"

	"github.com/wasmhost/wasmhost/session"
)

// TestInstructionsCombined: the instructions of the servers allowed to
// pass them, and only those the session sees something of, reach a client
// when it connects: one server's as they are, several under a heading
// each, in server name order. A change reaches the clients that connect
// after it.
func TestInstructionsCombined(t *testing.T) {
	t.Parallel()
	ups := map[string]*mcp.ClientSession{
		"b": namedUpstream(t, "b"), "a": namedUpstream(t, "a"), "c": namedUpstream(t, "c"), "hidden": namedUpstream(t, "hidden"),
	}
	ep := namedEndpoint(ups, session.Naming{Mode: session.NamesAuto})
	for _, s := range []string{"a", "b", "c"} {
		ep.PutTools(s, tools("t"+s))
	}
	instructions := func() string { return connectClient(t, ep).InitializeResult().Instructions }
	assert.Empty(t, instructions(), "off unless allowed")

	ep.SetInstructions([]string{"b", "a", "hidden"}) // c not allowed; hidden shows the session nothing
	first := connectClient(t, ep)
	want := "## a\nUse a well.\n\n## b\nUse b well."
	assert.Equal(t, want, first.InitializeResult().Instructions)
	assert.Equal(t, want, ep.Instructions())

	ep.SetInstructions([]string{"c"})
	assert.Equal(t, "Use c well.", instructions(), "one server's text as it is")
	assert.Equal(t, want, first.InitializeResult().Instructions, "a connected client keeps what it got")

	ep.DeleteTools("c", []string{"tc"})
	assert.Empty(t, instructions(), "a server the session sees nothing of adds nothing")
}
