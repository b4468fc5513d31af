package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
)

func raws(ss ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(ss))
	for i, s := range ss {
		out[i] = json.RawMessage(s)
	}
	return out
}

// canon makes one canonicalize call with the given settings.
func canon(p *Plugin, settings ...string) (*abi.CanonicalizeResponse, error) {
	return p.Canonicalize(context.Background(), &abi.CanonicalizeRequest{Settings: raws(settings...)})
}

func TestCanonicalizeEcho(t *testing.T) {
	p := loadWat(t, "script", Options{})
	resp, err := canon(p, `{"key":"a"}`, `{"error":"no"}`, `{"canonical":{"x":[1,2]},"key":"k"}`)
	require.NoError(t, err)
	want := []abi.CanonicalResult{
		{Key: "a"},
		{Error: "no"},
		{Canonical: json.RawMessage(`{"x":[1,2]}`), Key: "k"},
	}
	if diff := cmp.Diff(want, resp.Results); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
}

func TestCanonicalizeBatchesAndMemo(t *testing.T) {
	p := loadWat(t, "script", Options{})
	n := 2*abi.MaxBatch + 5
	settings := make([]string, n)
	for i := range settings {
		settings[i] = fmt.Sprintf(`{"key":"s%d"}`, i)
	}
	calls := p.stats.calls.Load()
	resp, err := canon(p, settings...)
	require.NoError(t, err)
	require.Len(t, resp.Results, n)
	for i, r := range resp.Results {
		require.Equal(t, fmt.Sprintf("s%d", i), r.Key, "results[%d]", i)
	}
	assert.EqualValues(t, 3, p.stats.calls.Load()-calls, "calls for %d settings (MaxBatch %d)", n, abi.MaxBatch)

	// Known settings come from the memo, in any order, mixed with new ones.
	calls = p.stats.calls.Load()
	resp, err = canon(p, settings[n-1], `{"key":"new"}`, settings[0], settings[0])
	require.NoError(t, err)
	assert.Equal(t, []string{fmt.Sprintf("s%d", n-1), "new", "s0", "s0"}, keys(resp))
	assert.EqualValues(t, 1, p.stats.calls.Load()-calls)
}

func keys(resp *abi.CanonicalizeResponse) []string {
	var out []string
	for _, r := range resp.Results {
		out = append(out, r.Key)
	}
	return out
}

func TestCanonicalizeDuplicatesSentOnce(t *testing.T) {
	p := loadWat(t, "script", Options{})
	calls := p.stats.calls.Load()
	resp, err := canon(p, `{"key":"d"}`, `{"key":"e"}`, `{"key":"d"}`)
	require.NoError(t, err)
	assert.Equal(t, []string{"d", "e", "d"}, keys(resp))
	assert.EqualValues(t, 1, p.stats.calls.Load()-calls)
}

func TestCanonicalizeMemoIsBoundedAndCopied(t *testing.T) {
	p := loadWat(t, "script", Options{})
	p.memoLimit = 4
	_, err := canon(p, `{"key":"a"}`, `{"key":"b"}`, `{"key":"c"}`)
	require.NoError(t, err)
	assert.Len(t, p.memo, 3)
	_, err = canon(p, `{"key":"d"}`, `{"key":"e"}`)
	require.NoError(t, err)
	assert.Len(t, p.memo, 2, "the memo is cleared when it would grow past its bound")

	// Mutating a returned result does not change what the memo returns.
	resp, err := canon(p, `{"canonical":[1],"key":"m"}`)
	require.NoError(t, err)
	resp.Results[0].Canonical[1] = '9'
	resp, err = canon(p, `{"canonical":[1],"key":"m"}`)
	require.NoError(t, err)
	assert.JSONEq(t, `[1]`, string(resp.Results[0].Canonical))
}

