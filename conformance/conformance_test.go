package conformance

import (
	"context"
	stdflag "flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"

	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/metakey"
)

// The public suite of the default policy: the embedded wasm plugin and the
// native reference must both pass every case.
const defaultSuite = "golden/default"

// TestMain gives the test binary one compilation cache (RunT reads it from
// the environment), so each plugin compiles once.
func TestMain(m *testing.M) {
	// -short uses the cache kept between runs (host.DefaultCacheDir),
	// so a second -short run compiles nothing; a full run starts empty.
	stdflag.Parse() // for testing.Short
	if dir := host.DefaultCacheDir(); testing.Short() && dir != "" {
		os.Setenv(host.CacheDirEnv, dir)
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "wasmhost-conformance-test-cache-")
	if err != nil {
		panic(err)
	}
	os.Setenv(host.CacheDirEnv, dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestGoldenDefaultPlugin(t *testing.T) {
	// A generous call timeout: this test is about answers, and -race on a
	// shared machine slows the host side of every call.
	p, err := host.LoadEmbedded(t.Context(), policydefault.Name, policydefault.Wasm, policydefault.SHA256, host.Options{CacheDir: os.Getenv(host.CacheDirEnv), CallTimeout: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close(context.Background())) })
	RunPolicyT(t, p, defaultSuite)
}

func TestGoldenReference(t *testing.T) {
	RunPolicyT(t, metakey.Reference{}, defaultSuite)
}

// pluginSuites are the plugins committed in the repository, loaded from
// their files as plugin authors' tests load theirs, with the suites they
// must pass. The default plugin has direct exports, so RunT checks it both
// ways.
var pluginSuites = []struct{ wasm, suite string }{
	{"../plugins/policy-default/policy-default.wasm", defaultSuite},
	{"../testplugins/prefix-policy/prefix-policy.wasm", "../testplugins/prefix-policy/golden"},
	{"../testplugins/policy-default-as/policy-default-as.wasm", defaultSuite},
}

func TestGoldenTestPlugins(t *testing.T) {
	if testing.Short() {
		t.Skip("runs whole golden suites against the test plugins; TestGoldenDefaultPlugin stays in -short; run without -short")
	}
	for _, ps := range pluginSuites {
		t.Run(filepath.Base(ps.wasm), func(t *testing.T) {
			RunT(t, ps.wasm, ps.suite)
		})
	}
}
