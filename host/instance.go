package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/wasmhost/wasmhost/abi"
)

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
//
// out is valid only until inst is released or makes another call: a direct
// call's answer is read where it lies in the plugin's memory, which the
// plugin reuses (directCalls.call). Callers decode it, copying what they
// keep, before they release inst (Plugin.call).
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
