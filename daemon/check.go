package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/view"
)

// A CheckResult is what Check found in a config file.
type CheckResult struct {
	// Errors are the problems that would keep Run from starting, or a
	// reload from applying, one line each, each naming the config file and
	// the JSON path at fault: "wasmhost.json: mcpServers.fs.includeTool:
	// unknown key; did you mean "includeTools"?".
	Errors []string
	// Warnings are the config's warnings, and servers whose command
	// cannot start here (Run starts and retries them), one line each.
	Warnings []string
}

// OK reports whether the check found no error.
func (r *CheckResult) OK() bool { return len(r.Errors) == 0 }

// Check validates the config file at opts.ConfigPath as Run does before it
// serves, without serving or starting any upstream: it loads the file
// (every problem is an error, unknown keys included), checks the listen
// address (Options.AllowRemote as for Run), loads the policy plugin with
// the host's checks and the daemon's trial calls (view.CheckPolicy), and asks
// the plugin for the key of every (session, server) binding's settings,
// with the reconciler's own check that a reload makes
// (reconcile.Reconciler.Check). It returns an error only when ctx ends.
func (d *Daemon) Check(ctx context.Context) (*CheckResult, error) {
	res := &CheckResult{}
	addErr := func(err error) { res.Errors = append(res.Errors, errLines(err)...) }
	ld, _, err := d.loadConfigPolicy(ctx, nil, nil)
	for _, w := range ld.warnings {
		res.Warnings = append(res.Warnings, w.String())
	}
	if err != nil {
		addErr(err)
		return res, ctx.Err()
	}
	cfg, pol := ld.cfg, ld.next
	defer func() { _ = pol.close(context.Background()) }()
	d.secrets.AddConfig(cfg)
	cmdWarnings, _ := d.checkCommands(cfg) // d.cfg is nil: each server is new, a warning at most
	res.Warnings = append(res.Warnings, cmdWarnings...)
	if err := checkListen(cfg.Listen, d.opts.AllowRemote); err != nil {
		addErr(fmt.Errorf("%s: listen: %q: %w", d.file, cfg.Listen, err))
	}

	// The trial calls a reload makes: the reconciler asks the plugin for
	// the keys of the settings of every binding the config makes. It has
	// no binding, so nothing is dialled.
	p := pool.New(pool.Options{
		Dialer: func(context.Context, pool.Spec) (mcp.Transport, error) {
			return nil, errors.New("wasmhost check does not connect")
		},
		Logger: d.log,
	})
	defer func() { _ = p.Close(context.Background()) }()
	rec := reconcile.New(reconcile.Options{
		Pool:     p,
		Policy:   pol.policy,
		Registry: func(string) view.Registry { return nopRegistry{} },
		Logger:   d.log,
	})
	if err := rec.Check(ctx, cfg, pol.policy); err != nil {
		if errors.Is(err, reconcile.ErrSettingsRefused) {
			addErr(prefixLines(d.file+": ", err))
		} else {
			addErr(d.policyError(cfg.Policy, fmt.Errorf("the plugin failed on the settings in use: %w", err)))
		}
	}
	return res, ctx.Err()
}

// errLines returns err's message, one line per line.
func errLines(err error) []string {
	var out []string
	for _, line := range strings.Split(err.Error(), "\n") {
		if line != "" {
			out = append(out, line)
		}
	}
	return out
}

// prefixLines returns err with prefix before each line of its message.
func prefixLines(prefix string, err error) error {
	return errors.New(prefix + strings.ReplaceAll(err.Error(), "\n", "\n"+prefix))
}

// A nopRegistry is the registry of a reconciler that applies no config
// (Check): no view ever calls it.
type nopRegistry struct{}

func (nopRegistry) PutTools(string, []*mcp.Tool)         {}
func (nopRegistry) DeleteTools(string, []string)         {}
func (nopRegistry) PutPrompts(string, []*mcp.Prompt)     {}
func (nopRegistry) DeletePrompts(string, []string)       {}
func (nopRegistry) PutResources(string, []*mcp.Resource) {}
func (nopRegistry) DeleteResources(string, []string)     {}
