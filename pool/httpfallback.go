package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A fallbackTransport reaches a "url" server the way the MCP specification's
// backwards-compatibility section tells clients to support servers of either
// HTTP transport: Connect POSTs an InitializeRequest to the URL; a server
// that accepts it speaks streamable HTTP, and one that answers with a 4xx
// status is asked for the HTTP+SSE stream of protocol 2024-11-05 on the same
// URL instead. gemini-cli's "url" means an SSE endpoint and most servers now
// serve streamable HTTP, so a pasted entry works with either. ("httpUrl" is
// streamable HTTP only.)
//
// The transport is chosen before Connect returns so that a streamable HTTP
// connection is the go-sdk's own, unwrapped: after initialize, the go-sdk
// hands it the negotiated session through an unexported method, from which
// it sends the Mcp-Protocol-Version header and, below protocol 2026-07-28,
// opens the standalone GET stream that carries the server's list_changed
// notifications. A wrapper cannot pass that on.
type fallbackTransport struct {
	endpoint string
	client   *http.Client
	version  string // the spec's ProtocolVersion pin, or ""
}

// probeInit returns the InitializeRequest Connect probes a server with;
// only the HTTP status of the answer matters. It asks for the spec's pinned
// protocol version when that is one with an initialize handshake (before
// 2026-07-28), so that a server strict about versions answers the probe as
// it will answer the client, and for 2025-11-25 otherwise.
func (t *fallbackTransport) probeInit() string {
	return `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":` + strconv.Quote(t.probeVersion()) +
		`,"capabilities":{},"clientInfo":{"name":"wasmhost-probe","version":"0"}}}`
}

// probeVersion is the protocol version the probe asks for (see probeInit).
func (t *fallbackTransport) probeVersion() string {
	if t.version != "" && t.version < "2026-07-28" {
		return t.version
	}
	return "2025-11-25"
}

// probeDrainLimit bounds the bytes of a probe's JSON answer read before
// closing it, so that its connection can be used again.
const probeDrainLimit = 64 << 10

// Connect probes the server and connects the transport it speaks; ctx bounds
// the probe, and the connection outlives it. A server that refuses both the
// probe (with a 4xx) and the HTTP+SSE stream gets a streamable HTTP
// connection anyway, so that a "url" entry reaches every server an "httpUrl"
// one does (one that wants no legacy initialize, say) and a failure is
// reported by the go-sdk's own handshake.
func (t *fallbackTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	status, err := t.probe(ctx)
	if err != nil {
		return nil, fmt.Errorf("probe %s: %w", redactURL(t.endpoint), stripURL(err))
	}
	if status >= 400 && status <= 499 {
		sse, err := t.connectSSE(ctx)
		if err == nil {
			return sse, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("HTTP+SSE %s (the probe got status %d): %w", redactURL(t.endpoint), status, stripURL(err))
		}
	}
	return (&mcp.StreamableClientTransport{Endpoint: t.endpoint, HTTPClient: t.client, MaxRetries: streamRetries}).Connect(ctx)
}

// probe POSTs probeInit and returns the status of the answer, ending the
// session the server may have opened for it.
func (t *fallbackTransport) probe(ctx context.Context) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.endpoint, strings.NewReader(t.probeInit()))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, err
	}
	// An SSE answer is not read (its stream need not end soon); a small
	// JSON one is, so that its connection can be used again.
	if !isEventStream(resp) {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, probeDrainLimit))
	}
	_ = resp.Body.Close()
	if id := resp.Header.Get("Mcp-Session-Id"); id != "" && resp.StatusCode/100 == 2 {
		t.endSession(ctx, id, t.probeVersion())
	}
	return resp.StatusCode, nil
}

// endSession DELETEs the probe's session. It is best effort: a server that
// does not allow it lets the session expire.
func (t *fallbackTransport) endSession(ctx context.Context, id, version string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, t.endpoint, nil)
	if err != nil {
		return
	}
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("Mcp-Protocol-Version", version) // the version the probe asked for
	if resp, err := t.client.Do(req); err == nil {
		_ = resp.Body.Close()
	}
}

// connectSSE opens the HTTP+SSE transport. Its stream is a GET that lives as
// long as the connection under the context it was opened with, so it gets
// one of its own that closing the connection ends; ctx still bounds opening
// it.
func (t *fallbackTransport) connectSSE(ctx context.Context) (mcp.Connection, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	conn, err := (&mcp.SSEClientTransport{Endpoint: t.endpoint, HTTPClient: t.client}).Connect(sctx)
	if !stop() && err == nil {
		_ = conn.Close()
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &sseConn{Connection: conn, stop: cancel}, nil
}

// An sseConn is an HTTP+SSE connection whose Close also ends its stream's
// context. (The go-sdk passes no session state to SSE connections, so
// wrapping one loses nothing.)
type sseConn struct {
	mcp.Connection
	stop context.CancelFunc
}

// Close closes the connection and ends its stream's context.
func (c *sseConn) Close() error {
	err := c.Connection.Close()
	c.stop()
	return err
}

// stripURL drops the URL net/http names in a request's error, which shows
// the query; callers name the redacted URL instead.
func stripURL(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err
	}
	return err
}
