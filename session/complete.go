package session

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// complete serves completion/complete. A prompt reference names a prompt by
// its exposed name and a resource reference a resource template by its URI
// template (or a resource by its URI); either must be in the session's
// projection, as for prompts/get and resources/read, and is forwarded to
// its server with the upstream's own name. A session gathers many servers
// under one completions capability, so a server that announces none
// answers with no suggestions rather than an error. What the upstream asks
// or logs while it completes goes to the completing client, as during a
// tools/call.
func (e *Endpoint) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	if req.Params.Ref == nil { // the go-sdk refuses it first, unless MCPGODEBUG says otherwise
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "completion: missing ref"}
	}
	ref := *req.Params.Ref
	k, key := &e.prompts, ref.Name
	if ref.Type == "ref/resource" {
		k, key = &e.templates, ref.URI
		if _, ok := e.lookup(k, key); !ok {
			k = &e.resources
		}
	}
	r, ok, err := e.begin(k, key)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, unknown(k, key)
	}
	defer e.calls.Leave()
	cs, ctx, cancel, err := e.target(ctx, req.Extra, r.server)
	if err != nil {
		return nil, err
	}
	defer cancel()
	if !e.still(k, key, r) {
		return nil, unknown(k, key)
	}
	if init := cs.InitializeResult(); init == nil || init.Capabilities == nil || init.Capabilities.Completions == nil {
		return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{}}}, nil
	}
	if ref.Type == "ref/prompt" {
		ref.Name = r.name
	}
	params := &mcp.CompleteParams{Ref: &ref, Argument: req.Params.Argument, Context: req.Params.Context, Meta: relayMeta(req.Params.Meta)}
	// A completion is a call of its client's like the others: what the
	// upstream asks or logs meanwhile is its client's (bridge.go), and
	// while it is in flight no other client's call is the only one.
	bctx, endBridge := e.relay.beginBridge(ctx, cs, req.Session)
	res, err := cs.Complete(bctx, params)
	endBridge()
	if err != nil {
		ferr, _ := e.callFailure(ctx, err, r.server, "completion of "+k.name, key)
		return nil, ferr
	}
	res.Meta = dropReserved(res.Meta)
	if res.Completion.Values == nil {
		res.Completion.Values = []string{} // "values" is required
	}
	return res, nil
}
