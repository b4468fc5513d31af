package host

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/wasmbin"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
)

func TestLoadRefusals(t *testing.T) {
	tests := []struct {
		name string
		wasm []byte // or
		wat  string
		opts Options
		want []error // every one must match with errors.Is
		msg  []string
	}{
		{name: "empty", wasm: []byte{}, want: []error{ErrNotWasm}, msg: []string{"magic"}},
		{name: "text", wasm: []byte("hello, world"), want: []error{ErrNotWasm}, msg: []string{`"hell"`}},
		{name: "magic only", wasm: []byte("\x00asm"), want: []error{ErrNotWasm}, msg: []string{"truncated"}},
		{name: "component", wasm: []byte("\x00asm\x0d\x00\x01\x00"), want: []error{ErrNotWasm}, msg: []string{"component"}},
		{name: "abi v2", wat: "abi2", want: []error{ErrABIVersion},
			msg: []string{`plugin "wat-abi2" speaks wasmhost ABI v2, this host speaks ABI v1`}},
		{name: "empty name", wat: "hs-empty-name", want: []error{ErrHandshake}, msg: []string{"name is empty"}},
		{name: "unknown handshake field", wat: "hs-unknown-field", want: []error{ErrHandshake}, msg: []string{`unknown field "color"`}},
		{name: "handshake not json", wat: "hs-not-json", want: []error{ErrHandshake}, msg: []string{"not a JSON object", "hello, host"}},
		{name: "handshake refuses", wat: "hs-refuse", want: []error{ErrHandshake, ErrPluginRefused}, msg: []string{"no handshake today"}},
		{name: "handshake loops", wat: "hs-loop", opts: Options{CallTimeout: shortTimeout},
			want: []error{ErrHandshake, ErrPluginTimeout}, msg: []string{"200ms"}},
		{name: "missing exports", wat: "missing-exports", want: []error{ErrMissingExport}, msg: []string{"missing canonicalize, project"}},
		{name: "no exports", wat: "tiny", want: []error{ErrMissingExport}, msg: []string{"missing handshake, canonicalize, project"}},
		{name: "a WASI command", wat: "command", want: []error{ErrHandshake, ErrPluginTrap},
			msg: []string{"the module is a WASI command (it exports _start, not _initialize)", "build a Go plugin with -buildmode=c-shared"}},
		{name: "native binary", wasm: []byte("\x7fELF\x02\x01\x01"), want: []error{ErrNotWasm},
			msg: []string{`starts with "\x7fELF"`, "an ELF executable or library, built for this machine", "GOOS=wasip1 GOARCH=wasm"}},
		{name: "optional export of the wrong type", wat: "batch-type", want: []error{ErrMissingExport},
			msg: []string{"project_batch has signature (i32) -> i32, want () -> i32"}},
		{name: "unknown module", wat: "unknown-import", want: []error{ErrUnknownImport}, msg: []string{`module "env" function "now"`}},
		{name: "bad import and exports", wat: "import-and-export", want: []error{ErrUnknownImport, ErrMissingExport},
			msg: []string{`module "env" function "now"`, "missing canonicalize", "project has signature (i32) -> i32"}},
		{name: "unknown kernel function", wat: "unknown-env-func", want: []error{ErrUnknownImport},
			msg: []string{`module "extism:host/env" function "teleport"`}},
		{name: "memory limit below the kernel's minimum", wat: "script", opts: Options{MemoryLimitBytes: 512 << 10},
			want: []error{ErrMemoryLimit}, msg: []string{"compile", "over limit of 8 pages"}},
		{name: "memory limit above 4 GiB", wat: "script", opts: Options{MemoryLimitBytes: 5 << 30}, msg: []string{"4 GiB"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wasm, name := tt.wasm, tt.name
			if tt.wat != "" {
				wasm, name = watWasm(t, tt.wat), tt.wat+".wasm"
			}
			p, err := Load(context.Background(), name, wasm, tt.opts)
			require.Error(t, err)
			assert.Nil(t, p)
			for _, want := range tt.want {
				assert.ErrorIs(t, err, want)
			}
			assert.Contains(t, err.Error(), `plugin "`+name+`"`)
			for _, m := range tt.msg {
				assert.Contains(t, err.Error(), m)
			}
		})
	}
}

