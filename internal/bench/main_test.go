package bench

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/metakey"
)

var (
	pluginOnce sync.Once
	plugin     *host.Plugin
	pluginErr  error
)

// wasmPolicy returns the default wasm policy plugin, loaded once per test
// binary with the daemon's default options (memory cap, call timeout and
// GOMAXPROCS instances; the sandbox as always). The compiled code is cached
// on disk between runs so that each benchmark process does not compile it
// again; start-up itself is measured in package host.
func wasmPolicy(tb testing.TB) *host.Plugin {
	tb.Helper()
	pluginOnce.Do(func() {
		dir := filepath.Join(os.TempDir(), "wasmhost-bench-cache")
		plugin, pluginErr = host.LoadEmbedded(context.Background(), policydefault.Name, policydefault.Wasm, policydefault.SHA256, host.Options{CacheDir: dir})
	})
	if pluginErr != nil {
		tb.Fatal(pluginErr)
	}
	return plugin
}

// A namedPolicy is one side of a wasm-versus-native pair.
type namedPolicy struct {
	name string
	p    abi.Policy
}

// policies returns the pair every policy benchmark runs: the default wasm
// plugin (the target) and the native reference (the baseline).
func policies(tb testing.TB) []namedPolicy {
	return []namedPolicy{{"wasm", wasmPolicy(tb)}, {"native", metakey.Reference{}}}
}

// generation numbers fresh settings across every benchmark of the process,
// so that no memo keyed by settings bytes ever sees the same settings twice.
var generation atomic.Int64

func nextGeneration() int { return int(generation.Add(1)) }

func TestMain(m *testing.M) {
	// The data path benchmark starts this very binary as a stdio upstream.
	demoserver.RunIfChild()
	// BenchmarkGateways starts it as a gateway too.
	runGatewayChild()
	code := m.Run()
	if plugin != nil {
		_ = plugin.Close(context.Background())
	}
	os.Exit(code)
}
