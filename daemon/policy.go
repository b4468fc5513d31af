package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/host"
	"github.com/wasmhost/wasmhost/internal/telemetry"
	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"
	"github.com/wasmhost/wasmhost/view"
)

// A policySource is everything that decides which plugin runs and how: a
// change of any field means loading a new plugin.
type policySource struct {
	config.Policy        // the config's plugin path, pin, limits and config
	digest        string // SHA-256 of the wasm bytes
}

// same reports whether s and o would load the same plugin the same way: a
// change of the plugin's configuration alone is a swap too.
func (s policySource) same(o policySource) bool {
	return s.digest == o.digest && s.Policy.Equal(o.Policy)
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

// readPolicy reads the plugin bytes pol names and returns them with their
// source description.
func readPolicy(pol config.Policy) (name string, wasm []byte, src policySource, err error) {
	src = policySource{Policy: pol}
	if src.Path == "" {
		// The embedded plugin's digest is known (its package's test
		// checks it): hashing its megabytes again on every reload would
		// be a fixed cost of each, whatever it changed.
		src.digest = policydefault.SHA256
		return policydefault.Name, policydefault.Wasm, src, nil
	}
	name = src.Path
	if wasm, err = os.ReadFile(src.Path); err != nil {
		return "", nil, src, fmt.Errorf("plugin %q: %w", src.Path, err)
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

// loadPolicyBytes loads and checks a plugin: the host checks the pin, the
// imports and exports and the handshake (given src's config); then a
// the trial calls (view.CheckPolicy) canonicalize {} and project a tiny snapshot.
func (d *Daemon) loadPolicyBytes(ctx context.Context, name string, wasm []byte, src policySource) (*loadedPolicy, error) {
	start := time.Now()
	p, err := host.Load(ctx, name, wasm, host.Options{
		MemoryLimitBytes: src.MemoryLimitBytes(),
		CallTimeout:      src.Timeout,
		CompileTimeout:   src.CompileTimeout,
		PinSHA256:        src.SHA256,
		CacheDir:         d.opts.CacheDir,
		Logger:           d.log.With("component", "plugin"),
		Config:           string(src.Config),
	})
	if err != nil {
		return nil, err
	}
	timed := &timedPolicy{Plugin: p, m: d.metrics}
	if err := view.CheckPolicy(ctx, timed); err != nil {
		_ = p.Close(context.Background())
		return nil, fmt.Errorf("plugin %q: %w", name, err)
	}
	d.log.Debug("policy plugin loaded", "plugin", name, "took", time.Since(start))
	return &loadedPolicy{src: src, policy: timed}, nil
}

// A configLoad is what loadConfigPolicy found: the config, its warnings,
// and the plugin it names when that is not the running one.
type configLoad struct {
	// cfg is the config to serve; full is the whole file, which differs
	// in stdio mode only (see scope).
	cfg, full *config.Config
	warnings  []config.Warning
	// next is the plugin the config names, loaded and checked, when the
	// running one (if any) is not it; the caller owns it.
	next *loadedPolicy
}

// loadConfigPolicy reads the config file and the policy plugin it names,
// in the order the plugin's own settings keys need (abi/SPEC.md section
// 3): the policy block first (config.PeekPolicy); then the plugin it
// names, loaded unless running is it; then the whole file, with the
// settings keys that plugin declares. read collects the files read. On
// error, kind is ErrConfigInvalid or ErrPolicyRefused and no plugin is
// left loaded. A plugin that no longer declares a key that a session
// uses is refused (ErrPolicyRefused), naming the sessions. In stdio mode,
// a config without its session is refused too (see scope).
func (d *Daemon) loadConfigPolicy(ctx context.Context, read map[string]string, running *loadedPolicy) (_ *configLoad, kind, err error) {
	out, kind, err := d.loadConfigPolicyAll(ctx, read, running)
	if serr := d.scope(out); serr != nil && err == nil {
		_ = out.next.close(context.Background())
		out.next = nil
		return out, ErrConfigInvalid, serr
	}
	return out, kind, err
}

// loadConfigPolicyAll is loadConfigPolicy of the whole file.
func (d *Daemon) loadConfigPolicyAll(ctx context.Context, read map[string]string, running *loadedPolicy) (_ *configLoad, kind, err error) {
	out := &configLoad{}
	data := d.opts.ConfigData
	if data == nil {
		if data, err = os.ReadFile(d.file); err != nil {
			return out, ErrConfigInvalid, fmt.Errorf("config: %w", err)
		}
	}
	opts := config.Options{ReadFile: func(name string) ([]byte, error) {
		if read != nil {
			read[name] = "token file"
		}
		return os.ReadFile(name)
	}}
	pol, err := config.PeekPolicy(d.file, data)
	if err != nil {
		// The whole file, for every problem and warning it has. The
		// plugin a refused policy block names is not loaded, so its own
		// settings keys cannot be told from unknown ones.
		opts.ServerKeysUnknown = namesPlugin(data)
		_, ws, perr := config.ParseWith(d.file, data, opts)
		out.warnings = ws
		if perr == nil {
			perr = err
		}
		return out, ErrConfigInvalid, perr
	}
	if pol.Path != "" && read != nil {
		read[pol.Path] = "policy"
	}
	name, wasm, src, err := readPolicy(pol)
	if err != nil {
		return out, ErrPolicyRefused, d.policyError(pol, err)
	}
	active := running
	if running == nil || !src.same(running.src) {
		if out.next, err = d.loadPolicyBytes(ctx, name, wasm, src); err != nil {
			return out, ErrPolicyRefused, d.policyError(pol, err)
		}
		active = out.next
	}
	hs := active.policy.Handshake()
	opts.ServerKeys = hs.SettingsKeys
	opts.ServerKeysOwner = fmt.Sprintf("policy plugin %q", hs.Name)
	out.cfg, out.warnings, err = config.ParseWith(d.file, data, opts)
	if err == nil {
		return out, nil, nil
	}
	if out.next != nil && running != nil {
		if why := droppedKeysInUse(d.file, data, running, out.next); why != nil {
			_ = out.next.close(context.Background())
			out.next = nil
			return out, ErrPolicyRefused, d.policyError(pol, why)
		}
	}
	_ = out.next.close(context.Background())
	out.next = nil
	return out, ErrConfigInvalid, err
}

// namesPlugin reports whether the config file contents data have a policy
// block with a "path", read leniently: the block may be refused.
func namesPlugin(data []byte) bool {
	var raw struct {
		Policy struct {
			Path json.RawMessage `json:"path"`
		} `json:"policy"`
	}
	return json.Unmarshal(data, &raw) == nil && len(raw.Policy.Path) > 0 && string(raw.Policy.Path) != "null"
}

// droppedKeysInUse reports, for a config (data) that the plugin next
// refuses, the settings keys the running plugin declares and next does
// not that sessions use, naming the sessions; nil when there are none
// (the config is then wrong for another reason).
func droppedKeysInUse(file string, data []byte, running, next *loadedPolicy) error {
	have := next.policy.Handshake().SettingsKeys
	var dropped []string
	for _, k := range running.policy.Handshake().SettingsKeys {
		if !slices.Contains(have, k) {
			dropped = append(dropped, k)
		}
	}
	if len(dropped) == 0 {
		return nil
	}
	cfg, _, err := config.ParseWith(file, data, config.Options{ServerKeys: append(slices.Clone(have), dropped...)})
	if err != nil {
		return nil
	}
	users := make(map[string][]string) // key -> sessions
	for _, sname := range cfg.SessionNames() {
		sess := cfg.Sessions[sname]
		for _, server := range sess.Enabled() {
			srv, _, _ := sess.Effective(server)
			for _, k := range dropped {
				if _, ok := srv.Settings.Extra[k]; ok && !slices.Contains(users[k], sname) {
					users[k] = append(users[k], sname)
				}
			}
		}
	}
	var errs []error
	for _, k := range dropped {
		if len(users[k]) > 0 {
			errs = append(errs, fmt.Errorf("plugin %q does not declare the settings key %q, which the running plugin %q declares and sessions %s use",
				next.policy.Handshake().Name, k, running.policy.Handshake().Name, strings.Join(users[k], ", ")))
		}
	}
	return errors.Join(errs...)
}

// A timedPolicy records each call's duration in the metrics, and a span
// when traces are on (telemetry.Policy; a batch call is one span, with its
// item count). It forwards
// Handshake, so views see the plugin's wants, and ProjectBatch, so the
// reconciler projects a reload's views in batches.
type timedPolicy struct {
	*host.Plugin
	m *metrics
}

var _ abi.BatchProjector = (*timedPolicy)(nil)

func (t *timedPolicy) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	ctx, end := telemetry.Policy(ctx, t.Handshake().Name, abi.ExportCanonicalize, 0)
	start := time.Now()
	resp, err := t.Plugin.Canonicalize(ctx, req)
	t.m.observePolicy(abi.ExportCanonicalize, time.Since(start), err)
	end(err)
	return resp, err
}

func (t *timedPolicy) Project(ctx context.Context, req *abi.ProjectRequest) (*abi.ProjectResponse, error) {
	ctx, end := telemetry.Policy(ctx, t.Handshake().Name, abi.ExportProject, 0)
	start := time.Now()
	resp, err := t.Plugin.Project(ctx, req)
	t.m.observePolicy(abi.ExportProject, time.Since(start), err)
	end(err)
	return resp, err
}

func (t *timedPolicy) ProjectBatch(ctx context.Context, req *abi.ProjectBatchRequest) (*abi.ProjectBatchResponse, error) {
	ctx, end := telemetry.Policy(ctx, t.Handshake().Name, abi.ExportProjectBatch, len(req.Items))
	start := time.Now()
	resp, err := t.Plugin.ProjectBatch(ctx, req)
	t.m.observePolicy(abi.ExportProjectBatch, time.Since(start), err)
	end(err)
	return resp, err
}
