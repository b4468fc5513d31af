// Package host runs wasmhost policy plugins: WebAssembly modules speaking
// ABI v1 (package abi, abi/SPEC.md) through Extism, in a sandbox without
// filesystem, environment, network or real clock.
//
// Load checks a module before it runs anything else: the SHA-256 pin, the
// wasm header, the WebAssembly features and module limits of abi/SPEC.md
// section 6.3 (wasmbin.go, meter.go), compilation, imports (only the Extism kernel and WASI) and
// exports (handshake, canonicalize, project, and the types of the optional
// project_batch and direct exports), then calls handshake and refuses other
// ABI versions. A loaded Plugin keeps a bounded pool of instances; each call
// runs on one instance under a memory cap and a timeout, and an instance that
// timed out, trapped or produced bad output is discarded. *Plugin implements
// abi.Policy and abi.BatchProjector.
//
// Two things keep calls cheap. The module is metered (meter.go, package
// internal/wasmmeter) so that the timeout needs no exit to Go at every loop
// turn; and a plugin with direct exports (direct.go) exchanges requests and
// answers through its own memory instead of the Extism kernel.
package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/jsonvalid"
)

// memoEntries bounds the canonicalize memo of one Plugin; the memo is
// cleared when it would grow past it.
const memoEntries = 65536

// maxRefusalText caps the plugin error message quoted in an error.
const maxRefusalText = 1 << 10

// closeKillWait bounds how long Close waits, once it has terminated the
// calls still running, for them to return. A terminated call ends at its
// next meter check, within microseconds of guest work; the bound only
// keeps Close from hanging on a host bug.
const closeKillWait = 5 * time.Second

// A Plugin is one loaded policy plugin build: its compiled module and a pool
// of instances. It is safe for concurrent use; calls beyond MaxInstances
// wait for a free instance.
type Plugin struct {
	name      string
	digest    string
	handshake abi.Handshake
	cfg       settings
	log       *slog.Logger
	compiled  *extism.CompiledPlugin
	cache     wazero.CompilationCache
	memoLimit int
	// killCtx is cancelled when Close terminates the calls still running;
	// each call's context ends with it, which stops a metered plugin.
	killCtx context.Context
	kill    context.CancelFunc
	// batch is set when the module exports project_batch.
	batch bool
	// direct lists the exports the host calls in their direct form
	// (abi.DirectSuffix), empty without wasmhost_alloc or with
	// Options.NoDirect.
	direct []string

	// slots holds one token per instance in use (capacity MaxInstances).
	slots chan struct{}
	// idle holds healthy instances between calls.
	idle chan *instance
	// done is closed when Close starts.
	done chan struct{}
	// inflight counts acquired instances; Add happens under mu while open.
	inflight sync.WaitGroup
	nextID   atomic.Uint64
	stats    stats

	mu     sync.Mutex
	closed bool
	memo   map[string]abi.CanonicalResult
}

// stats count pool events (read by tests and logs).
type stats struct {
	calls, created, discarded atomic.Int64
	// direct counts the calls made in direct form.
	direct atomic.Int64
	// live is the number of instances not yet closed; peak its maximum.
	live, peak atomic.Int64
}

// An instance is one Extism plugin instance, used by one call at a time.
type instance struct {
	id  uint64
	ext *extism.Plugin
	// direct is nil when the plugin has no direct exports.
	direct *directCalls
	// exited is set when wazero closes one of the instance's modules: a
	// WASI proc_exit, a context-done termination or Close.
	exited   atomic.Bool
	exitCode atomic.Uint32
	// stderr keeps what the guest writes to standard error during a call.
	stderr *callStderr
}

// Name returns where the plugin came from: the file path, the name passed
// to Load, or "embedded:policy-default".
func (p *Plugin) Name() string { return p.name }

// Digest returns the hex SHA-256 of the wasm bytes.
func (p *Plugin) Digest() string { return p.digest }

