package host

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// testCacheDir is a compilation cache shared by every test in the binary:
// the default plugin compiles once (seconds, more under -race) and later
// loads read the cache. A full run starts from an empty one; -short uses
// DefaultCacheDir, the cache kept between runs that the daemon's tests
// and the command line share, so a second -short run compiles nothing.
var testCacheDir string

func TestMain(m *testing.M) {
	flag.Parse() // for testing.Short
	dir, temp := DefaultCacheDir(), ""
	if !testing.Short() || dir == "" {
		var err error
		dir, err = os.MkdirTemp("", "wasmhost-host-test-cache-")
		if err != nil {
			panic(err)
		}
		temp = dir
	}
	testCacheDir = dir
	code := m.Run()
	if shared.p != nil {
		if err := shared.p.Close(context.Background()); err != nil {
			println("closing the shared default plugin:", err.Error())
			code = 1
		}
	}
	if temp != "" {
		_ = os.RemoveAll(temp)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			println("goleak:", err.Error())
			code = 1
		}
	}
	os.Exit(code)
}

// watWasm returns testplugins/wat/<name>.wasm.
func watWasm(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testplugins", "wat", name+".wasm"))
	require.NoError(t, err)
	return b
}

// loadWat loads testplugins/wat/<name>.wasm and closes it when t ends.
func loadWat(t testing.TB, name string, opts Options) *Plugin {
	t.Helper()
	p, err := Load(context.Background(), name, watWasm(t, name), opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close(context.Background())) })
	return p
}

// loadDefault loads the embedded default plugin through the shared cache
// (with a one-minute call timeout unless opts sets one) and closes it when
// t ends.
func loadDefault(t testing.TB, opts Options) *Plugin {
	t.Helper()
	opts.CacheDir = testCacheDir
	if opts.CallTimeout == 0 {
		// These tests are not about timeouts; the machine is shared and
		// -race slows the host side of each call.
		opts.CallTimeout = time.Minute
	}
	p, err := loadEmbeddedDefault(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close(context.Background())) })
	return p
}

// shared is the default plugin that sharedDefault loads once.
var shared struct {
	once sync.Once
	p    *Plugin
	err  error
}

// sharedDefault returns the embedded default plugin as loadDefault(t,
// Options{}) loads it, but loaded once for the whole binary (TestMain
// closes it): the 4 MB plugin is loaded by one test instead of many. Only
// tests that look at its answers, handshake and exports use it; those that
// count its calls or instances, or use other options, load their own.
func sharedDefault(t testing.TB) *Plugin {
	t.Helper()
	shared.once.Do(func() {
		shared.p, shared.err = loadEmbeddedDefault(context.Background(), Options{CacheDir: testCacheDir, CallTimeout: time.Minute})
	})
	require.NoError(t, shared.err)
	return shared.p
}

// shortTimeout is the call timeout of tests that expect timeouts.
const shortTimeout = 200 * time.Millisecond

// timeoutMargin is how much later than its limit a timed-out call may
// return in tests (the machine is shared and -race is slow).
const timeoutMargin = 5 * time.Second

// loadEmbeddedDefault loads the default policy, as the daemon does.
func loadEmbeddedDefault(ctx context.Context, opts Options) (*Plugin, error) {
	return LoadEmbedded(ctx, policydefault.Name, policydefault.Wasm, policydefault.SHA256, opts)
}
