// Command team-access is a wasmhost policy plugin (ABI v1): an Extism plugin
// that turns a session's settings for one MCP server into a metadata key and
// decides which of the server's tools, prompts and resources the session
// sees.
//
// The policy itself is plain Go in policy.go, testable with `go test` on any
// platform; exports.go wires it to the three Extism exports when the package
// is built for WebAssembly:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -buildvcs=false -o team-access.wasm .
package main

// main is never called: a -buildmode=c-shared module is a library whose
// exports the host calls, but package main still needs the function.
func main() {}