// Handshake returns what the plugin reported about itself at load.
func (p *Plugin) Handshake() abi.Handshake {
	h := p.handshake
	h.Wants = append([]string(nil), h.Wants...)
	return h
}

var _ abi.Policy = (*Plugin)(nil)

// Canonicalize asks the plugin for the canonical form and key of each
// settings object. Results already known for the same settings bytes come
// from the memo; the rest go to the plugin in calls of at most abi.MaxBatch
// settings, each response checked with abi.ValidateCanonicalize. An empty
// settings object (nil) is sent as null.
func (p *Plugin) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	const export = abi.ExportCanonicalize
	if req == nil {
		return nil, p.errorf(export, "nil request")
	}
	results := make([]abi.CanonicalResult, len(req.Settings))
	var (
		pending []json.RawMessage // distinct settings the memo lacks, in first-seen order
		keys    []string          // their bytes as strings, the memo's keys
		first   []int             // the position of each in req.Settings
		index   map[string]int    // pending index by bytes
		repeats map[int][]int     // later positions of a pending object, rare
	)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, p.errorf(export, "%w", ErrClosed)
	}
	for i, s := range req.Settings {
		if len(s) == 0 {
			s = json.RawMessage("null")
		}
		if r, ok := p.memo[string(s)]; ok {
			results[i] = cloneResult(r)
			continue
		}
		if j, seen := index[string(s)]; seen {
			if repeats == nil {
				repeats = map[int][]int{}
			}
			repeats[j] = append(repeats[j], i)
			continue
		}
		if index == nil {
			index = map[string]int{}
		}
		k := string(s)
		index[k] = len(pending)
		pending, keys, first = append(pending, s), append(keys, k), append(first, i)
	}
	p.mu.Unlock()
	for j, s := range pending {
		if !jsonvalid.Bytes(s) {
			return nil, p.errorf(export, "settings[%d] is not valid JSON", first[j])
		}
	}
	for start := 0; start < len(pending); start += abi.MaxBatch {
		end := min(start+abi.MaxBatch, len(pending))
		batch := pending[start:end]
		got, err := p.canonicalizeBatch(ctx, batch)
		if err != nil {
			if len(pending) > abi.MaxBatch {
				return nil, p.errorf(export, "batch of %d settings from #%d: %w", len(batch), start, err)
			}
			return nil, p.errorf(export, "%w", err)
		}
		p.remember(keys[start:end], got)
		for j := range batch {
			results[first[start+j]] = cloneResult(got[j])
			for _, i := range repeats[start+j] {
				results[i] = cloneResult(got[j])
			}
		}
	}
	return &abi.CanonicalizeResponse{Results: results}, nil
}

