package reconcile

import (
	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/pool"
)

// SpecOf returns the transport identity of a config server entry,
// copying its slices and maps.
func SpecOf(s *config.Server) pool.Spec {
	return pool.Spec{
		Name:    s.Name,
		Command: s.Command,
		Args:    s.Args,
		Env:     s.Env,
		Cwd:     s.Cwd,
		URL:     s.URL,
		HTTPURL: s.HTTPURL,
		Headers: s.Headers,
		Timeout: s.Timeout,
		Pooled:  s.Pooled,

		ProtocolVersion:   s.ProtocolVersion,
		MaxListingBytes:   s.MaxListingBytes,
		NoBridgeInference: s.NoBridgeInference,
	}.Clone()
}