func TestCanonicalizeFailuresNotMemoized(t *testing.T) {
	p := loadWat(t, "script", Options{})
	for range 2 {
		calls := p.stats.calls.Load()
		_, err := canon(p, `"R"`)
		require.ErrorIs(t, err, ErrPluginRefused)
		assert.EqualValues(t, 1, p.stats.calls.Load()-calls)
	}
}

func TestCanonicalizeRequestErrors(t *testing.T) {
	p := loadWat(t, "script", Options{})
	calls := p.stats.calls.Load()

	resp, err := canon(p)
	require.NoError(t, err)
	assert.Empty(t, resp.Results)

	_, err = canon(p, `{"key":"ok"}`, `{"key":`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "settings[1] is not valid JSON")

	_, err = p.Canonicalize(context.Background(), nil)
	require.Error(t, err)
	assert.EqualValues(t, 0, p.stats.calls.Load()-calls, "no call for an empty or invalid request")
}

func TestProjectEcho(t *testing.T) {
	p := loadWat(t, "script", Options{})
	resp, err := p.Project(context.Background(), &abi.ProjectRequest{
		Settings: json.RawMessage(`{"tools":[{"i":0,"trust":true,"alwaysLoad":false},{"i":2,"trust":false,"alwaysLoad":true}],"prompts":[1]}`),
		Tools:    []string{"a", "b", "c"},
		Prompts:  []string{"p", "q"},
	})
	require.NoError(t, err)
	want := &abi.ProjectResponse{
		Tools:     []abi.ToolDecision{{Index: 0, Trust: true}, {Index: 2, AlwaysLoad: true}},
		Prompts:   []int{1},
		Resources: []int{},
	}
	if diff := cmp.Diff(want, resp); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
}

