package host

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/testplugins/hostile-go/sandboxprobe"
)

// The Go plugins in testplugins/hostile-go (see the README there): hostile
// misbehaves as its settings ask ({"mode": ...}), nondeterministic puts a
// call counter in its keys.

// hostileCap is the memory cap the hostile plugin runs under in these
// tests: small, so the memory bomb reaches it quickly.
const hostileCap = 64 << 20

// hostileWasm returns testplugins/hostile-go/<name>/<name>.wasm.
func hostileWasm(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testplugins", "hostile-go", name, name+".wasm"))
	require.NoError(t, err, "build it with make plugins")
	return b
}

// loadHostile loads testplugins/hostile-go/<name> through the shared
// compilation cache and closes it when t ends.
func loadHostile(t testing.TB, name string, opts Options) *Plugin {
	t.Helper()
	opts.CacheDir = testCacheDir
	p, err := Load(context.Background(), name, hostileWasm(t, name), opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close(context.Background())) })
	return p
}

// goodSettings is what the calls that must keep working send.
const goodSettings = `{"mode":"good","includeTools":["read","list"],"trust":true}`

// wantCanonical is the reference answer for one settings object, which the
// hostile plugin gives too when it behaves (its keys add the mode).
func wantCanonical(t testing.TB, settings string) abi.CanonicalResult {
	t.Helper()
	resp, err := metakey.Reference{}.Canonicalize(context.Background(), &abi.CanonicalizeRequest{Settings: raws(settings)})
	require.NoError(t, err)
	return resp.Results[0]
}

// projectReq is the project request the tests send.
func projectReq(settings string) *abi.ProjectRequest {
	return &abi.ProjectRequest{
		Settings:  json.RawMessage(settings),
		Tools:     []string{"read", "write", "list"},
		Prompts:   []string{"read", "summarize"},
		Resources: []string{"file:///a"},
	}
}

func wantProject(t testing.TB, settings string) *abi.ProjectResponse {
	t.Helper()
	resp, err := metakey.Reference{}.Project(context.Background(), projectReq(settings))
	require.NoError(t, err)
	return resp
}

// servedRounds numbers keepServing's rounds across the test binary.
var servedRounds atomic.Int64

// keepServing makes good calls on p from another goroutine until the
// returned stop is called, checking every answer against the reference, and
// stop returns how many rounds succeeded (at least one round always runs).
// Each round uses settings the plugin has not seen, so that every call
// reaches the plugin rather than the memo.
func keepServing(t *testing.T, p *Plugin) (stop func() int) {
	t.Helper()
	var (
		stopped atomic.Bool
		ok      atomic.Int64
		wg      sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx := context.Background()
		for i := 0; i == 0 || !stopped.Load(); i++ {
			// A number no call in this process has used: p may be a
			// plugin shared by other tests, whose memo would answer a
			// settings object it has seen.
			settings := fmt.Sprintf(`{"includeTools":["read","other-%d"],"alwaysLoadTools":true}`, servedRounds.Add(1))
			resp, err := canon(p, settings)
			if !assert.NoError(t, err, "a good call on another plugin while the hostile one misbehaves") {
				return
			}
			if !assert.Equal(t, wantCanonical(t, settings), resp.Results[0]) {
				return
			}
			proj, err := p.Project(ctx, projectReq(settings))
			if !assert.NoError(t, err, "a good project call on another plugin") {
				return
			}
			if diff := cmp.Diff(wantProject(t, settings), proj); diff != "" {
				t.Errorf("projection (-want +got):\n%s", diff)
				return
			}
			ok.Add(1)
		}
	}()
	return func() int {
		stopped.Store(true)
		wg.Wait()
		return int(ok.Load())
	}
}

// heapAlloc returns the host's live heap after a garbage collection.
func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// peakHeap samples the host's heap until the returned stop is called,
// which returns the largest HeapAlloc seen.
func peakHeap() (stop func() uint64) {
	var (
		peak uint64
		wg   sync.WaitGroup
	)
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak
	}
}

