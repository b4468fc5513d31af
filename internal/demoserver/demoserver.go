// Package demoserver is a small MCP server built from wasmhost's own code. It
// is the upstream that `make run` and the stdio harness tests share between
// sessions, so trying wasmhost needs nothing installed.
//
// It offers tools with real input schemas and annotations (some read-only,
// some not), two prompts, two resources and a resource template. It
// completes note names and takes subscriptions to notes (write_note
// notifies them). One tool adds a tool at run time, so that list_changed
// notifications can be seen end to end.
package demoserver

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Version is the demo server's reported implementation version.
const Version = "1.0.0"

// A Server is the demo upstream: an mcp.Server plus the little state its
// tools share.
type Server struct {
	srv  *mcp.Server
	subs Subscriptions // what clients subscribed to (write_note notifies them)

	mu    sync.Mutex
	notes map[string]string // guarded by mu
	extra int               // number of tools added by add_tool; guarded by mu
}

type echoIn struct {
	Text string `json:"text" jsonschema:"the text to echo back"`
}

type addIn struct {
	A float64 `json:"a" jsonschema:"first addend"`
	B float64 `json:"b" jsonschema:"second addend"`
}

type noteIn struct {
	Name string `json:"name" jsonschema:"the note's name"`
	Text string `json:"text,omitempty" jsonschema:"the note's text (write_note only)"`
}

type noteOut struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

// Instructions is what the demo server's initialize result says of it.
const Instructions = "The wasmhost demo: echo, add and note tools, for trying sessions out."

// New returns a demo server with its tools, prompts and resources registered.
func New() *Server {
	s := &Server{notes: map[string]string{"welcome": "Hello from the wasmhost demo server."}}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: "wasmhost-demo", Version: Version}, &mcp.ServerOptions{
		Instructions:       Instructions,
		CompletionHandler:  s.complete,
		SubscribeHandler:   s.subs.Subscribe,
		UnsubscribeHandler: s.subs.Unsubscribe,
	})

	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true}
	mcp.AddTool(s.srv, &mcp.Tool{Name: "echo", Description: "Echo the given text.", Annotations: readOnly}, s.echo)
	mcp.AddTool(s.srv, &mcp.Tool{Name: "add", Description: "Add two numbers.", Annotations: readOnly}, s.add)
	mcp.AddTool(s.srv, &mcp.Tool{Name: "read_note", Description: "Read a note by name.", Annotations: readOnly}, s.readNote)
	mcp.AddTool(s.srv, &mcp.Tool{Name: "write_note", Description: "Write a note."}, s.writeNote)
	mcp.AddTool(s.srv, &mcp.Tool{Name: "pid", Description: "Report the server's process id.", Annotations: readOnly}, s.pid)
	mcp.AddTool(s.srv, &mcp.Tool{Name: "add_tool", Description: "Register one more tool (extra_N) at run time; upstream sends tools/list_changed."}, s.addTool)

	s.srv.AddPrompt(&mcp.Prompt{Name: "summarize", Description: "Summarize a note.", Arguments: []*mcp.PromptArgument{{Name: "name", Required: true}}}, s.summarize)
	s.srv.AddPrompt(&mcp.Prompt{Name: "greet", Description: "A greeting."}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "Say hello."}}}}, nil
	})
	s.srv.AddResource(&mcp.Resource{URI: "demo://notes/welcome", Name: "welcome", MIMEType: "text/plain"}, s.readResource)
	s.srv.AddResource(&mcp.Resource{URI: "demo://about", Name: "about", MIMEType: "text/plain"}, s.readResource)
	s.srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "demo://notes/{name}", Name: "note", Description: "A note written with write_note.", MIMEType: "text/plain"}, s.readResource)
	return s
}

// MCP returns the underlying go-sdk server.
func (s *Server) MCP() *mcp.Server { return s.srv }

// ServeStdio serves the demo server over stdin/stdout until ctx is done or
// the client disconnects.
func ServeStdio(ctx context.Context) error {
	return New().srv.Run(ctx, &mcp.StdioTransport{})
}

func text(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

func (s *Server) echo(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
	return text("%s", in.Text), nil, nil
}

func (s *Server) add(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, any, error) {
	return text("%g", in.A+in.B), nil, nil
}

func (s *Server) pid(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
	return text("%d", os.Getpid()), nil, nil
}

func (s *Server) readNote(_ context.Context, _ *mcp.CallToolRequest, in noteIn) (*mcp.CallToolResult, noteOut, error) {
	s.mu.Lock()
	t, ok := s.notes[in.Name]
	s.mu.Unlock()
	if !ok {
		return nil, noteOut{}, fmt.Errorf("no note named %q", in.Name)
	}
	return nil, noteOut{Name: in.Name, Text: t}, nil
}

func (s *Server) writeNote(ctx context.Context, _ *mcp.CallToolRequest, in noteIn) (*mcp.CallToolResult, noteOut, error) {
	if in.Name == "" {
		return nil, noteOut{}, fmt.Errorf("name is empty")
	}
	s.mu.Lock()
	s.notes[in.Name] = in.Text
	s.mu.Unlock()
	// Clients subscribed to the note's URI hear that it changed.
	if err := s.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: "demo://notes/" + in.Name}); err != nil {
		return nil, noteOut{}, err
	}
	return nil, noteOut(in), nil
}

// Subscribed returns how many subscriptions each resource URI has from the
// client sessions still connected.
func (s *Server) Subscribed() map[string]int { return s.subs.Count(s.srv) }

func (s *Server) addTool(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
	s.mu.Lock()
	s.extra++
	name := fmt.Sprintf("extra_%d", s.extra)
	s.mu.Unlock()
	mcp.AddTool(s.srv, &mcp.Tool{Name: name, Description: "A tool added at run time."}, s.echo)
	return text("added %s", name), nil, nil
}

func (s *Server) summarize(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	name := req.Params.Arguments["name"]
	s.mu.Lock()
	t, ok := s.notes[name]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no note named %q", name)
	}
	return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "Summarize: " + t}}}}, nil
}

func (s *Server) readResource(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	var body string
	switch uri := req.Params.URI; {
	case uri == "demo://about":
		body = "wasmhost demo server " + Version
	case strings.HasPrefix(uri, "demo://notes/"):
		s.mu.Lock()
		t, ok := s.notes[strings.TrimPrefix(uri, "demo://notes/")]
		s.mu.Unlock()
		if !ok {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		body = t
	default:
		return nil, mcp.ResourceNotFoundError(uri)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: body}}}, nil
}

// NoteNames lists the notes in name order.
func (s *Server) NoteNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.notes))
}

// complete suggests the names of the notes that start with the value typed
// so far, for the "name" argument of the summarize prompt and of the note
// template; anything else has no suggestions.
func (s *Server) complete(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	p := req.Params
	noteName := p.Argument.Name == "name" &&
		(p.Ref.Type == "ref/prompt" && p.Ref.Name == "summarize" ||
			p.Ref.Type == "ref/resource" && p.Ref.URI == "demo://notes/{name}")
	values := []string{}
	if noteName {
		for _, n := range s.NoteNames() {
			if strings.HasPrefix(n, p.Argument.Value) {
				values = append(values, n)
			}
		}
	}
	return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: values, Total: len(values)}}, nil
}