func TestProjectBadOutput(t *testing.T) {
	p := loadWat(t, "script", Options{})
	tests := []struct{ name, out, msg string }{
		{"index out of range", `{"tools":[{"i":5,"trust":true,"alwaysLoad":false}],"prompts":[],"resources":[]}`, "index 5 out of range [0,1)"},
		{"negative index", `{"tools":[],"prompts":[-1],"resources":[]}`, "index -1 out of range"},
		{"not increasing", `{"tools":[],"prompts":[],"resources":[1,0]}`, "index 0 not after previous index 1"},
		{"unknown field", `{"tools":[],"extra":true}`, `unknown field "extra"`},
		{"wrong type", `{"tools":{"i":0}}`, "cannot unmarshal"},
		{"fractional index", `{"prompts":[0.5]}`, "cannot unmarshal"},
		{"decision without index", `{"tools":[{"trust":true}],"prompts":[],"resources":[]}`, `"i" is missing`},
		{"unknown decision field", `{"tools":[{"i":0,"hidden":true}],"prompts":[],"resources":[]}`, `unknown field "hidden"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			discarded := p.stats.discarded.Load()
			_, err := p.Project(context.Background(), &abi.ProjectRequest{
				Settings:  json.RawMessage(tt.out),
				Tools:     []string{"a"},
				Prompts:   []string{"p"},
				Resources: []string{"r1", "r2"},
			})
			require.ErrorIs(t, err, ErrBadOutput)
			assert.Contains(t, err.Error(), `plugin "script": project: `)
			assert.Contains(t, err.Error(), tt.msg)
			assert.EqualValues(t, 1, p.stats.discarded.Load()-discarded, "bad output discards the instance")
		})
	}
}

func TestProjectRequestChecks(t *testing.T) {
	p := loadWat(t, "script", Options{})
	_, err := p.Project(context.Background(), &abi.ProjectRequest{
		Settings: json.RawMessage(`{}`), Tools: []string{"a", "b"}, ToolAnnotations: raws(`{}`),
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "1 toolAnnotations for 2 tools")
	_, err = p.Project(context.Background(), nil)
	require.Error(t, err)
}

func TestProjectRefusal(t *testing.T) {
	p := loadWat(t, "script", Options{})
	discarded := p.stats.discarded.Load()
	_, err := p.Project(context.Background(), &abi.ProjectRequest{Settings: json.RawMessage(`"R"`)})
	require.ErrorIs(t, err, ErrPluginRefused)
	assert.EqualError(t, err, `plugin "script": project: plugin refused the input: refused by script`)
	assert.Equal(t, discarded, p.stats.discarded.Load(), "a refusal keeps the instance")
}

// TestMisbehaviour runs each misbehaviour of the script plugin through
// canonicalize, then checks the next call works on a healthy instance.
func TestMisbehaviour(t *testing.T) {
	tests := []struct {
		directive string
		want      error
		msg       string
		keeps     bool // the instance survives
	}{
		{"T", ErrPluginTrap, "unreachable", false},
		{"X", ErrPluginTrap, "exited with code 2", false},
		{"C", ErrPluginTrap, "exited with code 0", false},
		{"H", ErrPluginTrap, "is not allowed", false},
		{"Z", ErrBadOutput, "status 1 without an error message", false},
		{"E", ErrBadOutput, "status 0 with an error message: error with status 0", false},
		{"J", ErrBadOutput, "decoding output", false},
		{"B", ErrBadOutput, "16777217 bytes of output, limit 16777216", false},
		{"R", ErrPluginRefused, "refused by script", true},
		// A trap says what the guest said before it: the Extism error it
		// set, or what it wrote to stderr (for Go, where it panicked).
		{"A", ErrPluginTrap, `wasm error: unreachable (the plugin set the error "abort: index out of range at assembly/index.ts:3:5")`, false},
		{"W", ErrPluginTrap, `wasm error: unreachable (the plugin wrote "panic: boom" to stderr, raised at acme/policy.go:7)`, false},
	}
	p := loadWat(t, "script", Options{MaxInstances: 1})
	for _, tt := range tests {
		t.Run(tt.directive, func(t *testing.T) {
			created, discarded := p.stats.created.Load(), p.stats.discarded.Load()
			_, err := canon(p, `"`+tt.directive+`"`)
			require.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), `plugin "script": canonicalize: `)
			assert.Contains(t, err.Error(), tt.msg)

			resp, err := canon(p, `{"key":"after-`+tt.directive+`"}`)
			require.NoError(t, err, "the call after a failure")
			assert.Equal(t, []string{"after-" + tt.directive}, keys(resp))
			if tt.keeps {
				assert.Equal(t, created, p.stats.created.Load())
				assert.Equal(t, discarded, p.stats.discarded.Load())
			} else {
				assert.EqualValues(t, 1, p.stats.discarded.Load()-discarded, "failed instance discarded")
				assert.EqualValues(t, 1, p.stats.created.Load()-created, "next call on a fresh instance")
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	p := loadWat(t, "script", Options{CallTimeout: shortTimeout, MaxInstances: 1})
	start := time.Now()
	_, err := canon(p, `"L"`)
	elapsed := time.Since(start)
	require.ErrorIs(t, err, ErrPluginTimeout)
	assert.EqualError(t, err, `plugin "script": canonicalize: plugin call timed out (limit 200ms)`)
	assert.GreaterOrEqual(t, elapsed, shortTimeout)
	assert.Less(t, elapsed, shortTimeout+timeoutMargin)
	assert.EqualValues(t, 1, p.stats.discarded.Load())

	resp, err := canon(p, `{"key":"next"}`)
	require.NoError(t, err)
	assert.Equal(t, []string{"next"}, keys(resp))

	_, err = p.Project(context.Background(), &abi.ProjectRequest{Settings: json.RawMessage(`"L"`)})
	require.ErrorIs(t, err, ErrPluginTimeout)
}

func TestCallerContextIsNotATimeout(t *testing.T) {
	p := loadWat(t, "script", Options{CallTimeout: time.Minute, MaxInstances: 1})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err := p.Canonicalize(ctx, &abi.CanonicalizeRequest{Settings: raws(`"L"`)})
		require.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, ErrPluginTimeout)
		assert.Contains(t, err.Error(), `plugin "script": canonicalize: `)
	})
	t.Run("caller deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := p.Project(ctx, &abi.ProjectRequest{Settings: json.RawMessage(`"L"`)})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, ErrPluginTimeout)
	})
	t.Run("already cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		calls := p.stats.calls.Load()
		_, err := p.Canonicalize(ctx, &abi.CanonicalizeRequest{Settings: raws(`{"key":"x"}`)})
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, calls, p.stats.calls.Load())
	})
	resp, err := canon(p, `{"key":"still works"}`)
	require.NoError(t, err)
	assert.Equal(t, []string{"still works"}, keys(resp))
}

func TestWaitingForAnInstanceHonoursContext(t *testing.T) {
	p := loadWat(t, "script", Options{CallTimeout: 500 * time.Millisecond, MaxInstances: 1})
	started := make(chan struct{})
	done := make(chan error)
	go func() {
		close(started)
		_, err := canon(p, `"L"`)
		done <- err
	}()
	<-started
	require.Eventually(t, func() bool { return len(p.slots) == 1 }, 5*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := p.Canonicalize(ctx, &abi.CanonicalizeRequest{Settings: raws(`{"key":"w"}`)})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "waiting for a free instance")
	require.ErrorIs(t, <-done, ErrPluginTimeout)
}

// probe is what the script plugin's "P" directive reads from the sandbox.
type probe struct {
	walltime, nanotime  uint64
	random              []byte
	envCount, envSize   uint32
	argsCount, argsSize uint32
}

func runProbe(t *testing.T, p *Plugin, settings string) probe {
	t.Helper()
	resp, err := canon(p, settings)
	require.NoError(t, err)
	b, err := hex.DecodeString(resp.Results[0].Key)
	require.NoError(t, err)
	require.Len(t, b, 48)
	le := binary.LittleEndian
	return probe{
		walltime: le.Uint64(b[0:]), nanotime: le.Uint64(b[8:]), random: b[16:32],
		envCount: le.Uint32(b[32:]), envSize: le.Uint32(b[36:]),
		argsCount: le.Uint32(b[40:]), argsSize: le.Uint32(b[44:]),
	}
}

func TestSandbox(t *testing.T) {
	p := loadWat(t, "script", Options{MaxInstances: 1})
	first := runProbe(t, p, `"P1"`)
	assert.EqualValues(t, fakeEpoch.UnixNano(), first.walltime, "walltime starts at the fixed epoch")
	assert.EqualValues(t, 0, first.nanotime, "monotonic clock starts at 0")
	assert.Zero(t, first.envCount, "no environment variables")
	assert.Zero(t, first.envSize)
	assert.Zero(t, first.argsCount, "no arguments")
	assert.Zero(t, first.argsSize)
	want := make([]byte, 16)
	_, _ = rand.NewChaCha8(randSeed).Read(want)
	assert.Equal(t, want, first.random, "random bytes are the fixed-seed stream")

	// The same instance reads on: the clocks advance one step per reading.
	second := runProbe(t, p, `"P2"`)
	assert.EqualValues(t, fakeEpoch.Add(clockStep).UnixNano(), second.walltime)
	assert.EqualValues(t, clockStep.Nanoseconds(), second.nanotime)
	assert.NotEqual(t, first.random, second.random)

	// A fresh instance of another load starts over: same readings.
	other := loadWat(t, "script", Options{})
	assert.Equal(t, first, runProbe(t, other, `"P1"`))
}

func TestMemoryLimit(t *testing.T) {
	p := loadWat(t, "script", Options{MemoryLimitBytes: 4 << 20})
	resp, err := canon(p, `"M"`)
	require.NoError(t, err)
	b, err := hex.DecodeString(resp.Results[0].Key)
	require.NoError(t, err)
	assert.EqualValues(t, 64, binary.LittleEndian.Uint32(b), "pages reached with a 4 MiB cap")
}

func TestHammer(t *testing.T) {
	const maxInstances = 3
	p := loadWat(t, "script", Options{MaxInstances: maxInstances, CallTimeout: 10 * time.Second})
	hammer(t, p, func(t *testing.T, g, i int) {
		switch i % 10 {
		case 3: // a trap now and then replaces an instance under load
			_, err := canon(p, `"T"`)
			assert.ErrorIs(t, err, ErrPluginTrap)
		case 5:
			_, err := p.Project(context.Background(), &abi.ProjectRequest{Settings: json.RawMessage(`"R"`)})
			assert.ErrorIs(t, err, ErrPluginRefused)
		case 7:
			resp, err := p.Project(context.Background(), &abi.ProjectRequest{
				Settings: json.RawMessage(fmt.Sprintf(`{"prompts":[%d]}`, g%3)),
				Prompts:  []string{"a", "b", "c"},
			})
			if assert.NoError(t, err) {
				assert.Equal(t, []int{g % 3}, resp.Prompts)
			}
		default:
			k1, k2 := fmt.Sprintf("g%d-i%d", g, i), fmt.Sprintf("shared-%d", i%4)
			resp, err := canon(p, `{"key":"`+k1+`"}`, `{"key":"`+k2+`"}`)
			if assert.NoError(t, err) {
				assert.Equal(t, []string{k1, k2}, keys(resp))
			}
		}
	})
	assert.LessOrEqual(t, p.stats.peak.Load(), int64(maxInstances), "instances alive at once")
	assert.Positive(t, p.stats.discarded.Load())
}

// hammer runs fn from many goroutines at once.
func hammer(t *testing.T, p *Plugin, fn func(t *testing.T, g, i int)) {
	const goroutines, iterations = 12, 40
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range iterations {
				fn(t, g, i)
			}
		}()
	}
	wg.Wait()
}

func TestClose(t *testing.T) {
	ctx := context.Background()
	t.Run("calls after close", func(t *testing.T) {
		p, err := Load(ctx, "script", watWasm(t, "script"), Options{})
		require.NoError(t, err)
		_, err = canon(p, `{"key":"cached"}`)
		require.NoError(t, err)
		require.NoError(t, p.Close(ctx))
		require.NoError(t, p.Close(ctx), "closing twice")
		_, err = canon(p, `{"key":"cached"}`)
		require.ErrorIs(t, err, ErrClosed)
		assert.Contains(t, err.Error(), `plugin "script": canonicalize: `)
		_, err = p.Project(ctx, &abi.ProjectRequest{Settings: json.RawMessage(`{}`)})
		require.ErrorIs(t, err, ErrClosed)
		assert.Zero(t, p.stats.live.Load(), "every instance closed")
	})
	t.Run("waits for calls in flight", func(t *testing.T) {
		p, err := Load(ctx, "script", watWasm(t, "script"), Options{CallTimeout: shortTimeout})
		require.NoError(t, err)
		done := make(chan error)
		go func() {
			_, err := canon(p, `"L"`)
			done <- err
		}()
		require.Eventually(t, func() bool { return len(p.slots) == 1 }, 5*time.Second, time.Millisecond)
		require.NoError(t, p.Close(ctx))
		// The call gives its slot back before Close may return.
		assert.Empty(t, p.slots, "Close returned before the call in flight ended")
		require.ErrorIs(t, <-done, ErrPluginTimeout, "the call ran to its own end")
	})
	t.Run("terminates calls when its context ends", func(t *testing.T) {
		p, err := Load(ctx, "script", watWasm(t, "script"), Options{CallTimeout: time.Minute})
		require.NoError(t, err)
		closeTerminates(t, p)
	})
}

// closeTerminates starts a runaway call on p (the script plugin), closes p
// with a context that ends first, and checks that the call is terminated
// with ErrClosed.
func closeTerminates(t *testing.T, p *Plugin) {
	t.Helper()
	ctx := context.Background()
	done := make(chan error)
	go func() {
		_, err := p.Project(ctx, &abi.ProjectRequest{Settings: json.RawMessage(`"L"`)})
		done <- err
	}()
	require.Eventually(t, func() bool { return len(p.slots) == 1 }, 5*time.Second, time.Millisecond)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, p.Close(cctx), context.DeadlineExceeded)
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrClosed)
	case <-time.After(timeoutMargin):
		t.Fatal("the call in flight was not terminated")
	}
}

func TestLogs(t *testing.T) {
	var h recordHandler
	p := loadWat(t, "script", Options{Logger: slogNew(&h)})
	resp, err := canon(p, `"G"`)
	require.NoError(t, err)
	assert.Equal(t, []string{"c"}, keys(resp))
	_, err = canon(p, `"T"`)
	require.ErrorIs(t, err, ErrPluginTrap)
	assert.NotContains(t, err.Error(), "stderr", "what an earlier call wrote does not explain this trap")
	msgs := h.messages()
	assert.Contains(t, msgs, "INFO plugin loaded")
	assert.Contains(t, msgs, "DEBUG plugin instance created")
	assert.Contains(t, msgs, "INFO plugin instance discarded")
	assert.Contains(t, msgs, "DEBUG plugin log", "the plugin's log calls reach the logger at debug level")
	assert.Contains(t, h.attr("message"), "hello from script")
	assert.Contains(t, msgs, "DEBUG plugin output")
	assert.Contains(t, h.attr("line"), "written to stderr")
}

// TestTrapReason: the guest's own account of a trap, kept to one line.
func TestTrapReason(t *testing.T) {
	goOOM := "runtime: out of memory: cannot allocate 1048576-byte block (66584576 in use)\n" +
		"fatal error: out of memory\n\ngoroutine 1 gp=0x1 m=0 mp=0x2 [running]:\n" +
		"runtime.throw({0x1, 0x2})\n\truntime/panic.go:1094 +0x5\n" +
		"runtime.(*mcache).allocLarge(0x1, 0x100000, 0x1)\n\truntime/mcache.go:234 +0x9\n" +
		"panic({0x3, 0x4})\n\truntime/panic.go:707 +0x2\n" +
		"main.grow(...)\n\texample.com/acme/policy.go:42\n" +
		"main.project()\n\texample.com/acme/exports.go:12 +0x18\n"
	for _, tt := range []struct {
		name, msg, stderr, want string
	}{
		{name: "nothing said"},
		{name: "blank stderr", stderr: "\n \r\n"},
		{name: "error message first", msg: "abort: boom", stderr: "panic: other\n", want: `the plugin set the error "abort: boom"`},
		{name: "multi-line message quoted", msg: "a\nb", want: `the plugin set the error "a\nb"`},
		{name: "first line", stderr: "\nsomething odd\nmore\n", want: `the plugin wrote "something odd" to stderr`},
		{name: "Go fatal error, first frame outside the runtime", stderr: goOOM,
			want: `the plugin wrote "fatal error: out of memory" to stderr, raised at example.com/acme/policy.go:42`},
		{name: "Go command called before _start", stderr: "runtime: wasmexport function called before runtime initialization\n\tcall _start first\n",
			want: `the plugin wrote "runtime: wasmexport function called before runtime initialization" to stderr`},
		{name: "long line cut", stderr: "panic: " + strings.Repeat("x", 1000),
			want: `the plugin wrote "panic: ` + strings.Repeat("x", maxTrapReason-len("panic: ")) + `" to stderr`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := trapReason(tt.msg, []byte(tt.stderr))
			assert.Equal(t, tt.want, got)
			assert.NotContains(t, got, "\n", "one line")
		})
	}
}

// TestCallStderr: an instance keeps the first maxCallStderr bytes a call
// writes to stderr, passes everything on, and forgets it all at reset.
func TestCallStderr(t *testing.T) {
	var next bytes.Buffer
	w := &callStderr{next: &next}
	big := strings.Repeat("y", maxCallStderr)
	for _, s := range []string{"panic: a\n", big} {
		n, err := w.Write([]byte(s))
		require.NoError(t, err)
		assert.Equal(t, len(s), n)
	}
	assert.Len(t, w.buf, maxCallStderr)
	assert.True(t, strings.HasPrefix(string(w.buf), "panic: a\ny"))
	assert.Equal(t, "panic: a\n"+big, next.String())
	w.reset()
	assert.Empty(t, w.buf)
}

func TestLineLogger(t *testing.T) {
	var h recordHandler
	w := &lineLogger{log: slogNew(&h), plugin: "p", stream: "stderr"}
	_, _ = w.Write([]byte("panic: "))
	_, _ = w.Write([]byte("boom\ngoroutine 1\n"))
	_, _ = w.Write([]byte(strings.Repeat("x", maxLogLine+10)))
	assert.Equal(t, []string{"panic: boom", "goroutine 1", strings.Repeat("x", maxLogLine)}, h.attr("line"))
}

// TestRunawayStoppedBothWays checks that a runaway call stops at its
// timeout, and when Close's context ends, both when the module is metered
// (the default) and when wazero's termination checks do it (noMeter, the
// fallback for modules the rewriter does not support).
func TestRunawayStoppedBothWays(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []struct {
		name    string
		noMeter bool
	}{{"metered", false}, {"checks", true}} {
		t.Run(mode.name, func(t *testing.T) {
			insp, err := inspect(ctx, "script", watWasm(t, "script"), Options{noMeter: mode.noMeter}, nil)
			require.NoError(t, err)
			assert.Equal(t, !mode.noMeter, insp.Metered)

			p := loadWat(t, "script", Options{CallTimeout: shortTimeout, noMeter: mode.noMeter})
			start := time.Now()
			_, err = canon(p, `"L"`)
			require.ErrorIs(t, err, ErrPluginTimeout)
			assert.Less(t, time.Since(start), shortTimeout+timeoutMargin)
			_, err = canon(p, `{"key":"after"}`)
			require.NoError(t, err, "the plugin answers after a timeout")

			q, err := Load(ctx, "script", watWasm(t, "script"), Options{CallTimeout: time.Minute, noMeter: mode.noMeter})
			require.NoError(t, err)
			closeTerminates(t, q)
		})
	}
}

// TestCloseDuringNewInstance: a call still creating its instance when
// Close gives up waiting and closes the runtime gets ErrClosed, as a call
// that Close terminated while it ran does, not the runtime's own error.
func TestCloseDuringNewInstance(t *testing.T) {
	opts := Options{MaxInstances: 1, CacheDir: testCacheDir, CallTimeout: time.Minute}
	for i := range 3 {
		p, err := loadEmbeddedDefault(context.Background(), opts)
		require.NoError(t, err)
		inst := <-p.idle // empty the pool: the next call creates an instance
		p.closeInstance(inst)
		done := make(chan error, 1)
		go func() {
			_, err := p.Project(context.Background(), projectReq(`{"trust":true}`))
			done <- err
		}()
		// The call holds its slot while it creates the instance; on a
		// loaded machine it may also have finished before a look sees it.
		require.Eventually(t, func() bool { return len(p.slots) == 1 || len(done) == 1 }, 5*time.Second, 100*time.Microsecond)
		// Close comes 0, 1 or 2 ms into the instance's creation: the
		// moment varies, nothing is waited for.
		time.Sleep(time.Duration(i) * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_ = p.Close(ctx)
		cancel()
		err = <-done
		assert.True(t, err == nil || errors.Is(err, ErrClosed), "want ErrClosed (or an answer), got %v", err)
	}
}
