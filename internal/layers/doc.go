// Package layers holds no code: its test checks that wasmhost's packages
// import one another only in the directions docs/architecture.md draws.
package layers