// TestHostileContainment runs each misbehaviour of the hostile plugin
// through both exports and checks the host contains it: a typed error
// within the call limit (plus a margin for a shared, -race machine), the
// instance discarded and a fresh one serving the next call, the host's heap
// bounded by the memory cap, and another plugin serving good calls all
// along.
func TestHostileContainment(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the hostile Go plugin's misbehaviours")
	}
	other := sharedDefault(t)
	both := []string{abi.ExportCanonicalize, abi.ExportProject}
	tests := []struct {
		mode    string
		exports []string // nil: both
		timeout time.Duration
		want    error
		msg     map[string]string // in the error, by export ("" for both)
		stderr  string            // a line the guest writes to stderr (%s: the export)
	}{
		{mode: "panic", want: ErrPluginTrap, msg: map[string]string{"": "runtime.gopanic"},
			stderr: "panic: hostile: %s panics on purpose"},
		{mode: "bomb", want: ErrPluginTrap, msg: map[string]string{"": "runtime.growslice"},
			stderr: "fatal error: out of memory"},
		{mode: "recurse", want: ErrPluginTrap, msg: map[string]string{"": "runtime.morestack"},
			stderr: "fatal error: stack overflow"},
		{mode: "loop", timeout: time.Second, want: ErrPluginTimeout, msg: map[string]string{"": "(limit 1s)"}},
		// Writing 16 MiB and more takes seconds under -race on a loaded
		// machine: room enough that the output limit, which want checks,
		// and not the time limit stops it.
		{mode: "big", timeout: 2 * time.Minute, want: ErrBadOutput, msg: map[string]string{"": "bytes of output, limit 16777216"}},
		{mode: "shape", want: ErrBadOutput, msg: map[string]string{
			abi.ExportCanonicalize: "canonicalize: 0 results for 1 settings objects",
			abi.ExportProject:      "project: tools[3]: index 3 out of range [0,3)",
		}},
		{mode: "fields", exports: []string{abi.ExportCanonicalize}, want: ErrBadOutput,
			msg: map[string]string{"": "canonicalize: results[0]: neither a key (keys are never empty) nor an error"}},
	}
	for _, tt := range tests {
		exports := tt.exports
		if exports == nil {
			exports = both
		}
		for _, export := range exports {
			t.Run(tt.mode+"/"+export, func(t *testing.T) {
				timeout := tt.timeout
				if timeout == 0 {
					// Room for a 16 MiB output under -race; the misbehaviours
					// end by themselves well before.
					timeout = 20 * time.Second
				}
				var logs recordHandler
				p := loadHostile(t, "hostile", Options{
					MemoryLimitBytes: hostileCap, CallTimeout: timeout, MaxInstances: 1, Logger: slogNew(&logs),
				})
				settings := fmt.Sprintf(`{"mode":%q,"in":%q,"trust":true}`, tt.mode, export)
				// A good call first, so the instance the misbehaviour
				// breaks has served before.
				_, err := canon(p, goodSettings)
				require.NoError(t, err)

				stop := keepServing(t, other)
				baseline := heapAlloc()
				created, discarded := p.stats.created.Load(), p.stats.discarded.Load()
				peak := peakHeap()
				start := time.Now()
				if export == abi.ExportCanonicalize {
					_, err = canon(p, settings)
				} else {
					_, err = p.Project(context.Background(), projectReq(settings))
				}
				elapsed := time.Since(start)
				peakAlloc := peak()
				served := stop()

				require.ErrorIs(t, err, tt.want)
				assert.Contains(t, err.Error(), fmt.Sprintf(`plugin "hostile": %s: `, export))
				msg, ok := tt.msg[export]
				if !ok {
					msg = tt.msg[""]
				}
				// The error is one line; a trap's wasm stack trace, which
				// names where the guest failed, goes to the debug log.
				assert.NotContains(t, err.Error(), "\n", "a multi-line error")
				assert.Contains(t, err.Error()+"\n"+strings.Join(logs.attr("detail"), "\n"), msg)
				assert.Less(t, elapsed, timeout+timeoutMargin, "the call returned long after its limit")
				if tt.want == ErrPluginTimeout {
					assert.GreaterOrEqual(t, elapsed, timeout)
				}
				if tt.stderr != "" {
					line := strings.ReplaceAll(tt.stderr, "%s", export)
					assert.Contains(t, logs.attr("line"), line, "the guest's stderr")
					// The error itself says what the Go runtime reported, and
					// where in the plugin's own code.
					assert.Contains(t, err.Error(), fmt.Sprintf("(the plugin wrote %q to stderr, raised at github.com/wasmhost/wasmhost/testplugins/hostile-go/hostile/", line))
				}
				assert.Positive(t, served, "good calls on the other plugin")
				t.Logf("%s: %v after %v; %d good rounds on the other plugin meanwhile; heap peak +%d MiB",
					tt.mode, tt.want, elapsed.Round(time.Millisecond), served, (peakAlloc-min(peakAlloc, baseline))>>20)

				// The host's heap: bounded while the guest misbehaved, and
				// back near where it was once the instance is gone. During
				// the call the live heap holds at most the guest's memory and
				// the Extism kernel's (a cap each) and two copies of the
				// output (abi.MaxOutputBytes each) beyond the baseline, and
				// the collector lets garbage grow to about the live heap
				// again before it runs.
				bound := 2 * (baseline + 2*hostileCap + 2*abi.MaxOutputBytes)
				assert.Less(t, peakAlloc, bound, "host heap during the call (baseline %d MiB)", baseline>>20)
				after := heapAlloc()
				assert.Less(t, after, baseline+2*hostileCap, "host heap after the call (baseline %d MiB)", baseline>>20)

				// The broken instance was discarded; a fresh one serves the
				// next call correctly.
				assert.EqualValues(t, 1, p.stats.discarded.Load()-discarded, "instances discarded")
				assert.LessOrEqual(t, p.stats.live.Load(), int64(1), "instances alive")
				resp, err := canon(p, `{"mode":"good","excludeTools":["write"]}`)
				require.NoError(t, err, "the call after the misbehaviour")
				assert.Equal(t, wantCanonical(t, `{"excludeTools":["write"]}`), resp.Results[0])
				proj, err := p.Project(context.Background(), projectReq(goodSettings))
				require.NoError(t, err)
				if diff := cmp.Diff(wantProject(t, goodSettings), proj); diff != "" {
					t.Errorf("projection after the misbehaviour (-want +got):\n%s", diff)
				}
				assert.EqualValues(t, 1, p.stats.created.Load()-created, "a fresh instance replaced the broken one")
			})
		}
	}
}

