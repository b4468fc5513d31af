package session

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
)

func TestRelayMeta(t *testing.T) {
	triple := mcp.Meta{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "c"},
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
	}
	assert.Nil(t, relayMeta(nil))
	assert.Nil(t, relayMeta(mcp.Meta{}))
	assert.Nil(t, relayMeta(mcp.Meta{"progressToken": "t"}))
	assert.Nil(t, relayMeta(triple))

	in := mcp.Meta{"progressToken": 7, "io.modelcontextprotocol/logLevel": "debug", "example.com/trace": "abc", "plain": 1.0}
	out := relayMeta(in)
	assert.Equal(t, mcp.Meta{"example.com/trace": "abc", "plain": 1.0}, out)
	out["added"] = true
	assert.NotContains(t, in, "added", "the client's map is not shared")
	assert.Len(t, in, 4)

	// The common request, whose _meta holds only keys that stay behind,
	// costs no allocation.
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = relayMeta(triple) }))
}