func TestLoadNotCompiling(t *testing.T) {
	// A valid header followed by a section that claims more bytes than exist.
	wasm := append(bytes.Clone(wasmbin.Header), 0x01, 0x7f, 0x00)
	_, err := Load(context.Background(), "broken", wasm, Options{})
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNotWasm)
	assert.Contains(t, err.Error(), `plugin "broken": compile`)
}

func TestPin(t *testing.T) {
	ctx := context.Background()
	wasm := watWasm(t, "script")
	sum := sha256.Sum256(wasm)
	digest := hex.EncodeToString(sum[:])
	other := strings.Repeat("ab", 32)

	t.Run("mismatch names both digests", func(t *testing.T) {
		_, err := Load(ctx, "script", wasm, Options{PinSHA256: other})
		require.ErrorIs(t, err, ErrDigestMismatch)
		assert.Contains(t, err.Error(), digest)
		assert.Contains(t, err.Error(), other)
	})
	t.Run("checked before anything else", func(t *testing.T) {
		// Not wasm at all, yet the pin is what refuses it.
		_, err := Load(ctx, "text", []byte("hello"), Options{PinSHA256: other})
		require.ErrorIs(t, err, ErrDigestMismatch)
		assert.NotErrorIs(t, err, ErrNotWasm)
	})
	t.Run("not a digest", func(t *testing.T) {
		_, err := Load(ctx, "script", wasm, Options{PinSHA256: "abc"})
		require.ErrorIs(t, err, ErrDigestMismatch)
		assert.Contains(t, err.Error(), "not a hex SHA-256")
	})
	t.Run("match, any case", func(t *testing.T) {
		p := loadWat(t, "script", Options{PinSHA256: strings.ToUpper(digest)})
		assert.Equal(t, digest, p.Digest())
	})
}

func TestLoadAccepted(t *testing.T) {
	p := loadWat(t, "script", Options{})
	assert.Equal(t, "script", p.Name())
	assert.Equal(t, abi.Handshake{ABI: 1, Name: "wat-script", Version: "0.1.0"}, p.Handshake())
	sum := sha256.Sum256(watWasm(t, "script"))
	assert.Equal(t, hex.EncodeToString(sum[:]), p.Digest())
	// The handshake instance is kept for the first call.
	assert.EqualValues(t, 1, p.stats.created.Load())
	assert.Len(t, p.idle, 1)
}

func TestLoadFile(t *testing.T) {
	path := filepath.Join("..", "testplugins", "wat", "script.wasm")
	p, err := LoadFile(context.Background(), path, Options{})
	require.NoError(t, err)
	defer p.Close(context.Background())
	assert.Equal(t, path, p.Name())

	missing := filepath.Join(t.TempDir(), "nope.wasm")
	_, err = LoadFile(context.Background(), missing, Options{})
	require.ErrorIs(t, err, fs.ErrNotExist)
	assert.Contains(t, err.Error(), missing)
}

func TestLoadCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Load(ctx, "hs-loop", watWasm(t, "hs-loop"), Options{})
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, ErrPluginTimeout)
}

func TestCacheDir(t *testing.T) {
	dir := t.TempDir()
	p := loadWat(t, "script", Options{CacheDir: dir})
	require.NotNil(t, p)
	var files int
	require.NoError(t, filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files++
		}
		return err
	}))
	assert.Positive(t, files, "the compilation cache directory is still empty after a load")

	_, err := Load(context.Background(), "script", watWasm(t, "script"), Options{CacheDir: "/dev/null/cache"})
	require.ErrorIs(t, err, ErrCacheDir)
	assert.Contains(t, err.Error(), `cannot use the compilation cache directory "/dev/null/cache"`)
}

func TestWASIOutputEnvRefused(t *testing.T) {
	t.Setenv(envWASIOutput, "1")
	_, err := Load(context.Background(), "script", watWasm(t, "script"), Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), envWASIOutput)
}

