package host

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"

	"github.com/wasmhost/wasmhost/abi"
)

// Load checks, compiles and starts the plugin in wasm. name says where the
// bytes came from, for messages and Plugin.Name. In order, Load refuses:
// bytes whose SHA-256 differs from opts.PinSHA256 (ErrDigestMismatch,
// before compiling), bytes that are not a core wasm module (ErrNotWasm), a
// module past a load limit or using a feature the host does not run
// (ErrModuleLimit, ErrUnsupportedWasm; abi/SPEC.md section 6.3), a
// module that does not compile (ErrMemoryLimit when it declares more
// memory than the limit), imports the sandbox lacks
// (ErrUnknownImport), missing exports or an optional export of the wrong
// type (ErrMissingExport), a failing or
// malformed handshake (ErrHandshake) and an ABI version other than
// abi.Version (ErrABIVersion). The instance that answered the handshake is
// kept for the first call.
func Load(ctx context.Context, name string, wasm []byte, opts Options) (*Plugin, error) {
	return load(ctx, name, wasm, "", opts, nil)
}

// LoadFile loads the plugin in the file at path; the path is its name.
func LoadFile(ctx context.Context, path string, opts Options) (*Plugin, error) {
	wasm, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("plugin %q: %w", path, err)
	}
	return Load(ctx, path, wasm, opts)
}

// LoadEmbedded loads a plugin compiled into the binary, such as the
// default policy (package plugins/policy-default, wired in by cmd/ and
// daemon), whose hex SHA-256 the build recorded: it is trusted, not
// computed again at every load.
func LoadEmbedded(ctx context.Context, name string, wasm []byte, sha256Hex string, opts Options) (*Plugin, error) {
	return load(ctx, name, wasm, sha256Hex, opts, nil)
}

// extismLogs routes plugin log calls to the instances' loggers; see load.
var extismLogs sync.Once