// canonicalizeBatch makes one canonicalize call.
func (p *Plugin) canonicalizeBatch(ctx context.Context, batch []json.RawMessage) ([]abi.CanonicalResult, error) {
	req := &abi.CanonicalizeRequest{Settings: batch}
	// The request as json.Marshal writes it but for white space, without
	// its second validating pass: Canonicalize checked each settings
	// object with jsonvalid.
	n := len(`{"settings":[]}`) + len(batch)
	for _, s := range batch {
		n += len(s)
	}
	in := append(make([]byte, 0, n), `{"settings":[`...)
	for i, s := range batch {
		if i > 0 {
			in = append(in, ',')
		}
		in = append(in, s...)
	}
	in = append(in, "]}"...)
	var resp *abi.CanonicalizeResponse
	err := p.call(ctx, abi.ExportCanonicalize, in, func(out []byte) (err error) {
		resp, err = decodeChecked(req, out, decodeCanonicalizeCompact, abi.ValidateCanonicalize)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.Results, nil
}

// remember stores one call's results in the memo, under the settings bytes
// of each as a string.
func (p *Plugin) remember(keys []string, results []abi.CanonicalResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if len(p.memo)+len(keys) > p.memoLimit {
		clear(p.memo)
	}
	for j, k := range keys {
		if len(p.memo) >= p.memoLimit {
			return
		}
		p.memo[k] = results[j]
	}
}

func cloneResult(r abi.CanonicalResult) abi.CanonicalResult {
	r.Canonical = bytes.Clone(r.Canonical)
	return r
}

// Project asks the plugin what one session sees of a snapshot. The response
// is checked with abi.ValidateProjectWith, renames allowed when the
// handshake opted into them; its lists are never nil. An empty
// settings object (nil) is sent as null. A refusal of the settings is
// ErrPluginRefused (which wraps abi.ErrRefused).
func (p *Plugin) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	const export = abi.ExportProject
	if req == nil {
		return nil, p.errorf(export, "nil request")
	}
	resp, err := p.project(ctx, req)
	if err != nil {
		return nil, p.errorf(export, "%w", err)
	}
	return resp, nil
}

// project makes one project call. The error names neither the plugin nor
// the export.
func (p *Plugin) project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	if n := len(req.ToolAnnotations); n != 0 && n != len(req.Tools) {
		return nil, fmt.Errorf("request has %d toolAnnotations for %d tools", n, len(req.Tools))
	}
	wire := *req
	if len(wire.Settings) == 0 {
		wire.Settings = json.RawMessage("null")
	}
	wire.Tools = nonNil(wire.Tools)
	wire.Prompts = nonNil(wire.Prompts)
	wire.Resources = nonNil(wire.Resources)
	in, err := json.Marshal(&wire)
	if err != nil {
		return nil, fmt.Errorf("encoding the request: %w", err)
	}
	var resp *abi.ProjectResponse
	err = p.call(ctx, abi.ExportProject, in, func(out []byte) (err error) {
		resp, err = decodeChecked(req, out, decodeProjectCompact, p.validateProject)
		return err
	})
	if err != nil {
		return nil, err
	}
	return nonNilResponse(resp), nil
}

// validateProject is abi.ValidateProjectWith, renames allowed when the
// plugin's handshake opted into them.
func (p *Plugin) validateProject(req *abi.ProjectRequest, resp *abi.ProjectResponse) error {
	return abi.ValidateProjectWith(req, resp, p.handshake.Renames)
}

// validateProjectBatch is abi.ValidateProjectBatchWith, renames allowed
// when the plugin's handshake opted into them.
func (p *Plugin) validateProjectBatch(req *abi.ProjectBatchRequest, resp *abi.ProjectBatchResponse) error {
	return abi.ValidateProjectBatchWith(req, resp, p.handshake.Renames)
}