// TestHostileOnlyItsCallFails: the misbehaviour of one export leaves the
// other export of the same settings working, and a batch holding a
// misbehaving settings object fails as a whole without memoizing anything.
func TestHostileOnlyItsCallFails(t *testing.T) {
	p := loadHostile(t, "hostile", Options{MemoryLimitBytes: hostileCap, CallTimeout: 20 * time.Second, MaxInstances: 1})
	const inProject = `{"mode":"panic","in":"project","excludeTools":["list"]}`
	resp, err := canon(p, inProject)
	require.NoError(t, err, "canonicalize of settings whose mode is for project only")
	want := wantCanonical(t, inProject)
	want.Key += " mode=panic in=project"
	assert.Equal(t, want, resp.Results[0], "the key names the mode, so a view re-projects")
	_, err = p.Project(context.Background(), projectReq(inProject))
	require.ErrorIs(t, err, ErrPluginTrap)

	calls := p.stats.calls.Load()
	_, err = canon(p, `{"trust":true}`, `{"mode":"shape"}`, `{"trust":false}`)
	require.ErrorIs(t, err, ErrBadOutput)
	assert.Contains(t, err.Error(), "2 results for 3 settings objects")
	resp, err = canon(p, `{"trust":true}`, `{"trust":false}`)
	require.NoError(t, err)
	assert.Equal(t, []string{wantCanonical(t, `{"trust":true}`).Key, wantCanonical(t, `{"trust":false}`).Key}, keys(resp))
	assert.EqualValues(t, 2, p.stats.calls.Load()-calls, "the failed batch left nothing in the memo")

	_, err = canon(p, `{"mode":"no-such-mode"}`)
	require.ErrorIs(t, err, ErrPluginRefused, "an unknown mode is refused like bad input")
}

