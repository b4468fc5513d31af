package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/conformance"
	"github.com/wasmhost/wasmhost/view"
)

// projectOutput is what `wasmhost project` prints: the golden form of the
// projection, and with --full the projected MCP objects themselves (tools
// with the session flags in _meta).
type projectOutput struct {
	conformance.Projected
	Full *fullProjection `json:"full,omitempty"`
}

// fullProjection is a view.Projection with the JSON names of the golden
// format.
type fullProjection struct {
	Tools     []*mcp.Tool     `json:"tools"`
	Prompts   []*mcp.Prompt   `json:"prompts"`
	Resources []*mcp.Resource `json:"resources"`
}

// runProject implements `wasmhost project`: it projects a snapshot (the
// golden snapshot shape, {"tools": [...], "prompts": [...], "resources":
// [...]}) for one settings object and prints the result as indented JSON in
// the golden "project" shape. --full adds "full": the projected tools,
// prompts and resources as MCP objects. Settings default to {}. A projection
// the policy refuses exits 1.
func runProject(ctx context.Context, args []string, s stdio) int {
	var pf pluginFlags
	var settingsArg, snapshotArg string
	var full bool
	fs := newFlagSet("project", "[flags] --snapshot SNAPSHOT|@FILE|- [--settings SETTINGS|@FILE|-]", s)
	pf.register(fs)
	fs.StringVar(&settingsArg, "settings", "{}", "settings object as `JSON`, @FILE, or - for standard input")
	fs.StringVar(&snapshotArg, "snapshot", "", "snapshot as `JSON` ({\"tools\":[...],\"prompts\":[...],\"resources\":[...]}), @FILE, or -")
	fs.BoolVar(&full, "full", false, "also print the projected MCP objects under \"full\"")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return parseStatus(err)
	}
	switch {
	case len(pos) > 0:
		s.errorf("project", "unexpected argument %q (settings and snapshot are flags)", pos[0])
		return exitUsage
	case snapshotArg == "":
		s.errorf("project", "--snapshot is required")
		return exitUsage
	case settingsArg == "-" && snapshotArg == "-":
		s.errorf("project", "only one of --settings and --snapshot can read standard input")
		return exitUsage
	}
	settings, err := readInput(settingsArg, s.in)
	if err != nil {
		s.errorf("project", "settings: %v", err)
		return exitUsage
	}
	settings = bytes.TrimSpace(settings)
	if err := checkJSON(settings); err != nil {
		s.errorf("project", "settings are not valid JSON: %v", err)
		return exitUsage
	}
	rawSnap, err := readInput(snapshotArg, s.in)
	if err != nil {
		s.errorf("project", "snapshot: %v", err)
		return exitUsage
	}
	snap, err := conformance.DecodeSnapshot(bytes.TrimSpace(rawSnap))
	if err != nil {
		s.errorf("project", "snapshot: %v", err)
		return exitUsage
	}

	p, err := pf.load(ctx, s.err)
	if err != nil {
		s.errorf("project", "load plugin: %v", err)
		return exitUsage
	}
	defer p.Close(context.WithoutCancel(ctx))

	proj, err := view.Project(ctx, p, settings, snap)
	if err != nil {
		s.errorf("project", "%v", err)
		return exitFail
	}
	sum, err := conformance.SummarizeSnapshot(proj, snap)
	if err != nil {
		s.errorf("project", "%v", err)
		return exitFail
	}
	out := projectOutput{Projected: sum}
	if full {
		out.Full = &fullProjection{
			Tools:     append([]*mcp.Tool{}, proj.Tools...),
			Prompts:   append([]*mcp.Prompt{}, proj.Prompts...),
			Resources: append([]*mcp.Resource{}, proj.Resources...),
		}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		s.errorf("project", "%v", err)
		return exitFail
	}
	fmt.Fprintln(s.out, string(b))
	return exitOK
}