// decodeChecked decodes the output of a call for req, with compact (one of
// the decoders of batchdecode.go, which gives what decodeStrict gives for
// the form it takes) or else with decodeStrict, and checks the response
// with validate (abi.ValidateCanonicalize, or validateProject and
// validateProjectBatch).
func decodeChecked[Req, Resp any](req *Req, out []byte, compact func([]byte) (*Resp, bool), validate func(*Req, *Resp) error) (*Resp, error) {
	resp, ok := compact(out)
	if !ok {
		resp = new(Resp)
		if err := decodeStrict(out, resp); err != nil {
			return nil, err
		}
	}
	if err := validate(req, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// nonNilResponse returns r, or an empty response when r is nil, with every
// nil list replaced by an empty one.
func nonNilResponse(r *abi.ProjectResponse) *abi.ProjectResponse {
	if r == nil {
		r = &abi.ProjectResponse{}
	}
	r.Tools = nonNil(r.Tools)
	r.Prompts = nonNil(r.Prompts)
	r.Resources = nonNil(r.Resources)
	return r
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// decodeStrict decodes out, which must be exactly one JSON object with no
// fields v lacks, into v.
func decodeStrict(out []byte, v any) error {
	trimmed := bytes.TrimLeft(out, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return fmt.Errorf("output is not a JSON object: %s", quoteOutput(out))
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding output: %w (the output: %s)", err, quoteOutput(out))
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("decoding output: data after the JSON object")
	}
	return nil
}

// quoteOutput quotes the start of a plugin's output for an error message.
func quoteOutput(out []byte) string {
	const max = 64
	if len(out) > max {
		return fmt.Sprintf("%q... (%d bytes)", out[:max], len(out))
	}
	return fmt.Sprintf("%q", out)
}

// call runs export with input on a pooled instance and, on success, hands
// the output to decode. A decode error is reported as ErrBadOutput. The
// returned error does not name the plugin or export; callers add both.
func (p *Plugin) call(ctx context.Context, export string, input []byte, decode func([]byte) error) error {
	inst, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	out, healthy, err := p.invoke(ctx, inst, export, input)
	if err == nil {
		if derr := decode(out); derr != nil {
			healthy, err = false, fmt.Errorf("%w: %w", ErrBadOutput, derr)
		}
	}
	p.release(inst, healthy, export, err)
	return err
}

// padInput pads a request (a JSON object) with white space before its
// closing brace, which changes nothing in its meaning, up to a multiple of
// eight bytes. Guests read their input through the Extism kernel eight
// bytes at a time and the last len%8 bytes one at a time (go-pdk does), and
// with extism go-sdk v1.7.1 each single-byte read is a call into the kernel
// module that costs a fresh wazero call engine (a 10 KiB stack) and, under
// CloseOnContextDone, a goroutine: up to seven of them per call, saved.
func padInput(input []byte) []byte {
	n := len(input)
	if n%8 == 0 || input[n-1] != '}' {
		return input
	}
	pad := 8 - n%8
	input = append(input, "        "[:pad]...)
	copy(input[n-1:], "        "[:pad])
	input[len(input)-1] = '}'
	return input
}

// acquire takes a free slot, then an idle instance or a new one.
func (p *Plugin) acquire(ctx context.Context) (*instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a free instance: %w", ctx.Err())
	case <-p.done:
		return nil, ErrClosed
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.slots
		return nil, ErrClosed
	}
	p.inflight.Add(1)
	p.mu.Unlock()
	select {
	case inst := <-p.idle:
		return inst, nil
	default:
	}
	inst, err := p.newInstance(ctx)
	if err != nil {
		<-p.slots
		p.inflight.Done()
		switch {
		case p.killCtx.Err() != nil:
			// Close terminated the call while it made its instance, as it
			// terminates one that is running.
			return nil, ErrClosed
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("creating an instance: %w", err)
	}
	return inst, nil
}

// release returns a healthy instance to the pool and closes any other.
func (p *Plugin) release(inst *instance, healthy bool, export string, cause error) {
	switch {
	case !healthy:
		p.discard(inst, export, cause)
	case p.isClosed():
		p.closeInstance(inst)
	default:
		select {
		case p.idle <- inst:
		default: // cannot happen: idle has room for every slot
			p.discard(inst, export, errors.New("pool full"))
		}
	}
	<-p.slots
	p.inflight.Done()
}

// discard closes an instance that must not serve another call. It logs at
// info level: the failed call's error reaches its caller, which reports it
// (a view failing closed, a conformance case failing), so a warning here
// would say it twice.
func (p *Plugin) discard(inst *instance, export string, cause error) {
	p.stats.discarded.Add(1)
	p.log.LogAttrs(context.Background(), slog.LevelInfo, "plugin instance discarded",
		slog.String("plugin", p.name), slog.Uint64("instance", inst.id),
		slog.String("export", export), slog.Any("cause", cause))
	p.closeInstance(inst)
}

func (p *Plugin) closeInstance(inst *instance) {
	p.stats.live.Add(-1)
	_ = inst.ext.Close(context.Background())
}

// newInstance creates an instance in the sandbox.
func (p *Plugin) newInstance(ctx context.Context) (*instance, error) {
	if wasiOutputSet() {
		return nil, errWASIOutput
	}
	// Close terminates an instance being made as it terminates a call: the
	// guest's start-up (its start function) is metered and stops at its
	// next check, and it has the call timeout to run in.
	outer := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.killCtx, cancel)()
	startCtx, cancelStart := context.WithTimeout(ctx, p.cfg.timeout)
	defer cancelStart()
	inst := &instance{id: p.nextID.Add(1)}
	var stdout, stderr io.Writer = io.Discard, io.Discard
	if p.log.Enabled(ctx, slog.LevelDebug) {
		stdout = &lineLogger{log: p.log, plugin: p.name, stream: "stdout"}
		stderr = &lineLogger{log: p.log, plugin: p.name, stream: "stderr"}
	}
	// The close notifier is wazero's only signal that a module exited
	// (proc_exit) during a call that extism then reports as a success.
	ictx := experimental.WithCloseNotifier(startCtx, experimental.CloseNotifyFunc(func(_ context.Context, code uint32) {
		inst.exitCode.Store(code)
		inst.exited.Store(true)
	}))
	if p.killCtx.Err() != nil { // Close gave up on the calls: no new instance to start
		return nil, ErrClosed
	}
	inst.stderr = &callStderr{next: stderr}
	// extism runs the host functions it wraps (the meter's tick) only with
	// its plugin in the context, which a start function, run while the
	// instance is made, lacks; the tick does not use it. The stand-in is
	// the instance's own: Extism's own host functions, which a start
	// function may call too, write to it before they fail.
	ictx = context.WithValue(ictx, extism.PluginCtxKey("plugin"), new(extism.Plugin))
	ext, err := p.compiled.Instance(ictx, extism.PluginInstanceConfig{ModuleConfig: sandboxConfig(stdout, inst.stderr)})
	if err != nil {
		switch {
		case outer.Err() != nil:
			return nil, outer.Err()
		case p.killCtx.Err() != nil:
			return nil, ErrClosed
		case startCtx.Err() != nil:
			return nil, fmt.Errorf("start function: %w (limit %s)", ErrPluginTimeout, p.cfg.timeout)
		}
		// wazero appends a wasm stack trace: one line for the operator,
		// the rest to the debug log.
		p.log.Debug("plugin instance failed to start", "plugin", p.name, "detail", err.Error())
		return nil, fmt.Errorf("%w: %s%s", ErrPluginTrap, firstLine(err.Error()), inst.trapReason(""))
	}
	ext.SetLogger(func(level extism.LogLevel, msg string) {
		p.log.LogAttrs(context.Background(), slog.LevelDebug, "plugin log",
			slog.String("plugin", p.name), slog.String("level", level.String()), slog.String("message", msg))
	})
	inst.ext = ext
	if len(p.direct) > 0 {
		if err := p.prepareDirect(ctx, inst); err != nil {
			_ = ext.Close(context.Background())
			return nil, err
		}
	} else if p.cfg.hsInput != nil && p.handshake.Name != "" {
		// Every instance but the load's (whose handshake Load makes) gets
		// the plugin's configuration the same way.
		if err := p.configure(ctx, inst); err != nil {
			_ = ext.Close(context.Background())
			return nil, err
		}
	}
	p.stats.created.Add(1)
	live := p.stats.live.Add(1)
	for peak := p.stats.peak.Load(); live > peak && !p.stats.peak.CompareAndSwap(peak, live); peak = p.stats.peak.Load() {
	}
	p.log.LogAttrs(ctx, slog.LevelDebug, "plugin instance created",
		slog.String("plugin", p.name), slog.Uint64("instance", inst.id))
	return inst, nil
}

// prepareDirect resolves inst's direct exports and initializes the guest
// runtime. Extism initializes it (a reactor's _initialize) on the first
// call made through Extism and remembers that it did; a direct call first
// would run the guest uninitialized, and initializing it by hand would have
// Extism do it a second time later. So the instance first answers one
// handshake through Extism. When the modules cannot be reached (see
// extismModules) the instance makes every call through Extism.
func (p *Plugin) prepareDirect(ctx context.Context, inst *instance) error {
	d, err := newDirectCalls(inst.ext, p.direct)
	if err != nil {
		p.log.LogAttrs(ctx, slog.LevelWarn, "plugin direct calls disabled",
			slog.String("plugin", p.name), slog.Any("cause", err))
		return nil
	}
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.timeout)
	defer cancel()
	if _, _, err := inst.callSafe(callCtx, abi.ExportHandshake, p.cfg.hsInput); err != nil {
		return fmt.Errorf("initializing the guest for direct calls: %w%s", err, inst.trapReason(""))
	}
	inst.direct = d
	return nil
}

// configure hands a new instance the plugin's configuration through a
// handshake, as Load handed it to the first (abi/SPEC.md section 3).
func (p *Plugin) configure(ctx context.Context, inst *instance) error {
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.timeout)
	defer cancel()
	rc, _, err := inst.callSafe(callCtx, abi.ExportHandshake, p.cfg.hsInput)
	if err != nil {
		return fmt.Errorf("handing the instance its configuration: %w%s", err, inst.trapReason(""))
	}
	if rc != 0 {
		return fmt.Errorf("handing the instance its configuration: the handshake refused: %s", inst.errorMessage())
	}
	return nil
}

