package main

import "github.com/wasmhost/wasmhost/internal/mcptest"

// The waits of these tests, shared with the other packages' (see
// internal/mcptest/wait.go).
const (
	readyWithin = mcptest.ReadyWithin
	eventWithin = mcptest.EventWithin
)

var (
	within  = mcptest.Within
	waitFor = mcptest.WaitFor
	stacks  = mcptest.Stacks
)

// noLogs is waitFor's logs for a wait whose logs the test prints itself
// when it fails (pipeClient's cleanup prints the command's standard
// error).
func noLogs() string { return "(below)" }
