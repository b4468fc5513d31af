// Package validate checks deploy/kubernetes offline. Its test builds every
// kustomization with the kustomize library and decodes each resource
// strictly into the k8s.io/api types (an unknown or duplicate field fails).
// It then checks that the pieces agree with each other and with the
// daemon:
//
//   - the probes' paths;
//   - a grace period covering the preStop delay and the drain;
//   - the config, parsed by wasmhost's own config package against the
//     Secret's tokens;
//   - the policy's sha256 pin;
//   - the Ingress's affinity, which must be the one deploy/haproxy's test
//     runs.
//
// It is a module of its own so that k8s.io/api, k8s.io/apimachinery and
// kustomize stay out of wasmhost's dependencies; `make test` runs it.
package validate
