package host

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
)

// TestDefaultDirectCanonicalizeMakesNoGarbage checks, from the host, that
// the default plugin's direct canonicalize reuses its buffers instead of
// leaving some 600 KiB of garbage per call of a thousand settings for the
// Go runtime's collector (slow in WebAssembly). The measure is the
// instance's linear memory: Go's runtime collects only once its heap has
// grown past a goal of at least 4 MiB, so a plugin that makes fresh
// buffers every call grows its memory by megabytes within a few calls (the
// build before buffer reuse: from 4.5 to 8.3 MiB over these calls), while one
// that reuses them stays where its first call left it.
func TestDefaultDirectCanonicalizeMakesNoGarbage(t *testing.T) {
	p := loadDefault(t, Options{MaxInstances: 1})
	checkCanonicalizeMakesNoGarbage(t, p)
}

// checkCanonicalizeMakesNoGarbage makes canonicalize calls of a thousand
// distinct settings objects, each request as long as the last, on one
// instance of p, and fails when its memory grows after the first two.
func checkCanonicalizeMakesNoGarbage(t *testing.T, p *Plugin) {
	t.Helper()
	request := func(call int) []byte {
		req := []byte(`{"settings":[`)
		for i := range 1000 {
			if i > 0 {
				req = append(req, ',')
			}
			req = fmt.Appendf(req, `{"trust":true,"includeTools":["read_file(path)","tool_%04d_%04d"],"excludeTools":["x_%04d","chmod"]}`, call, i, i)
		}
		return append(req, "]}"...)
	}
	ctx := context.Background()
	inst, err := p.acquire(ctx)
	require.NoError(t, err)
	healthy := true
	defer func() { p.release(inst, healthy, abi.ExportCanonicalize, nil) }()
	require.NotNil(t, inst.direct, "the default plugin has direct exports")
	var sizes []uint32
	for call := range 30 {
		out, ok, err := p.invoke(ctx, inst, abi.ExportCanonicalize, request(call))
		healthy = ok
		require.NoError(t, err, "call %d", call)
		require.Greater(t, len(out), 100_000, "call %d", call)
		sizes = append(sizes, inst.direct.mem.Size())
	}
	assert.Equal(t, int64(p.stats.direct.Load()), p.stats.calls.Load()-1, "every call but the handshake was direct")
	grown := sizes[len(sizes)-1] - sizes[1]
	assert.Zero(t, grown, "the plugin's memory grew by %d KiB after its second call (sizes %v)", grown>>10, sizes)
}