// load runs the load pipeline; digest is the SHA-256 of wasm when the caller
// knows it (the embedded plugin's is a constant), else "". With insp non-nil
// (Inspect), it records what it finds there and, when only exports are
// missing, still tries the handshake; the error it returns is the first
// refusal either way.
func load(ctx context.Context, name string, wasm []byte, digest string, opts Options, insp *Inspection) (_ *Plugin, err error) {
	start := time.Now()
	fail := func(format string, args ...any) error {
		return fmt.Errorf("plugin %q: %w", name, fmt.Errorf(format, args...))
	}
	cfg, err := opts.resolve()
	if err != nil {
		return nil, fail("%w", err)
	}
	// A pinned plugin is hashed, and refused on a mismatch, before any of
	// it is compiled; so is a plugin whose metered module may be kept in
	// the cache directory, since the digest names it there. Otherwise the
	// digest only names the plugin (logs, Digest), so it is computed while
	// wazero compiles: a few milliseconds of a warm-cache load.
	var digested chan string // the digest computed meanwhile, when digest is ""
	if digest == "" && (cfg.pin != "" || insp != nil || (cfg.cacheDir != "" && !cfg.noMeter)) {
		digest = sha256Hex(wasm)
	}
	if digest != "" {
		if insp != nil {
			insp.SHA256, insp.Size = digest, len(wasm)
		}
		if cfg.pin != "" && cfg.pin != digest {
			return nil, fail("%w: the wasm has sha256 %s, the pin is %s", ErrDigestMismatch, digest, cfg.pin)
		}
	} else {
		digested = make(chan string, 1)
		go func() { digested <- sha256Hex(wasm) }()
		defer func() {
			if digest == "" {
				<-digested // the hash must not outlive a failed load's caller
			}
		}()
	}
	if err := checkHeader(wasm); err != nil {
		return nil, fail("%w", err)
	}

	if cfg.cacheDir != "" {
		if err := checkCacheDir(cfg.cacheDir); err != nil {
			return nil, fail("%w", err)
		}
	}
	if len(wasm) > MaxModuleBytes {
		return nil, fail("%w: %d bytes, over the limit of %d", ErrModuleLimit, len(wasm), MaxModuleBytes)
	}
	code, metered, err := meterModule(ctx, name, wasm, digest, cfg)
	if err != nil {
		return nil, fail("compile: %w", err)
	}
	if insp != nil {
		insp.Metered = metered
	}
	info, err := parseModule(wasm)
	if err != nil {
		return nil, fail("reading sections: %w", err)
	}
	if metered {
		// The tables to count are those of the code compiled, to which
		// the rewriter gave maximums.
		if info.tables, err = parseTables(code); err != nil {
			return nil, fail("reading sections: %w", err)
		}
	}
	pages, err := memoryPages(info, cfg.pages)
	if err != nil {
		return nil, fail("%w", err)
	}
	rc := wazero.NewRuntimeConfig().
		WithMemoryLimitPages(pages).
		WithCloseOnContextDone(!metered)
	var funcs []extism.HostFunction
	if metered {
		funcs = append(funcs, meterFunction())
	}
	manifest := extism.Manifest{
		Wasm: []extism.Wasm{extism.WasmData{Data: code, Name: "main"}},
		// Vars and HTTP responses are disabled by their zero sizes; config,
		// allowed hosts and allowed paths stay empty; the host applies its
		// own per-call deadline instead of Manifest.Timeout.
		Memory: &extism.ManifestMemory{MaxPages: pages, MaxHttpResponseBytes: 0, MaxVarBytes: 0},
	}
	compiled, cache, err := compileCached(ctx, name, manifest, extism.PluginConfig{RuntimeConfig: rc, EnableWasi: true}, funcs, cfg)
	if err != nil {
		return nil, fail("%w", err)
	}
	if digest == "" {
		digest = <-digested
	}
	killCtx, kill := context.WithCancel(context.Background())
	p := &Plugin{
		name:      name,
		killCtx:   killCtx,
		kill:      kill,
		digest:    digest,
		cfg:       cfg,
		log:       cfg.log,
		compiled:  compiled,
		cache:     cache,
		memoLimit: memoEntries,
		slots:     make(chan struct{}, cfg.maxInstances),
		idle:      make(chan *instance, cfg.maxInstances),
		done:      make(chan struct{}),
		memo:      map[string]*abi.CanonicalResult{},
	}
	defer func() {
		if err != nil {
			_ = p.Close(context.Background())
		}
	}()

	if insp != nil {
		insp.Imports, insp.Exports = info.imports, info.exports
	}
	importErr := checkImports(info.imports)
	// An optional export the module has must have the type of the others.
	optional := presentExports(info.exports, abi.OptionalExports)
	exportErr := checkExports(info.exports, append(slices.Clone(abi.RequiredExports), optional...))
	if importErr != nil {
		// Every offender at once, imports and exports alike.
		if exportErr != nil {
			return nil, fail("%w; %w", importErr, exportErr)
		}
		return nil, fail("%w", importErr)
	}
	usable := slices.DeleteFunc(optional, func(name string) bool {
		return checkExports(info.exports, []string{name}) != nil
	})
	p.batch = slices.Contains(usable, abi.ExportProjectBatch)
	if !cfg.noDirect && slices.Contains(usable, abi.ExportAlloc) && info.exportsMemory() {
		for _, name := range abi.DirectExports {
			if slices.Contains(usable, name+abi.DirectSuffix) {
				p.direct = append(p.direct, name)
			}
		}
	}
	if insp != nil {
		insp.OptionalExports = usable
	}
	if exportErr != nil && (insp == nil || checkExports(info.exports, []string{abi.ExportHandshake}) != nil) {
		return nil, fail("%w", exportErr)
	}

	if cfg.log.Enabled(ctx, slog.LevelDebug) {
		// extism drops plugin log calls below a process-wide level that
		// defaults to off; a debug logger asks for debug and above. Not
		// trace: extism logs its own trace messages while it creates an
		// instance, before SetLogger can route them, to the log package.
		extismLogs.Do(func() { extism.SetLogLevel(extism.LogLevelDebug) })
	}
	inst, err := p.newInstance(ctx)
	if err != nil {
		return nil, fail("instantiate: %w", err)
	}
	out, _, callErr := p.invoke(ctx, inst, abi.ExportHandshake, cfg.hsInput)
	var h abi.Handshake
	switch {
	case callErr != nil && ctx.Err() != nil:
		err = fail("handshake: %w", callErr)
	case errors.Is(callErr, ErrPluginTrap) && info.isCommand():
		// Go's most common build mistake: without -buildmode=c-shared the
		// module is a command, whose exports trap until _start has run.
		err = fail("%w: %w; the module is a WASI command (it exports _start, not _initialize), "+
			"whose exports cannot run on their own: build a Go plugin with -buildmode=c-shared", ErrHandshake, callErr)
	case callErr != nil:
		err = fail("%w: %w", ErrHandshake, callErr)
	default:
		if h, err = decodeHandshake(out, insp); err != nil {
			err = fail("%w", err)
		} else if exportErr != nil {
			err = fail("%w", exportErr)
		}
	}
	if err != nil {
		p.closeInstance(inst)
		return nil, err
	}
	p.handshake = h
	p.idle <- inst
	cfg.log.LogAttrs(ctx, slog.LevelInfo, "plugin loaded",
		slog.String("plugin", name), slog.String("sha256", digest),
		slog.String("policy", h.Name), slog.String("version", h.Version),
		slog.Duration("took", time.Since(start)))
	return p, nil
}