func TestInspect(t *testing.T) {
	ctx := context.Background()
	t.Run("accepted", func(t *testing.T) {
		wasm := watWasm(t, "script")
		insp, err := Inspect(ctx, "test.wasm", wasm)
		require.NoError(t, err)
		sum := sha256.Sum256(wasm)
		assert.Equal(t, hex.EncodeToString(sum[:]), insp.SHA256)
		assert.Equal(t, len(wasm), insp.Size)
		assert.True(t, insp.Accepted)
		assert.Empty(t, insp.Reason)
		assert.NoError(t, insp.Err)
		require.NotNil(t, insp.Handshake)
		assert.Equal(t, "wat-script", insp.Handshake.Name)
		for _, name := range abi.RequiredExports {
			assert.Contains(t, insp.Exports, Export{Name: name, Kind: "func", Signature: "() -> i32"})
		}
		assert.Contains(t, insp.Exports, Export{Name: "memory", Kind: "memory"})
		assert.Equal(t, []string{abi.ExportProjectBatch}, insp.OptionalExports)
		assert.Contains(t, insp.Imports, Import{Module: "extism:host/env", Name: "alloc", Kind: "func", Signature: "(i64) -> i64"})
		assert.Contains(t, insp.Imports, Import{Module: "wasi_snapshot_preview1", Name: "proc_exit", Kind: "func", Signature: "(i32) -> ()"})
	})
	t.Run("other abi version", func(t *testing.T) {
		insp, err := Inspect(ctx, "test.wasm", watWasm(t, "abi2"))
		require.NoError(t, err)
		assert.False(t, insp.Accepted)
		assert.ErrorIs(t, insp.Err, ErrABIVersion)
		assert.Contains(t, insp.Reason, "ABI v2")
		require.NotNil(t, insp.Handshake)
		assert.Equal(t, 2, insp.Handshake.ABI)
	})
	t.Run("optional export of the wrong type", func(t *testing.T) {
		insp, err := Inspect(ctx, "test.wasm", watWasm(t, "batch-type"))
		require.NoError(t, err)
		assert.False(t, insp.Accepted)
		assert.ErrorIs(t, insp.Err, ErrMissingExport)
		assert.Contains(t, insp.Reason, "project_batch has signature (i32) -> i32")
		assert.Empty(t, insp.OptionalExports, "only optional exports the host would call are listed")
		assert.Contains(t, insp.Exports, Export{Name: abi.ExportProjectBatch, Kind: "func", Signature: "(i32) -> i32"})
		require.NotNil(t, insp.Handshake)
		assert.Equal(t, "wat-batch-type", insp.Handshake.Name)
	})
	t.Run("no optional export", func(t *testing.T) {
		// Through the tests' compilation cache, which the other hostile
		// tests share: Inspect itself would compile the Go plugin afresh
		// (half a minute under -race).
		insp, err := inspect(ctx, "test.wasm", hostileWasm(t, "hostile"), Options{CacheDir: testCacheDir}, nil)
		require.NoError(t, err)
		assert.True(t, insp.Accepted, insp.Reason)
		assert.NotNil(t, insp.OptionalExports)
		assert.Empty(t, insp.OptionalExports)
	})
	t.Run("missing exports still shakes hands", func(t *testing.T) {
		insp, err := Inspect(ctx, "test.wasm", watWasm(t, "missing-exports"))
		require.NoError(t, err)
		assert.False(t, insp.Accepted)
		assert.ErrorIs(t, insp.Err, ErrMissingExport)
		require.NotNil(t, insp.Handshake)
		assert.Equal(t, "wat-missing-exports", insp.Handshake.Name)
	})
	t.Run("unknown import", func(t *testing.T) {
		insp, err := Inspect(ctx, "test.wasm", watWasm(t, "unknown-import"))
		require.NoError(t, err)
		assert.False(t, insp.Accepted)
		assert.ErrorIs(t, insp.Err, ErrUnknownImport)
		assert.Nil(t, insp.Handshake)
		assert.Contains(t, insp.Imports, Import{Module: "env", Name: "now", Kind: "func", Signature: "() -> i64"})
	})
	t.Run("not wasm", func(t *testing.T) {
		insp, err := Inspect(ctx, "test.wasm", []byte("#!/bin/sh\n"))
		require.NoError(t, err)
		assert.False(t, insp.Accepted)
		assert.ErrorIs(t, insp.Err, ErrNotWasm)
		assert.Equal(t, 10, insp.Size)
		assert.NotEmpty(t, insp.SHA256)
		assert.NotNil(t, insp.Imports)
		assert.NotNil(t, insp.Exports)
	})
	t.Run("cancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := Inspect(cctx, "test.wasm", watWasm(t, "script"))
		require.True(t, errors.Is(err, context.Canceled), "got %v", err)
	})
}

