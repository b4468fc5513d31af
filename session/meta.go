package session

import (
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// reservedMeta starts the _meta keys the protocol reserves for a
// connection itself (protocol version, client and server info and
// capabilities, log level, subscription id): they describe one hop, the
// client's connection to wasmhost or wasmhost's to the upstream, and are
// never relayed across.
const reservedMeta = "io.modelcontextprotocol/"

// relayMeta returns the request _meta to forward: everything the client
// sent except the progress token (the relay sets its own) and the reserved
// keys.
func relayMeta(m mcp.Meta) mcp.Meta {
	n := 0
	for k := range m {
		if relayed(k) {
			n++
		}
	}
	if n == 0 {
		return nil // no map to make: most requests carry only dropped keys
	}
	out := make(mcp.Meta, n)
	for k, v := range m {
		if relayed(k) {
			out[k] = v
		}
	}
	return out
}

// relayed reports whether relayMeta forwards the request _meta key k.
func relayed(k string) bool {
	return k != "progressToken" && !strings.HasPrefix(k, reservedMeta)
}

// dropReserved removes the reserved keys from an upstream result's _meta
// (the result is the endpoint's own copy).
func dropReserved(m mcp.Meta) mcp.Meta {
	for k := range m {
		if strings.HasPrefix(k, reservedMeta) {
			delete(m, k)
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}