// MaxModuleBytes is the largest plugin Load accepts: 32 MiB, some six
// times the Go plugins of this repository. wazero's compile time and
// memory grow with the module.
const MaxModuleBytes = 32 << 20

// tableEntryBytes is what one table entry is charged against the memory
// limit: wazero keeps 8 bytes per entry, and table.grow makes a new array
// before it drops the old one.
const tableEntryBytes = 16

// memoryPages returns the page limit of each linear memory of an instance
// of the module: limit, less the pages its tables may take at their
// maximum (tableEntryBytes an entry). Tables whose maximum leaves less
// than one page of the limit are refused with ErrModuleLimit. A table
// without a maximum counts at its minimum: the metering rewriter refuses a
// module that has one and a table.grow (and gives it its minimum as
// maximum in the code the host runs).
func memoryPages(info *moduleInfo, limit uint32) (uint32, error) {
	var entries uint64
	for _, t := range info.tables {
		if t.HasMax {
			entries += t.Max
		} else {
			entries += t.Min
		}
	}
	bytes := entries * tableEntryBytes
	tablePages := (bytes + pageSize - 1) / pageSize
	if entries > 1<<32 || tablePages >= uint64(limit) {
		return 0, fmt.Errorf("%w: tables of up to %d entries take %d bytes at %d bytes each, which leaves no memory under the limit of %d bytes",
			ErrModuleLimit, entries, bytes, tableEntryBytes, uint64(limit)*pageSize)
	}
	return limit - uint32(tablePages), nil
}

