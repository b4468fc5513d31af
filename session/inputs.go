package session

//lint:file-ignore SA1019 sampling and logging are deprecated (SEP-2577) but still used during their deprecation window

import (
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// perRequestProtocol is the first MCP protocol version whose requests carry
// the client's capabilities in their _meta, and whose servers may answer a
// call with an input-required result (SEP-2322, multi round-trip requests).
const perRequestProtocol = "2026-07-28"

// A call's input requests. An upstream may answer tools/call, prompts/get
// or resources/read with an input-required result: questions for the user
// (elicitation) or the client's model (sampling), and an opaque state; the
// client answers them by repeating the call with inputResponses and that
// state. Unlike a request the upstream sends on its own, such a result
// belongs to one call, so the Endpoint can pass it on to the client that
// made the call, and the repeated call back to the same server, without
// the shared connection answering anything: the pool's client leaves these
// results alone (pool.NewClient). A client of an older protocol is asked by
// the go-sdk's server on the Endpoint's behalf, with elicitation/create or
// sampling/createMessage, and the handler called again with the answers.
//
// The upstream is told what the calling client can answer: the client's
// elicitation and sampling capabilities go with each forwarded call, in the
// request's _meta, where the protocol puts a client's capabilities.

// forwardMeta returns the _meta of a call forwarded to up: what the client
// that made the call (caller) sent in callerMeta, less what relayMeta drops,
// plus the caller's elicitation and sampling capabilities under
// mcp.MetaKeyClientCapabilities when the upstream link carries
// capabilities per request and the caller has either. Otherwise the go-sdk
// sends the shared connection's capabilities, which are none. On such a
// link the caller's log level goes too (mcp.MetaKeyLogLevel): the one it
// sent with the call, or else level, the one it set with
// logging/setLevel (none: the upstream logs nothing for the call).
func forwardMeta(up *mcp.ClientSession, caller *mcp.ServerSession, callerMeta mcp.Meta, level mcp.LoggingLevel) mcp.Meta {
	meta := relayMeta(callerMeta)
	if res := up.InitializeResult(); res == nil || res.ProtocolVersion < perRequestProtocol {
		return meta
	}
	if sent, ok := callerMeta[mcp.MetaKeyLogLevel].(string); ok {
		level = mcp.LoggingLevel(sent)
	}
	if level != "" {
		if meta == nil {
			meta = make(mcp.Meta, 2)
		}
		meta[mcp.MetaKeyLogLevel] = string(level)
	}
	var elicitation, sampling any // the caller's, nil when it has none
	if sent, ok := callerMeta[mcp.MetaKeyClientCapabilities].(map[string]any); ok {
		// The caller speaks the per-request protocol: its own words.
		elicitation, sampling = sent["elicitation"], sent["sampling"]
	} else if caller != nil {
		if ip := caller.InitializeParams(); ip != nil && ip.Capabilities != nil {
			if e := ip.Capabilities.Elicitation; e != nil {
				elicitation = e
			}
			if s := ip.Capabilities.Sampling; s != nil {
				sampling = s
			}
		}
	}
	if elicitation == nil && sampling == nil {
		return meta // most calls: nothing to allocate
	}
	caps := make(map[string]any, 2)
	if elicitation != nil {
		caps["elicitation"] = elicitation
	}
	if sampling != nil {
		caps["sampling"] = sampling
	}
	if meta == nil {
		meta = make(mcp.Meta, 1)
	}
	meta[mcp.MetaKeyClientCapabilities] = caps
	return meta
}

// maxInputRequests bounds the questions of one input-required result that
// are passed on. A client of an older protocol is asked them all at once by
// the go-sdk's server, a goroutine and a request each, so that an upstream
// answering with one result of 16 MiB could make the host hold a GiB; a
// call with more fails (see checkInputs). It bounds as well the questions
// an upstream asks on its own during one call that are under way to the
// client at once (ProgressRelay.Answer refuses more). Real servers ask one
// or a few.
const maxInputRequests = 64

// An inputFlood is the failure of a call whose upstream answered with an
// input-required result of n questions, more than maxInputRequests.
type inputFlood struct{ n int }

func (f *inputFlood) Error() string {
	return fmt.Sprintf("the server answered with an input-required result of %d questions, more than the %d wasmhost passes on", f.n, maxInputRequests)
}

// checkInputs returns an *inputFlood when res, a call's result, is an
// input-required result of more than maxInputRequests questions.
func checkInputs(res any) error {
	var n int
	switch r := res.(type) {
	case *mcp.CallToolResult:
		n = len(r.InputRequests)
	case *mcp.GetPromptResult:
		n = len(r.InputRequests)
	case *mcp.ReadResourceResult:
		n = len(r.InputRequests)
	}
	if n <= maxInputRequests {
		return nil
	}
	return &inputFlood{n}
}
