package host

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/wasmhost/wasmhost/abi"
)

// Options configure how a plugin is loaded and run. The zero value is the
// ABI v1 defaults: abi.DefaultMemoryLimitBytes, abi.DefaultCallTimeoutMillis,
// no pin, no disk cache, GOMAXPROCS instances, no logging.
type Options struct {
	// MemoryLimitBytes caps each linear memory of an instance (the plugin's
	// own and the Extism kernel's), rounded down to whole 64 KiB pages.
	// 0 means abi.DefaultMemoryLimitBytes; at most 4 GiB.
	MemoryLimitBytes uint64
	// CallTimeout bounds one export call, including the guest runtime's
	// first-call initialization, and the start function of each new
	// instance. 0 means abi.DefaultCallTimeoutMillis.
	CallTimeout time.Duration
	// CompileTimeout bounds the compilation of the plugin at load; a
	// module not compiled by then is refused (ErrModuleLimit). The load
	// limits of abi/SPEC.md section 6.3 keep compile times to seconds;
	// this is the bound of last resort. 0 means DefaultCompileTimeout.
	CompileTimeout time.Duration
	// PinSHA256, when non-empty, is the hex SHA-256 the wasm bytes must
	// have (case-insensitive); other bytes are refused before compiling.
	// The pin covers the wasm, not compiled code read from CacheDir.
	PinSHA256 string
	// CacheDir, when non-empty, is a directory for wazero's compilation
	// cache and the host's metered modules, so that loading the same wasm
	// again (in this process or a later one) skips compiling and metering
	// it. "" keeps compiled code in memory only. The cache holds native code
	// and modules the host runs as it finds them: the directory must be
	// writable only by those trusted to run code as the host, and a load
	// refuses (ErrCacheDir) one that another user owns, that every user may
	// write, or whose group may write when it is not the process's; a
	// missing one is made with mode 0700. An entry
	// found damaged (cut short, or failing its checksum) does not fail the
	// load: the module is compiled (or metered) again and the entry
	// replaced, with a warning for wazero's entries.
	CacheDir string
	// MaxInstances bounds the instances (and so the concurrent calls) of
	// one Plugin. 0 means runtime.GOMAXPROCS(0).
	MaxInstances int
	// NoDirect makes every call through Extism's input and output, even to
	// a plugin with direct exports (abi/SPEC.md section 5.2). The
	// conformance runner uses it to check that both forms agree.
	NoDirect bool
	// Config is the plugin-wide configuration ("policy.config"), one JSON
	// value, sent to every instance as the input of its handshake (an
	// abi.HandshakeRequest; abi/SPEC.md section 3). "" sends the empty
	// input of plugins built before plugin configuration existed. (A
	// string keeps Options comparable.)
	Config string
	// noMeter compiles the module as it is, with wazero's termination
	// checks, for the host's own comparisons of the two.
	noMeter bool
	// Logger receives load and instance events, and at debug level the
	// plugin's own log and stdout/stderr output. nil discards everything.
	Logger *slog.Logger
}

// settings are Options with the defaults applied and the values checked.
type settings struct {
	pages          uint32
	timeout        time.Duration
	compileTimeout time.Duration
	pin            string
	cacheDir       string
	maxInstances   int
	noDirect       bool
	noMeter        bool
	log            *slog.Logger
	// hsInput is the handshake input: nil, or an abi.HandshakeRequest.
	hsInput []byte
}

// DefaultCompileTimeout is the compile timeout of Options.CompileTimeout 0:
// generous, since a Go plugin can take a minute to compile on a loaded
// machine under -race; the module limits keep a hostile module far below it.
const DefaultCompileTimeout = 5 * time.Minute

const (
	pageSize = 64 << 10
	maxPages = 65536 // 4 GiB, the most a 32-bit memory can address
)

func (o Options) resolve() (settings, error) {
	s := settings{
		timeout:        o.CallTimeout,
		compileTimeout: o.CompileTimeout,
		pin:            strings.ToLower(strings.TrimSpace(o.PinSHA256)),
		cacheDir:       o.CacheDir,
		maxInstances:   o.MaxInstances,
		noDirect:       o.NoDirect,
		noMeter:        o.noMeter,
		log:            o.Logger,
	}
	mem := o.MemoryLimitBytes
	if mem == 0 {
		mem = abi.DefaultMemoryLimitBytes
	}
	switch {
	case mem < pageSize:
		return s, fmt.Errorf("memory limit %d bytes is less than one 64 KiB page", mem)
	case mem/pageSize > maxPages:
		return s, fmt.Errorf("memory limit %d bytes is over the 4 GiB a wasm memory can address", mem)
	}
	s.pages = uint32(mem / pageSize)
	if o.Config != "" {
		in, err := json.Marshal(abi.HandshakeRequest{ABI: abi.Version, Config: json.RawMessage(o.Config)})
		if err != nil {
			return s, fmt.Errorf("plugin config: %w", err)
		}
		// Capacity clipped: padInput appends to a call's input, and must
		// not write into the bytes every instance's handshake shares.
		s.hsInput = in[:len(in):len(in)]
	}
	if s.timeout <= 0 {
		s.timeout = abi.DefaultCallTimeoutMillis * time.Millisecond
	}
	if s.compileTimeout <= 0 {
		s.compileTimeout = DefaultCompileTimeout
	}
	if s.maxInstances <= 0 {
		s.maxInstances = runtime.GOMAXPROCS(0)
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.pin != "" {
		if b, err := hex.DecodeString(s.pin); err != nil || len(b) != 32 {
			return s, fmt.Errorf("%w: the pin %q is not a hex SHA-256 (64 hex digits), so no wasm can match it", ErrDigestMismatch, o.PinSHA256)
		}
	}
	return s, nil
}

// CacheDirEnv names the environment variable that overrides
// DefaultCacheDir.
const CacheDirEnv = "WASMHOST_CACHE_DIR"

// DefaultCacheDir is where wasmhost's commands and tests keep compiled
// plugins between runs, so a second start does not recompile: the
// directory $WASMHOST_CACHE_DIR names when set, else wasmhost/compile-cache
// in the user's cache directory, else "" (no disk cache).
func DefaultCacheDir() string {
	if d := os.Getenv(CacheDirEnv); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "wasmhost", "compile-cache")
	}
	return ""
}