// compileSafe compiles a plugin within timeout, turning a panic in
// wazero's decoder (v1.12 has some on malformed modules) into an error.
// wazero cannot stop a compilation: past the timeout (or the end of ctx)
// compileSafe returns ErrModuleLimit and leaves it to finish in the
// background, which then closes what it made and calls abandoned.
func compileSafe(ctx context.Context, m extism.Manifest, c extism.PluginConfig, funcs []extism.HostFunction, timeout time.Duration, abandoned func()) (*extism.CompiledPlugin, error) {
	type result struct {
		compiled *extism.CompiledPlugin
		err      error
	}
	done := make(chan result, 1)
	go func() {
		var res result
		defer func() {
			if r := recover(); r != nil {
				res = result{err: fmt.Errorf("the compiler failed on this module: %v", r)}
			}
			done <- res
		}()
		res.compiled, res.err = extism.NewCompiledPlugin(ctx, m, c, funcs)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var err error
	select {
	case res := <-done:
		return res.compiled, res.err
	case <-timer.C:
		err = fmt.Errorf("%w: not compiled within the compile timeout of %s", ErrModuleLimit, timeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	compilesAbandoned.Add(1)
	go func() {
		defer compilesAbandoned.Add(-1)
		if res := <-done; res.compiled != nil {
			_ = res.compiled.Close(context.Background())
		}
		abandoned()
	}()
	return nil, err
}

// compilesAbandoned counts the compilations compileSafe gave up on that
// are still running.
var compilesAbandoned atomic.Int64

// sha256Hex returns the hex SHA-256 of b.
func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// decodeHandshake decodes and checks a handshake output. The ABI version is
// read first, leniently, so a plugin of another ABI version is refused with
// ErrABIVersion even if its handshake has fields v1 lacks (abi/SPEC.md
// section 3). Any "abi" value other than the JSON number written exactly 1
// is such a refusal; a handshake without "abi" is ErrHandshake, as the SPEC
// lists "lacks abi" among the malformed handshakes: it states no version to
// refuse.
func decodeHandshake(out []byte, insp *Inspection) (abi.Handshake, error) {
	if insp != nil {
		var lenient abi.Handshake
		if json.Unmarshal(out, &lenient) == nil {
			insp.Handshake = &lenient
		}
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(out, &probe) == nil {
		if raw, ok := probe["abi"]; ok {
			if err := checkABI(raw, probe["name"]); err != nil {
				return abi.Handshake{}, fmt.Errorf("%w: %w", ErrABIVersion, err)
			}
		}
	}
	var h abi.Handshake
	if err := decodeStrict(out, &h); err != nil {
		return abi.Handshake{}, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	if _, ok := probe["abi"]; !ok {
		return abi.Handshake{}, fmt.Errorf("%w: no \"abi\" field", ErrHandshake)
	}
	if err := abi.ValidateHandshake(&h); err != nil {
		return abi.Handshake{}, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	return h, nil
}

// checkABI checks the raw "abi" value of a handshake, whose raw "name" (nil
// when absent) names the plugin in the error. Only the JSON number written
// exactly 1 is this host's version: the field is an integer version, and a
// plugin writing 1.0, 1e0 or "1" is not speaking this ABI's handshake
// precisely, even where the number equals 1. The error
// quotes the value as the plugin wrote it (compacted, and cut when long).
func checkABI(raw, name json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if string(raw) == strconv.Itoa(abi.Version) {
		return nil
	}
	who := "the plugin"
	var n string
	if json.Unmarshal(name, &n) == nil && n != "" {
		who = fmt.Sprintf("plugin %q", n)
	}
	if isDigits(raw) {
		// An integer, however large: another version, named as the SPEC
		// names it.
		return fmt.Errorf("%s speaks wasmhost ABI v%s, this host speaks ABI v%d", who, showJSON(raw), abi.Version)
	}
	return fmt.Errorf("%s gives \"abi\": %s; this host speaks ABI v%d and accepts only \"abi\": %d", who, showJSON(raw), abi.Version, abi.Version)
}

// isDigits reports whether b is a non-empty run of ASCII digits.
func isDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

// showJSON shows a JSON value from a plugin in an error message: compacted,
// cut at 64 bytes, with any rune that does not print escaped.
func showJSON(raw []byte) string {
	const limit = 64
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		b.Reset()
		b.Write(raw)
	}
	total := b.Len()
	var out strings.Builder
	for _, r := range strings.ToValidUTF8(runePrefix(b.String(), limit), "\uFFFD") {
		if unicode.IsPrint(r) {
			out.WriteRune(r)
		} else {
			fmt.Fprintf(&out, "\\u%04x", r)
		}
	}
	if total > limit {
		fmt.Fprintf(&out, "... (%d bytes)", total)
	}
	return out.String()
}
