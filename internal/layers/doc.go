// Package layers holds no code. Its tests check that wasmhost's packages
// import one another only in the directions docs/architecture.md draws,
// and that every package comment fits in 20 lines.
package layers
