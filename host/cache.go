package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"
)

// checkCacheDir makes dir (mode 0700) when it is missing, and refuses it
// unless it is a directory of this process's user that no other user may
// write (cacheDirTrusted): whoever can write it chooses the code the host
// runs, whatever the plugin's pin (wazero's entries are machine code, and
// the metered modules are run as they are found), so a directory such as
// /tmp/wasmhost-cache that another local user made first must not be used.
func checkCacheDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("%w %q: %w", ErrCacheDir, dir, err)
	}
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("%w %q: %w", ErrCacheDir, dir, err)
	case !fi.IsDir():
		return fmt.Errorf("%w %q: not a directory", ErrCacheDir, dir)
	}
	if err := cacheDirTrusted(fi); err != nil {
		return fmt.Errorf("%w %q: %w, and whoever writes it chooses the code the host runs: choose another directory, or make it this user's alone", ErrCacheDir, dir, err)
	}
	return nil
}

// cacheErrorPrefix starts every error wazero returns for a compilation cache
// entry it cannot read back (bad header, short file, checksum mismatch).
// wazero writes entries atomically, so such an entry was damaged on disk.
const cacheErrorPrefix = "compilationcache:"

// compileCached compiles m with a compilation cache in cfg.cacheDir (or in
// memory when there is none) and returns the cache the compiled plugin
// keeps.
//
// When wazero refuses an entry of the directory as damaged, the load does
// not fail: the module is compiled again into a fresh directory beside the
// damaged entries, and each entry written there replaces the one of the
// same name in the cache, so the next load finds good code. Entries are
// named by a hash of the module and the CPU, so the replacement lands on
// exactly the entry that was refused.
func compileCached(ctx context.Context, name string, m extism.Manifest, pc extism.PluginConfig, funcs []extism.HostFunction, cfg settings) (*extism.CompiledPlugin, wazero.CompilationCache, error) {
	var cache wazero.CompilationCache
	if cfg.cacheDir == "" {
		cache = wazero.NewCompilationCache()
	} else {
		var err error
		if cache, err = wazero.NewCompilationCacheWithDir(cfg.cacheDir); err != nil {
			return nil, nil, fmt.Errorf("%w %q: %w", ErrCacheDir, cfg.cacheDir, err)
		}
	}
	compiled, err := compileWith(ctx, m, pc, funcs, cache, cfg.compileTimeout)
	switch {
	case err == nil:
		return compiled, cache, nil
	case cfg.cacheDir == "":
		return nil, nil, err
	case !strings.Contains(err.Error(), cacheErrorPrefix):
		return nil, nil, cacheWriteError(cfg.cacheDir, err)
	}
	cfg.log.LogAttrs(ctx, slog.LevelWarn, "compilation cache entry damaged; compiling again and replacing it",
		slog.String("plugin", name), slog.String("cacheDir", cfg.cacheDir), slog.String("error", err.Error()))

	fresh, err := os.MkdirTemp(cfg.cacheDir, "repair-")
	if err != nil {
		return nil, nil, fmt.Errorf("compilation cache %q: damaged entry, and no room to compile again: %w", cfg.cacheDir, err)
	}
	defer os.RemoveAll(fresh)
	cache, err = wazero.NewCompilationCacheWithDir(fresh)
	if err != nil {
		return nil, nil, fmt.Errorf("compilation cache %q: %w", fresh, err)
	}
	if compiled, err = compileWith(ctx, m, pc, funcs, cache, cfg.compileTimeout); err != nil {
		return nil, nil, err
	}
	if err := replaceEntries(fresh, cfg.cacheDir); err != nil {
		// The plugin is compiled and works; only the next load stays cold.
		cfg.log.LogAttrs(ctx, slog.LevelWarn, "compilation cache entry not replaced; delete the directory to clear it",
			slog.String("plugin", name), slog.String("cacheDir", cfg.cacheDir), slog.String("error", err.Error()))
	}
	return compiled, cache, nil
}

// cacheWriteError is err, marked ErrCacheDir when it is about a file in dir:
// wazero writes a compiled module into its cache as part of compiling it,
// so a directory that was usable when checked but cannot take the entry
// (read-only, full) fails the compilation with the file's path error. That
// is the directory's fault, not the plugin's, and callers tell the two
// apart by ErrCacheDir.
func cacheWriteError(dir string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) && strings.HasPrefix(pe.Path, dir+string(filepath.Separator)) ||
		strings.Contains(err.Error(), " "+dir+string(filepath.Separator)) {
		return fmt.Errorf("%w %q: %w", ErrCacheDir, dir, err)
	}
	return err
}

// memoryLimitText is in wazero's refusal of a memory section whose minimum
// exceeds the runtime's page limit ("min 44 pages (2 Mi) over limit of 16
// pages (1 Mi)").
const memoryLimitText = "over limit of"

// compileWith compiles m with cache within timeout, closing the cache if
// that fails (once the compilation has ended).
func compileWith(ctx context.Context, m extism.Manifest, pc extism.PluginConfig, funcs []extism.HostFunction, cache wazero.CompilationCache, timeout time.Duration) (*extism.CompiledPlugin, error) {
	pc.RuntimeConfig = pc.RuntimeConfig.WithCompilationCache(cache)
	abandoned := false
	compiled, err := compileSafe(ctx, m, pc, funcs, timeout, func() { _ = cache.Close(context.Background()) })
	if err != nil {
		if errors.Is(err, ErrModuleLimit) || errors.Is(err, ctx.Err()) {
			abandoned = true // compileSafe closes the cache when it is done
		}
		if !abandoned {
			_ = cache.Close(context.Background())
		}
		if strings.Contains(err.Error(), memoryLimitText) {
			return nil, fmt.Errorf("compile: %w: %w", ErrMemoryLimit, err)
		}
		return nil, fmt.Errorf("compile: %w", err)
	}
	return compiled, nil
}

// replaceEntries moves every file of from, a cache directory, to the same
// relative path under to, replacing what is there. wazero keeps its entries
// in one directory per wazero version and platform, the same name under
// both.
func replaceEntries(from, to string) error {
	var errs []error
	err := filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			errs = append(errs, err)
			return nil
		}
		if err := os.Rename(path, dst); err != nil {
			errs = append(errs, err)
		}
		return nil
	})
	return errors.Join(append(errs, err)...)
}