// invoke makes one call on inst under the call timeout and classifies the
// outcome. healthy reports whether inst may serve another call.
func (p *Plugin) invoke(ctx context.Context, inst *instance, export string, input []byte) (out []byte, healthy bool, err error) {
	if err := ctx.Err(); err != nil {
		// A metered plugin sees its context only every meterBudget
		// turns; a call that would end before that must not start.
		return nil, true, err
	}
	callCtx, cancel := context.WithTimeout(ctx, p.cfg.timeout)
	defer cancel()
	defer context.AfterFunc(p.killCtx, cancel)()
	p.stats.calls.Add(1)
	var (
		rc       uint32
		callErr  error
		direct   = inst.direct != nil && inst.direct.fns[export] != nil
		refusal  string
		refusing bool
	)
	inst.stderr.reset()
	if direct {
		p.stats.direct.Add(1)
		out, refusing, callErr = inst.direct.call(callCtx, inst.direct.fns[export], input)
		if refusing {
			refusal, out = string(out), nil
		}
	} else {
		rc, out, callErr = inst.callSafe(callCtx, export, padInput(input))
	}
	exited := inst.exited.Load()
	failed := callErr != nil || exited
	switch {
	case failed && ctx.Err() != nil:
		return nil, false, ctx.Err()
	case failed && p.killCtx.Err() != nil:
		return nil, false, ErrClosed
	case failed && callCtx.Err() != nil:
		return nil, false, fmt.Errorf("%w (limit %s)", ErrPluginTimeout, p.cfg.timeout)
	case failed && p.isClosed():
		return nil, false, ErrClosed
	case exited && callErr == nil:
		return nil, false, fmt.Errorf("%w: the guest exited with code %d during the call%s", ErrPluginTrap, inst.exitCode.Load(), inst.trapReason(""))
	case callErr != nil:
		var exit *sys.ExitError
		if errors.As(callErr, &exit) {
			return nil, false, fmt.Errorf("%w: the guest exited with code %d%s", ErrPluginTrap, exit.ExitCode(), inst.trapReason(""))
		}
		if errors.Is(callErr, ErrBadOutput) {
			return nil, false, callErr
		}
		var msg string
		if !direct {
			msg = inst.errorMessage()
		}
		if msg == "" || msg != callErr.Error() {
			// wazero appends a multi-line wasm stack trace: keep the error
			// to one line for views, state and logs; the trace goes to debug.
			p.log.Debug("plugin trapped", "plugin", p.name, "export", export, "detail", callErr.Error())
			return nil, false, fmt.Errorf("%w: %s%s", ErrPluginTrap, firstLine(callErr.Error()), inst.trapReason(msg))
		}
		if rc == 0 {
			return nil, false, fmt.Errorf("%w: status 0 with an error message: %s", ErrBadOutput, refusalText(msg))
		}
		return nil, true, &refusedError{msg: refusalText(msg)}
	case refusing:
		return nil, true, &refusedError{msg: refusalText(refusal)}
	case rc != 0:
		return nil, false, fmt.Errorf("%w: status %d without an error message", ErrBadOutput, rc)
	case len(out) > abi.MaxOutputBytes:
		return nil, false, fmt.Errorf("%w: %d bytes of output, limit %d", ErrBadOutput, len(out), abi.MaxOutputBytes)
	}
	return out, true, nil
}