// TestHostileSlowFinishes: a plugin that burns CPU but finishes inside the
// limit answers normally and keeps its instance.
func TestHostileSlowFinishes(t *testing.T) {
	p := loadHostile(t, "hostile", Options{CallTimeout: time.Minute, MaxInstances: 1})
	const slow = `{"mode":"slow","in":"project","trust":true}`
	// Warm the instance up so the slow call is the busy loop alone.
	_, err := canon(p, goodSettings)
	require.NoError(t, err)
	created, discarded := p.stats.created.Load(), p.stats.discarded.Load()
	start := time.Now()
	proj, err := p.Project(context.Background(), projectReq(slow))
	elapsed := time.Since(start)
	require.NoError(t, err)
	if diff := cmp.Diff(wantProject(t, slow), proj); diff != "" {
		t.Errorf("projection of the slow call (-want +got):\n%s", diff)
	}
	t.Logf("the slow project call took %v", elapsed.Round(time.Millisecond))

	resp, err := canon(p, `{"mode":"slow","spin":1000}`)
	require.NoError(t, err)
	want := wantCanonical(t, `{}`)
	want.Key += " mode=slow"
	assert.Equal(t, want, resp.Results[0])
	assert.Equal(t, created, p.stats.created.Load(), "the slow calls kept their instance")
	assert.Equal(t, discarded, p.stats.discarded.Load())
}

// TestHostileSandbox: a plugin trying to read a file (one the test just
// wrote, /etc/passwd, /), the environment (a variable the test just set),
// the clock, randomness and the network gets nothing useful: errors for
// files and sockets, an empty environment, the fixed fake clock, and the
// fixed-seed random stream, the same for every fresh instance.
func TestHostileSandbox(t *testing.T) {
	const secret = "hostile-sandbox-secret-4b1d"
	path := filepath.Join(t.TempDir(), "secret.txt")
	require.NoError(t, os.WriteFile(path, []byte(secret), 0o644))
	t.Setenv("WASMHOST_HOSTILE_SECRET", secret)
	settings := fmt.Sprintf(`{"mode":"sandbox","probePath":%q,"probeEnv":"WASMHOST_HOSTILE_SECRET"}`, path)

	probeOnce := func(t *testing.T) (sandboxprobe.Observations, string) {
		p := loadHostile(t, "hostile", Options{CallTimeout: 20 * time.Second})
		resp, err := canon(p, settings)
		require.NoError(t, err)
		raw := string(resp.Results[0].Canonical)
		var o sandboxprobe.Observations
		dec := json.NewDecoder(strings.NewReader(raw))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&o), "observations: %s", raw)
		// The project export of the same settings answers normally.
		proj, err := p.Project(context.Background(), projectReq(settings))
		require.NoError(t, err)
		assert.Equal(t, wantProject(t, `{}`), proj)
		return o, raw
	}
	o, raw := probeOnce(t)
	t.Logf("observations: %s", raw)
	assert.NotContains(t, raw, secret, "the secret reached the plugin")

	assert.ElementsMatch(t, []string{"/etc/passwd", "/", "/proc/self/environ", path}, slices.Collect(maps.Keys(o.Files)))
	for f, got := range o.Files {
		assert.NotContains(t, got, "read ", "file %s was readable", f)
		assert.Contains(t, got, "open "+f, "file %s: an open error", f)
	}
	require.NotEmpty(t, o.Dirs)
	for d, got := range o.Dirs {
		assert.NotContains(t, got, "entries", "directory %s was listable", d)
	}

	assert.Empty(t, o.Environ, "os.Environ")
	assert.Equal(t, map[string]*string{"HOME": nil, "PATH": nil, "USER": nil, "WASMHOST_HOSTILE_SECRET": nil}, o.Getenv)
	assert.Empty(t, o.Args, "os.Args")

	require.Len(t, o.Times, 2)
	var times []time.Time
	for _, s := range o.Times {
		tm, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		assert.False(t, tm.Before(fakeEpoch), "time.Now %s is before the fake epoch", tm)
		assert.True(t, tm.Before(fakeEpoch.Add(time.Minute)), "time.Now %s is not the fake clock", tm)
		times = append(times, tm)
	}
	assert.False(t, times[1].Before(times[0]))
	assert.GreaterOrEqual(t, o.Elapsed, int64(0))
	assert.Less(t, o.Elapsed, int64(time.Second), "monotonic time between two readings")

	assert.Len(t, o.CryptoRand, 32, "crypto/rand gave 16 bytes: %s", o.CryptoRand)
	assert.Len(t, o.MathRand, 2)

	require.NotEmpty(t, o.Dial)
	for addr, got := range o.Dial {
		assert.NotContains(t, got, "connected", "%s reached the network", addr)
		assert.NotContains(t, got, "resolved", "%s resolved", addr)
	}

	// Another load, a fresh instance: byte for byte the same readings, so
	// neither the clock nor randomness carries anything from outside.
	_, again := probeOnce(t)
	assert.Equal(t, raw, again, "a fresh instance observed something else")
}

