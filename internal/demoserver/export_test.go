package demoserver

// ExitCode exposes exitCode to the external tests.
var ExitCode = exitCode
