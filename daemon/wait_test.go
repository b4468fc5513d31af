package daemon_test

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

// lazy is a value for waitFor's message that is worked out when the
// wait fails, not when it begins.
type lazy func() string

func (f lazy) String() string { return f() }