// TestCommittedWasmUpToDate checks each committed .wasm is what build.sh
// produces from the .wat beside it.
func TestCommittedWasmUpToDate(t *testing.T) {
	if _, err := exec.LookPath("wat2wasm"); err != nil {
		t.Skip("wat2wasm is not installed (make tools installs it)")
	}
	wats, err := filepath.Glob(filepath.Join("..", "testplugins", "wat", "*.wat"))
	require.NoError(t, err)
	require.NotEmpty(t, wats)
	for _, wat := range wats {
		out := filepath.Join(t.TempDir(), "out.wasm")
		cmdOut, err := exec.Command("wat2wasm", wat, "-o", out).CombinedOutput()
		require.NoError(t, err, "wat2wasm %s: %s", wat, cmdOut)
		want, err := os.ReadFile(out)
		require.NoError(t, err)
		got, err := os.ReadFile(strings.TrimSuffix(wat, ".wat") + ".wasm")
		require.NoError(t, err, "run testplugins/wat/build.sh")
		assert.True(t, bytes.Equal(want, got), "%s: committed .wasm differs from wat2wasm output; run testplugins/wat/build.sh", wat)
	}
}

// TestGOOSJSImportHint: a Go module built for GOOS=js is told, once, how
// to build it instead.
func TestGOOSJSImportHint(t *testing.T) {
	err := checkImports([]Import{
		{Module: "gojs", Name: "runtime.wasmExit", Kind: "func"},
		{Module: "gojs", Name: "runtime.wasmWrite", Kind: "func"},
	})
	require.ErrorIs(t, err, ErrUnknownImport)
	assert.Contains(t, err.Error(), `module "gojs" function "runtime.wasmExit" (a Go build for GOOS=js: build with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared), module "gojs" function "runtime.wasmWrite" (the host`)
}

// TestNearExportHint: a required export that is missing under its name but
// present misspelt is named, so the author sees the typo.
func TestNearExportHint(t *testing.T) {
	fn := func(name string) Export { return Export{Name: name, Kind: "func", Signature: "() -> i32"} }
	exports := []Export{fn("handshake"), fn("Canonicalize"), fn("projcet"), {Name: "memory", Kind: "memory"}}
	err := checkExports(exports, abi.RequiredExports)
	require.ErrorIs(t, err, ErrMissingExport)
	assert.Equal(t, `missing or mistyped export: missing canonicalize (the module exports "Canonicalize": export names are exact and case-sensitive), `+
		`project (the module exports "projcet": export names are exact and case-sensitive)`, err.Error())

	// Nothing close: the name alone.
	err = checkExports([]Export{fn("handshake"), fn("canonicalize"), fn("project_batch")}, abi.RequiredExports)
	assert.EqualError(t, err, "missing or mistyped export: missing project")

	for _, tt := range []struct {
		a, b string
		want int
	}{{"project", "project", 0}, {"project", "projcet", 2}, {"project", "projects", 1}, {"canonicalize", "canonicalise", 1}, {"project", "handshake", 3}} {
		assert.Equal(t, tt.want, editDistance(tt.a, tt.b, 2), "%s %s", tt.a, tt.b)
	}
}

// TestAbortImportHint: an AssemblyScript module built without replacing
// its abort handler is told how to fix it.
func TestAbortImportHint(t *testing.T) {
	err := checkImports([]Import{{Module: "env", Name: "abort", Kind: "func"}, {Module: "env", Name: "seed", Kind: "func"}})
	require.ErrorIs(t, err, ErrUnknownImport)
	assert.Contains(t, err.Error(), `module "env" function "abort" (AssemblyScript: build with --use abort=`)
	assert.Contains(t, err.Error(), `module "env" function "seed" (the host provides only`)
}