// TestNondeterministicKeysAreMemoized: a plugin whose keys change from call
// to call cannot make one settings object's key flap, because the host
// answers repeated settings from its memo; its nondeterminism shows only
// across distinct settings bytes (what conformance checks).
func TestNondeterministicKeysAreMemoized(t *testing.T) {
	p := loadHostile(t, "nondeterministic", Options{CallTimeout: 20 * time.Second})
	assert.Equal(t, "nondeterministic", p.Handshake().Name)
	first, err := canon(p, `{"trust":true}`)
	require.NoError(t, err)
	want := wantCanonical(t, `{"trust":true}`)
	require.True(t, strings.HasPrefix(first.Results[0].Key, want.Key+"#"), "key %q", first.Results[0].Key)
	calls := p.stats.calls.Load()
	for range 3 {
		again, err := canon(p, `{"trust":true}`)
		require.NoError(t, err)
		assert.Equal(t, first.Results, again.Results)
	}
	assert.Equal(t, calls, p.stats.calls.Load(), "repeated settings come from the memo")

	other, err := canon(p, `{ "trust": true }`)
	require.NoError(t, err)
	assert.NotEqual(t, first.Results[0].Key, other.Results[0].Key, "the plugin is nondeterministic across calls")
	assert.JSONEq(t, string(first.Results[0].Canonical), string(other.Results[0].Canonical))
}

// TestLoadRefusalsAreOneLine: every load refusal of issue 5's list (not
// wasm, digest differs from the pin, missing export, other ABI version,
// unknown imports), and the other refusals before a plugin runs, says why
// in one line naming the plugin, and wraps its sentinel. TestLoadRefusals
// and TestPin check the wording.
func TestLoadRefusalsAreOneLine(t *testing.T) {
	script := watWasm(t, "script")
	tests := []struct {
		name string
		wasm []byte
		opts Options
		want error
	}{
		{"not wasm", []byte("#!/bin/sh\necho hi\n"), Options{}, ErrNotWasm},
		{"component", []byte("\x00asm\x0d\x00\x01\x00"), Options{}, ErrNotWasm},
		{"digest differs from the pin", script, Options{PinSHA256: strings.Repeat("0", 64)}, ErrDigestMismatch},
		{"pin is not a digest", script, Options{PinSHA256: "sha256:abc\n"}, ErrDigestMismatch},
		{"missing export", watWasm(t, "missing-exports"), Options{}, ErrMissingExport},
		{"no exports", watWasm(t, "tiny"), Options{}, ErrMissingExport},
		{"other ABI version", watWasm(t, "abi2"), Options{}, ErrABIVersion},
		{"unknown import module", watWasm(t, "unknown-import"), Options{}, ErrUnknownImport},
		{"unknown kernel function", watWasm(t, "unknown-env-func"), Options{}, ErrUnknownImport},
		{"handshake refuses", watWasm(t, "hs-refuse"), Options{}, ErrHandshake},
		{"handshake not JSON", watWasm(t, "hs-not-json"), Options{}, ErrHandshake},
		{"handshake loops", watWasm(t, "hs-loop"), Options{CallTimeout: shortTimeout}, ErrPluginTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Load(context.Background(), "plugins/x.wasm", tt.wasm, tt.opts)
			require.ErrorIs(t, err, tt.want)
			assert.Nil(t, p)
			msg := err.Error()
			assert.NotContains(t, msg, "\n", "a one-line reason")
			assert.True(t, strings.HasPrefix(msg, `plugin "plugins/x.wasm": `), "names the plugin: %s", msg)
			assert.Contains(t, msg, tt.want.Error())

			if tt.opts == (Options{}) {
				insp, err := Inspect(context.Background(), "plugins/x.wasm", tt.wasm)
				require.NoError(t, err)
				assert.False(t, insp.Accepted)
				assert.Equal(t, msg, insp.Reason, "Inspect gives Load's reason")
				assert.ErrorIs(t, insp.Err, tt.want)
			}
		})
	}
}