// trapReason returns the guest's own explanation of the trap that ended
// its call (see the package function trapReason), in parentheses after a
// space, or "" when it gave none. msg is the Extism error it set.
func (i *instance) trapReason(msg string) string {
	if r := trapReason(msg, i.stderr.buf); r != "" {
		return " (" + r + ")"
	}
	return ""
}

// callSafe calls export, turning a panic in extism's host-side code into an
// error.
func (i *instance) callSafe(ctx context.Context, export string, input []byte) (rc uint32, out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			rc, out, err = 1, nil, fmt.Errorf("host panic during the call: %v", r)
		}
	}()
	return i.ext.CallWithContext(ctx, export, input)
}

// errorMessage returns the Extism error the last call set, if any.
func (i *instance) errorMessage() (msg string) {
	defer func() {
		if recover() != nil {
			msg = ""
		}
	}()
	return i.ext.GetErrorWithContext(context.Background())
}

// firstLine returns s up to its first line break.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return strings.TrimRight(s[:i], " \r:")
	}
	return s
}

// refusalText quotes a plugin's error message, cut at maxRefusalText bytes.
func refusalText(msg string) string {
	if len(msg) <= maxRefusalText {
		return msg
	}
	return fmt.Sprintf("%s... (%d bytes)", runePrefix(msg, maxRefusalText), len(msg))
}

