package mcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// UpstreamConfig says what an Upstream serves.
type UpstreamConfig struct {
	// Name names the upstream: the server is "up-<Name>", and each tool
	// answers "<Name>/<tool>" (plus Reply).
	Name string
	// Tools are added with AddTool.
	Tools []string
	// Server, if set, is served in place of a new plain server, which has
	// the prompt "greet" and the resource Resource (the demo server of
	// internal/demoserver, say). Tools and TestTools are added to it.
	Server *mcp.Server
	// PageSize is the plain server's list page size (0: the go-sdk's).
	PageSize int
	// Resource is the URI of the plain server's one resource (""
	// "file:///<Name>"); the resource is named after its last path element.
	Resource string
	// PathArg makes each tool require a string argument "path".
	PathArg bool
	// Reply is appended to each tool's answer "<Name>/<tool>".
	Reply string
	// TestTools adds the tools "progress" (three progress notifications,
	// then "done"), "meta" (records the request's _meta, see LastMeta),
	// "block" (sends on Started, then waits for Release or cancellation,
	// which it reports on Cancelled) and "fail" (an isError result).
	TestTools bool
}

// An Upstream is a fake MCP upstream for tests: a go-sdk server reached
// over in-process pipes (Connect), one server session per dial. A test can
// change its tools, slow down its tools/list, count its dials and break
// its connections the way a crashed upstream does.
type Upstream struct {
	// Name is UpstreamConfig.Name.
	Name string
	// Server is the MCP server each dial connects to.
	Server *mcp.Server
	// ListDelay, in nanoseconds, slows each tools/list down (to keep a
	// refresh in flight).
	ListDelay atomic.Int64
	// Started gets a value each time a "block" call begins (TestTools).
	Started chan struct{}
	// Release ends "block" calls: a send ends one, closing it ends all.
	Release chan struct{}
	// Cancelled gets a value each time a "block" call is cancelled.
	Cancelled chan struct{}

	cfg      UpstreamConfig
	mu       sync.Mutex
	tools    map[string]bool
	sessions []net.Conn // the server ends of the live connections
	dials    int
	metas    []mcp.Meta // _meta of each "meta" call
}

// NewUpstream returns the upstream cfg describes.
func NewUpstream(cfg UpstreamConfig) *Upstream {
	u := &Upstream{
		Name: cfg.Name, Server: cfg.Server, cfg: cfg, tools: make(map[string]bool),
		Started: make(chan struct{}, 16), Release: make(chan struct{}), Cancelled: make(chan struct{}, 16),
	}
	if u.Server == nil {
		u.Server = mcp.NewServer(&mcp.Implementation{Name: "up-" + cfg.Name, Version: "1"},
			&mcp.ServerOptions{Logger: slog.New(slog.DiscardHandler), PageSize: cfg.PageSize})
		u.Server.AddPrompt(&mcp.Prompt{Name: "greet", Description: "say hello"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{}, nil
		})
		uri := cfg.Resource
		if uri == "" {
			uri = "file:///" + cfg.Name
		}
		u.Server.AddResource(&mcp.Resource{URI: uri, Name: uri[strings.LastIndex(uri, "/")+1:]}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{}, nil
		})
	}
	u.Server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if d := u.ListDelay.Load(); d > 0 && method == "tools/list" {
				time.Sleep(time.Duration(d)) // the delay is what the test asks for
			}
			return next(ctx, method, req)
		}
	})
	for _, tool := range cfg.Tools {
		u.AddTool(tool)
	}
	if cfg.TestTools {
		u.addTestTools()
	}
	return u
}

// AddTool adds (or replaces) the read-only tool name, which answers
// "<Name>/<name>" plus UpstreamConfig.Reply.
func (u *Upstream) AddTool(name string) {
	u.mu.Lock()
	u.tools[name] = true
	u.mu.Unlock()
	schema := json.RawMessage(`{"type":"object"}`)
	if u.cfg.PathArg {
		schema = json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)
	}
	text := u.Name + "/" + name + u.cfg.Reply
	u.Server.AddTool(&mcp.Tool{
		Name:        name,
		Description: "the " + name + " tool of " + u.Name,
		InputSchema: schema,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil
	})
}

// RemoveTool removes the tool name.
func (u *Upstream) RemoveTool(name string) {
	u.mu.Lock()
	delete(u.tools, name)
	u.mu.Unlock()
	u.Server.RemoveTools(name)
}

// ToolNames lists, sorted, the tools added with AddTool and not removed.
func (u *Upstream) ToolNames() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Sorted(maps.Keys(u.tools))
}

// Transport connects a new server session and returns the client's
// transport; Kill and KillAll break it.
func (u *Upstream) Transport(ctx context.Context) (mcp.Transport, error) {
	ct, sc, err := Connect(ctx, u.Server)
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", u.Name, err)
	}
	u.mu.Lock()
	u.sessions = append(u.sessions, sc)
	u.dials++
	u.mu.Unlock()
	return ct, nil
}

// Dials returns how many times Transport connected.
func (u *Upstream) Dials() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.dials
}

// Kill breaks the newest connection, as if that upstream process crashed.
func (u *Upstream) Kill() {
	u.mu.Lock()
	if len(u.sessions) == 0 {
		u.mu.Unlock()
		return
	}
	ss := u.sessions[len(u.sessions)-1]
	u.mu.Unlock()
	_ = ss.Close()
}

// KillAll breaks every connection, as if the upstream crashed.
func (u *Upstream) KillAll() {
	u.mu.Lock()
	ss := u.sessions
	u.sessions = nil
	u.mu.Unlock()
	for _, s := range ss {
		_ = s.Close()
	}
}

// LastMeta returns the _meta of the latest "meta" call, or nil.
func (u *Upstream) LastMeta() mcp.Meta {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.metas) == 0 {
		return nil
	}
	return u.metas[len(u.metas)-1]
}

type textIn struct {
	Text string `json:"text"`
}

func (u *Upstream) addTestTools() {
	mcp.AddTool(u.Server, &mcp.Tool{Name: "progress"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		tok := req.Params.GetProgressToken()
		for i := 1; i <= 3; i++ {
			if tok != nil {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Total: 3, Message: fmt.Sprintf("step %d", i)}); err != nil {
					return nil, nil, err
				}
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	})
	mcp.AddTool(u.Server, &mcp.Tool{Name: "meta"}, func(_ context.Context, req *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, any, error) {
		u.mu.Lock()
		u.metas = append(u.metas, req.Params.Meta)
		u.mu.Unlock()
		return &mcp.CallToolResult{Meta: mcp.Meta{"example.com/answer": 42.0}, Content: []mcp.Content{&mcp.TextContent{Text: "got " + in.Text}}}, nil, nil
	})
	mcp.AddTool(u.Server, &mcp.Tool{Name: "block"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		u.Started <- struct{}{}
		select {
		case <-u.Release:
		case <-ctx.Done():
			u.Cancelled <- struct{}{}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "released"}}}, nil, nil
	})
	u.Server.AddTool(&mcp.Tool{Name: "fail", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "it failed upstream"}}}, nil
	})
}
