// Package haproxy holds no code: haproxy.cfg is the HAProxy configuration
// for wasmhost replicas, and the package's test runs it in front of three
// replicas of the wasmhost binary (see docs/operations.md).
package haproxy
