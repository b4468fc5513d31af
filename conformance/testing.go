package conformance

import (
	"context"
	"os"
	"testing"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/host"
)

// RunT loads the plugin at wasmPath with the host's default limits and runs
// the suites at paths against it, each file as a subtest of t and each case
// as a subtest of its file (TestX/FILE/CASE). A plugin that cannot be loaded
// or a path that cannot be read stops the test with t.Fatal. A plugin with
// direct exports (abi/SPEC.md section 5.2) runs the suites both ways, as
// `wasmhost conformance` does ([RunBothWays]): a case passes when it passes
// through direct calls and through Extism calls (host.Options.NoDirect)
// with the same answers. The compiled plugin is cached in
// $WASMHOST_CACHE_DIR when that is set.
func RunT(t *testing.T, wasmPath string, paths ...string) {
	t.Helper()
	p, err := host.LoadFile(t.Context(), wasmPath, host.Options{CacheDir: os.Getenv(host.CacheDirEnv)})
	if err != nil {
		t.Fatalf("conformance: load plugin: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(context.Background()); err != nil {
			t.Errorf("conformance: close plugin %s: %v", wasmPath, err)
		}
	})
	if !p.HasDirect() {
		RunPolicyT(t, p, paths...)
		return
	}
	// A plugin with direct exports must pass both ways, with the same
	// answers.
	ep, err := host.LoadFile(t.Context(), wasmPath, host.Options{CacheDir: os.Getenv(host.CacheDirEnv), NoDirect: true})
	if err != nil {
		t.Fatalf("conformance: load plugin without direct calls: %v", err)
	}
	t.Cleanup(func() { _ = ep.Close(context.Background()) })
	runBothWaysT(t, p, ep, paths...)
}

// runBothWaysT reports [RunBothWays] of the suites at paths as subtests,
// TestX/FILE/CASE, as RunPolicyT does for one way.
func runBothWaysT(t *testing.T, p, extism abi.Policy, paths ...string) {
	t.Helper()
	suites, err := Load(paths...)
	if err != nil {
		t.Fatal(err)
	}
	results := RunBothWays(t.Context(), p, extism, suites).Results
	for _, s := range suites {
		n := 1 // a file that is not a suite has one result, its own
		if s.Err == nil {
			n = len(s.Cases)
		}
		mine := results[:n]
		results = results[n:]
		t.Run(s.Rel, func(t *testing.T) {
			t.Helper() // failures point at the caller's test, not this file
			if s.Err != nil {
				t.Error(mine[0].String())
				return
			}
			for i, c := range s.Cases {
				t.Run(c.Name, func(t *testing.T) {
					t.Helper()
					if !mine[i].Passed {
						t.Error(mine[i].String())
					}
				})
			}
		})
	}
}

// RunPolicyT runs the suites at paths against p, each file as a subtest of t
// and each case as a subtest of its file, as [Run] does (batch path
// included). A path that cannot be read stops the test with t.Fatal.
func RunPolicyT(t *testing.T, p abi.Policy, paths ...string) {
	t.Helper()
	suites, err := Load(paths...)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range suites {
		t.Run(s.Rel, func(t *testing.T) {
			t.Helper() // failures point at the caller's test, not this file
			if s.Err != nil {
				t.Error(fileResult(s).String())
				return
			}
			sb := newSuiteBatch(t.Context(), p, s.Cases)
			for _, c := range s.Cases {
				t.Run(c.Name, func(t *testing.T) {
					t.Helper()
					if res := runCase(t.Context(), p, s, c, sb, nil); !res.Passed {
						t.Error(res.String())
					}
				})
			}
		})
	}
}
