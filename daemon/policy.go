package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/host"
	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"
	"github.com/wasmhost/wasmhost/view"
)

// A policySource is everything that decides which plugin runs and how: a
// change of any field means loading a new plugin.
type policySource struct {
	config.Policy        // the config's plugin path, pin and limits
	digest        string // SHA-256 of the wasm bytes
}

// A loadedPolicy is a checked plugin, instrumented as the views use it.
type loadedPolicy struct {
	src    policySource
	policy *timedPolicy
}

func (p *loadedPolicy) close(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.policy.Close(ctx)
}

// describe names the plugin for logs, e.g. `policy-default 1.0.0
// (embedded:policy-default, sha256 ab12cd34…)`.
func (p *loadedPolicy) describe() string {
	hs := p.policy.Handshake()
	return fmt.Sprintf("%s %s (%s, sha256 %.12s…)", hs.Name, hs.Version, p.policy.Name(), p.policy.Digest())
}

// readPolicy reads the plugin bytes cfg names and returns them with their
// source description.
func readPolicy(cfg *config.Config) (name string, wasm []byte, src policySource, err error) {
	src = policySource{Policy: cfg.Policy}
	if src.Path == "" {
		name, wasm = host.DefaultName, policydefault.Wasm
	} else {
		name = src.Path
		if wasm, err = os.ReadFile(src.Path); err != nil {
			return "", nil, src, fmt.Errorf("plugin %q: %w", src.Path, err)
		}
	}
	sum := sha256.Sum256(wasm)
	src.digest = hex.EncodeToString(sum[:])
	return name, wasm, src, nil
}

// policyError locates err, a policy plugin that could not be read or was
// refused, in the config file (see PolicyError).
func (d *Daemon) policyError(p config.Policy, err error) error {
	return PolicyError(d.file, p, err)
}

// PolicyError locates err, the policy plugin that the config file file
// names (p) could not be read or was refused, the way config errors are
// located: "file: policy.path: ..." (see PolicyField). An error that is
// not the config's doing, a compilation cache directory that cannot be
// used (host.ErrCacheDir, Options.CacheDir), is returned as it is, so that
// it does not send the operator to a config setting. The daemon and stdio
// mode report load errors with it.
func PolicyError(file string, p config.Policy, err error) error {
	if errors.Is(err, host.ErrCacheDir) {
		return err
	}
	return fmt.Errorf("%s: %s: %w", file, PolicyField(p, err), err)
}

// PolicyField is the config setting at fault when the policy plugin p names
// could not be read or was refused (err): policy.sha256 for a digest that
// does not match the pin, policy.memoryMiB for a plugin that needs more
// memory than allowed, policy.path for a plugin file, and "policy" for the
// embedded default plugin. The daemon and stdio mode name it in their
// errors.
func PolicyField(p config.Policy, err error) string {
	switch {
	case errors.Is(err, host.ErrDigestMismatch):
		return "policy.sha256"
	case errors.Is(err, host.ErrMemoryLimit):
		return "policy.memoryMiB"
	case p.Path != "":
		return "policy.path"
	}
	return "policy"
}

// loadPolicy loads and checks the plugin cfg names: the host checks the
// pin, the imports and exports and the handshake; then a smoke run
// (view.Smoke) canonicalizes {} and projects a tiny snapshot.
func (d *Daemon) loadPolicy(ctx context.Context, cfg *config.Config) (*loadedPolicy, error) {
	name, wasm, src, err := readPolicy(cfg)
	if err != nil {
		return nil, err
	}
	return d.loadPolicyBytes(ctx, name, wasm, src)
}

func (d *Daemon) loadPolicyBytes(ctx context.Context, name string, wasm []byte, src policySource) (*loadedPolicy, error) {
	start := time.Now()
	p, err := host.Load(ctx, name, wasm, host.Options{
		MemoryLimitBytes: src.MemoryLimitBytes(),
		CallTimeout:      src.Timeout,
		CompileTimeout:   src.CompileTimeout,
		PinSHA256:        src.SHA256,
		CacheDir:         d.opts.CacheDir,
		Logger:           d.log.With("component", "plugin"),
	})
	if err != nil {
		return nil, err
	}
	timed := &timedPolicy{Plugin: p, m: d.metrics}
	if err := view.Smoke(ctx, timed); err != nil {
		_ = p.Close(context.Background())
		return nil, fmt.Errorf("plugin %q: %w", name, err)
	}
	d.log.Debug("policy plugin loaded", "plugin", name, "took", time.Since(start))
	return &loadedPolicy{src: src, policy: timed}, nil
}

// A timedPolicy records each call's duration in the metrics. It forwards
// Handshake, so views see the plugin's wants, and ProjectBatch, so the
// reconciler projects a reload's views in batches.
type timedPolicy struct {
	*host.Plugin
	m *metrics
}

var _ abi.BatchProjector = (*timedPolicy)(nil)

func (t *timedPolicy) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	start := time.Now()
	resp, err := t.Plugin.Canonicalize(ctx, req)
	t.m.observePolicy(abi.ExportCanonicalize, time.Since(start), err)
	return resp, err
}

func (t *timedPolicy) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	start := time.Now()
	resp, err := t.Plugin.Project(ctx, req)
	t.m.observePolicy(abi.ExportProject, time.Since(start), err)
	return resp, err
}

func (t *timedPolicy) ProjectBatch(ctx context.Context, req *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error) {
	start := time.Now()
	resp, err := t.Plugin.ProjectBatch(ctx, req)
	t.m.observePolicy(abi.ExportProjectBatch, time.Since(start), err)
	return resp, err
}
