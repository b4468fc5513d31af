// Package host runs wasmhost policy plugins: WebAssembly modules speaking
// ABI v1 (package abi, abi/SPEC.md) through Extism, in a sandbox without
// filesystem, environment, network or real clock. It imports abi and the
// internal wasm and JSON helpers, never the embedded plugin.
//
// Load checks a module before it runs anything else. It checks the SHA-256
// pin and the wasm header, then the features and module limits of
// abi/SPEC.md section 6.3 (modulecheck.go, meter.go). It compiles the module,
// allows only the Extism kernel and WASI as imports, and checks the exports
// (handshake, canonicalize, project, optional project_batch and direct
// forms). Then it calls handshake and refuses other ABI versions.
//
// A loaded Plugin keeps a bounded pool of instances (instance.go). Each call
// runs on one instance under a memory cap and a timeout; an instance that
// timed out, trapped or answered badly is discarded. *Plugin implements
// abi.Policy and abi.BatchProjector. Calls stay cheap because the module is
// metered (meter.go, internal/wasmmeter) and direct exports (direct.go)
// exchange data through the plugin's own memory.
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
	memo   map[string]*abi.CanonicalResult
}

// stats count pool events (read by tests and logs).
type stats struct {
	calls, created, discarded atomic.Int64
	// direct counts the calls made in direct form.
	direct atomic.Int64
	// live is the number of instances not yet closed; peak its maximum.
	live, peak atomic.Int64
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
		missed  []int             // the positions of the settings the memo lacks
		size    int               // their bytes
		pending []json.RawMessage // distinct settings the memo lacks, in first-seen order
		keys    []string          // their bytes as strings, the memo's keys
		first   []int             // the position of each in req.Settings
		repeats map[int][]int     // later positions of a pending object, rare
	)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, p.errorf(export, "%w", ErrClosed)
	}
	for i, s := range req.Settings {
		if r, ok := p.memo[string(orNull(s))]; ok {
			results[i] = cloneResult(*r)
			continue
		}
		missed = append(missed, i)
		size += len(orNull(s))
	}
	p.mu.Unlock()
	if len(missed) > 0 {
		// One string holds the bytes of every settings object the memo
		// lacks; the memo's keys are pieces of it: one allocation, not one
		// per settings object. The memo drops a call's keys together
		// (remember), so a piece does not keep the rest alive long.
		var all strings.Builder
		all.Grow(size)
		for _, i := range missed {
			all.Write(orNull(req.Settings[i]))
		}
		text := all.String()
		index := make(map[string]int, len(missed)) // pending index by bytes
		for _, i := range missed {
			s := orNull(req.Settings[i])
			k := text[:len(s)]
			text = text[len(s):]
			if j, seen := index[k]; seen {
				if repeats == nil {
					repeats = map[int][]int{}
				}
				repeats[j] = append(repeats[j], i)
				continue
			}
			index[k] = len(pending)
			pending, keys, first = append(pending, s), append(keys, k), append(first, i)
		}
	}
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
	keys := p.handshake.CanonicalKeys
	compact := func(out []byte) (*abi.CanonicalizeResponse, bool) {
		return decodeCanonicalizeCompactKeys(out, keys)
	}
	err := p.call(ctx, abi.ExportCanonicalize, in, func(out []byte) (err error) {
		resp, err = decodeChecked(req, out, compact, p.validateCanonicalize)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.Results, nil
}

// validateCanonicalize is abi.ValidateCanonicalize, after giving each result
// without a key its canonical form's text as key when the plugin's
// handshake has canonicalKeys. Such a plugin has declared that its key is
// that text: a result whose key says otherwise is refused, so that the
// declaration cannot hide two meanings under one key.
func (p *Plugin) validateCanonicalize(req *abi.CanonicalizeRequest, resp *abi.CanonicalizeResponse) error {
	if p.handshake.CanonicalKeys {
		if err := fillCanonicalKeys(resp); err != nil {
			return err
		}
		for i := range resp.Results {
			if r := &resp.Results[i]; r.Key != "" && len(r.Canonical) > 0 && r.Key != string(r.Canonical) {
				return fmt.Errorf("canonicalize: results[%d]: the key differs from the canonical form's text, which the plugin's handshake (canonicalKeys) declares its key to be", i)
			}
		}
	}
	return abi.ValidateCanonicalize(req, resp)
}

// fillCanonicalKeys gives each result with a canonical form and neither a
// key nor an error the canonical form's JSON text, exactly as the plugin
// wrote it, as its key (abi/SPEC.md section 4, canonicalKeys). That text
// must be UTF-8, as a key decoded from a JSON string always is (JSON
// validity does not require it), and its length is then checked as any
// key's is; a result with neither a canonical form nor a key nor an error
// stays bad output.
func fillCanonicalKeys(resp *abi.CanonicalizeResponse) error {
	for i := range resp.Results {
		if r := &resp.Results[i]; r.Key == "" && r.Error == "" && len(r.Canonical) > 0 {
			if !utf8.Valid(r.Canonical) {
				return fmt.Errorf("canonicalize: results[%d]: the canonical form, the key of a plugin with canonicalKeys, is not UTF-8", i)
			}
			r.Key = string(r.Canonical)
		}
	}
	return nil
}

// orNull is s, or null for an empty settings object (nil).
func orNull(s json.RawMessage) json.RawMessage {
	if len(s) == 0 {
		return json.RawMessage("null")
	}
	return s
}

// remember stores one call's results in the memo, under the settings bytes
// of each as a string. The memo holds pointers into results, which nothing
// changes once decoded (callers get clones).
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
		p.memo[k] = &results[j]
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
// The output is valid only while decode runs: after a direct call it lies
// in the plugin's memory, which the instance's next call writes over, so
// decode copies whatever it keeps.
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