// runePrefix returns the longest prefix of s of at most n bytes that ends
// at a rune boundary.
func runePrefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func (p *Plugin) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// errorf formats an error naming the plugin and the export.
func (p *Plugin) errorf(export, format string, args ...any) error {
	return fmt.Errorf("plugin %q: %s: %w", p.name, export, fmt.Errorf(format, args...))
}

// Close stops new calls (they return ErrClosed), waits for the calls in
// flight, then releases every instance and the compiled module. If ctx ends
// first, Close terminates the calls still running (they return ErrClosed),
// waits the moment they take to return, and returns ctx's error. Closing
// twice is a no-op.
func (p *Plugin) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.memo = nil
	close(p.done)
	p.mu.Unlock()

	var err error
	waited := make(chan struct{})
	go func() {
		p.inflight.Wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-ctx.Done():
		err = fmt.Errorf("plugin %q: close: terminated the calls still running: %w", p.name, ctx.Err())
	}
	p.kill() // stops the calls still running, if any
	if err != nil {
		// They end at their next meter check (or wazero's own check for an
		// unmetered module): wait for that before closing the runtime under
		// them, which wazero does not allow while a module is being
		// instantiated or called.
		select {
		case <-waited:
		case <-time.After(closeKillWait):
			p.log.LogAttrs(context.Background(), slog.LevelWarn, "plugin calls still running after being terminated; closing anyway",
				slog.String("plugin", p.name))
		}
	}
	for drained := false; !drained; {
		select {
		case inst := <-p.idle:
			p.closeInstance(inst)
		default:
			drained = true
		}
	}
	bg := context.Background()
	if cerr := p.compiled.Close(bg); cerr != nil {
		err = errors.Join(err, fmt.Errorf("plugin %q: close: %w", p.name, cerr))
	}
	if cerr := p.cache.Close(bg); cerr != nil {
		err = errors.Join(err, fmt.Errorf("plugin %q: close compilation cache: %w", p.name, cerr))
	}
	p.log.LogAttrs(bg, slog.LevelDebug, "plugin closed", slog.String("plugin", p.name),
		slog.Int64("calls", p.stats.calls.Load()), slog.Int64("instances", p.stats.created.Load()),
		slog.Int64("discarded", p.stats.discarded.Load()))
	return err
}
