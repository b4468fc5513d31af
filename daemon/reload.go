package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/internal/telemetry"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
)

// Errors a reload, or Run at start-up, reports, wrapped with the details.
var (
	// ErrConfigInvalid: the config file could not be read or is invalid;
	// nothing was changed (a reload) or started (Run).
	ErrConfigInvalid = errors.New("config refused")
	// ErrPolicyRefused: the (changed) policy plugin could not be read or
	// failed to load or its checks; nothing was changed and the old plugin
	// keeps running (a reload), or nothing was started (Run). The error
	// names the config file and the JSON path of the policy setting at
	// fault, e.g. "wasmhost.json: policy.path: ...".
	ErrPolicyRefused = errors.New("policy plugin refused")
	// ErrNotReady: the daemon is still starting (its first config is being
	// applied); nothing was changed. Try again once it serves.
	ErrNotReady = errors.New("the daemon is still starting")
)

// A ReloadResult reports one reload.
type ReloadResult struct {
	// Trigger says what started it: "watch", "SIGHUP", "admin", ...
	Trigger string    `json:"trigger"`
	At      time.Time `json:"at"`
	// OK is false when the reload was refused (Error says why) or some
	// bindings failed (Error lists them; the rest was applied).
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Applied is false when nothing was touched (a refused reload).
	Applied bool `json:"applied"`
	// Summary is the one-line human summary that was logged.
	Summary string `json:"summary"`
	// Changed lists the sessions whose view changed.
	Changed []string `json:"changed,omitempty"`
	// TransportChanges lists, by server, the changed transports of servers
	// that had live connections: each is made before break, and one whose
	// new connection could not be made is listed with Kept > 0 and its
	// Error (the sessions keep the running connection; see
	// reconcile.TransportChange).
	TransportChanges []TransportChangeResult `json:"transportChanges,omitempty"`
	ClientsNotified  int                     `json:"clientsNotified"`
	PolicySwapped    bool                    `json:"policySwapped"`
	// Warnings are the config's warnings (unknown keys, ...), each with its
	// JSON path, whether or not the reload was applied.
	Warnings []string `json:"warnings,omitempty"`
}

// A TransportChangeResult reports one server whose transport a reload
// changed for sessions that held a connection to it.
type TransportChangeResult struct {
	Server string `json:"server"`
	// Moved counts the sessions moved to the new connection.
	Moved int `json:"moved"`
	// Kept counts the sessions left on the running connection because the
	// new one could not be made; Error says why. The next reload tries
	// the change again.
	Kept  int    `json:"kept,omitempty"`
	Error string `json:"error,omitempty"`
}

// transportChanges turns cs into their results.
func transportChanges(cs []reconcile.TransportChange) []TransportChangeResult {
	var out []TransportChangeResult
	for _, c := range cs {
		r := TransportChangeResult{Server: c.Server, Moved: c.Moved, Kept: c.Kept}
		if c.Err != nil {
			r.Error = c.Err.Error()
		}
		out = append(out, r)
	}
	return out
}

// Reload reloads the config file now (the debounce is skipped) and returns
// what happened. The error wraps ErrConfigInvalid or ErrPolicyRefused when
// nothing was changed, or joins the failed bindings when the rest was
// applied; before Run serves it returns ErrNotReady and no result.
func (d *Daemon) Reload(ctx context.Context, trigger string) (*ReloadResult, error) {
	select {
	case <-d.ready:
	default:
		return nil, fmt.Errorf("daemon: reload: %w", ErrNotReady)
	}
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	ctx, endSpan := telemetry.Reload(ctx, trigger)
	res, err := d.reload(ctx, trigger)
	endSpan(err)
	d.mu.Lock()
	d.lastReload = res
	if res != nil {
		d.reloads = append(d.reloads, res)
		if len(d.reloads) > maxReloads {
			d.reloads = slices.Delete(d.reloads, 0, len(d.reloads)-maxReloads)
		}
	}
	d.mu.Unlock()
	return res, err
}

// maxReloads is how many reloads the daemon remembers (State.Reloads).
const maxReloads = 20

// reload does one reload. d.reloadMu is held.
func (d *Daemon) reload(ctx context.Context, trigger string) (*ReloadResult, error) {
	res := &ReloadResult{Trigger: trigger, At: time.Now()}
	read := make(map[string]string) // the files the reload reads, by what they are
	refuse := func(kind error, err error) (*ReloadResult, error) {
		d.setRefusedFiles(read)
		err = fmt.Errorf("%w: %w", kind, err)
		res.Error = err.Error()
		res.Summary = "reload refused, the running config keeps serving: " + err.Error()
		d.log.Error(res.Summary, "trigger", trigger)
		d.metrics.reloads.WithLabelValues(reloadLabel(kind)).Inc()
		return res, err
	}

	// Warnings come with errors too (an unknown key may be the typo behind
	// them), so they are logged first, whatever the outcome. The policy
	// block is read first: the plugin it names decides which settings keys
	// the rest may hold (loadConfigPolicy). A changed policy (its plugin,
	// limits or config) is loaded and checked before anything is touched.
	ld, kind, err := d.loadConfigPolicy(ctx, read, d.policy.Load())
	d.logWarnings(ld.warnings)
	for _, w := range ld.warnings {
		res.Warnings = append(res.Warnings, w.String())
	}
	if err != nil {
		if kind == ErrPolicyRefused {
			d.metrics.swaps.WithLabelValues("refused").Inc()
		}
		return refuse(kind, err)
	}
	cfg, next := ld.cfg, ld.next
	if next != nil {
		if err := d.overlayKeysDropped(cfg, next); err != nil {
			_ = next.close(context.Background())
			d.metrics.swaps.WithLabelValues("refused").Inc()
			return refuse(ErrPolicyRefused, d.policyError(cfg.Policy, err))
		}
	}
	d.secrets.AddConfig(ld.full)
	d.hideTokenEnvs(ld.full)

	// A command that cannot start is refused before anything is touched.
	cmdWarnings, err := d.checkCommands(cfg)
	for _, w := range cmdWarnings {
		d.log.Warn("config: " + w)
	}
	res.Warnings = append(res.Warnings, cmdWarnings...)
	if err != nil {
		_ = next.close(context.Background())
		return refuse(ErrConfigInvalid, err)
	}

	// Settings the policy would refuse fail their views closed: a
	// reload bringing them is refused before anything is touched, and so
	// is a plugin refusing settings that the running one accepts.
	if next != nil {
		if err := d.rec.Check(ctx, cfg, next.policy); err != nil {
			_ = next.close(context.Background())
			d.metrics.swaps.WithLabelValues("refused").Inc()
			what := "the new plugin failed on the settings or snapshots in use"
			if errors.Is(err, reconcile.ErrSettingsRefused) {
				what = "the new plugin refuses settings or projections in use"
			}
			return refuse(ErrPolicyRefused, d.policyError(cfg.Policy, fmt.Errorf("%s:\n%w", what, err)))
		}
	} else if err := d.rec.Check(ctx, cfg, nil); errors.Is(err, reconcile.ErrSettingsRefused) {
		return refuse(ErrConfigInvalid, fmt.Errorf("%s: %w", d.file, err))
	} else if err != nil {
		// The running policy failed the call itself: the views will find
		// out as they apply the config, as without the check.
		d.log.Warn("checking the new settings with the running policy failed; the reload goes on", "config", d.file, "err", err)
	}

	// Validated: apply.
	if cfg.Listen != d.listenAt && d.opts.Stdio == nil {
		d.log.Warn("config: listen changed; restart the daemon to apply it", "running", d.listenAt, "file", cfg.Listen)
	}
	if (cfg.Admin == nil) != (d.admin == nil) && d.opts.Stdio == nil {
		d.log.Warn("config: the admin block was added or removed; restart the daemon to apply it")
	}
	d.mu.Lock()
	d.cfg = cfg
	if cfg.Admin != nil && d.admin != nil {
		d.admin = cfg.Admin // a changed admin token applies at once
	}
	d.mu.Unlock()
	d.setRefusedFiles(nil) // and its policy and token files may have moved

	var total reconcile.Summary
	var errs []error
	policyNote := "policy unchanged"
	var old *loadedPolicy
	if next != nil {
		// Each view goes from its settings under the old plugin to the
		// new config's under the new one: never the old settings under
		// the new plugin, which may read them otherwise. The views the
		// config drops keep the old plugin until Apply releases them.
		old = d.policy.Load()
		sum, err := d.rec.SetPolicyFor(ctx, next.policy, cfg)
		d.policy.Store(next)
		res.PolicySwapped = true
		policyNote = "policy swapped to " + next.describe()
		merge(&total, sum)
		if err != nil {
			errs = append(errs, err)
		}
		d.metrics.swaps.WithLabelValues("ok").Inc()
	}
	d.applyNaming(cfg)
	sum, err := d.rec.Apply(ctx, cfg)
	d.pruneOverlays(cfg)
	merge(&total, sum)
	if err != nil {
		errs = append(errs, err)
	}
	if err := old.close(ctx); err != nil {
		d.log.Warn("closing the old policy plugin", "err", err)
	}
	d.syncEndpoints(cfg)

	res.Applied = true
	res.Changed = total.Changed
	res.TransportChanges = transportChanges(total.TransportChanges)
	res.ClientsNotified = d.clientsNotified(total)
	res.Summary = "reload (" + trigger + "): " + describeSummary(total, res.ClientsNotified, policyNote)
	joined := errors.Join(errs...)
	if joined != nil {
		res.Error = joined.Error()
		d.log.Warn(res.Summary, "config", d.file, "err", joined)
		d.metrics.reloads.WithLabelValues("partial").Inc()
		return res, joined
	}
	res.OK = true
	d.log.Info(res.Summary, "config", d.file)
	d.metrics.reloads.WithLabelValues("ok").Inc()
	return res, nil
}

// checkCommands refuses a changed server whose new command cannot be
// started (the command, or the directory it would run in, is missing):
// the reconciler would keep the running connection (it makes a changed
// transport before it breaks the old one), but a command that is not
// there is a mistake the operator should hear of, located in the file,
// before anything is touched. A server
// the running config does not have (every server, at start-up) is left to
// start and retry, since it has no connection to lose and its command may
// yet be installed; when a session uses it, it gets a warning located
// like the config's own, as the pool's error names neither the file nor
// the setting.
func (d *Daemon) checkCommands(cfg *config.Config) (warnings []string, err error) {
	running := d.runningConfig()
	var errs []error
	for _, name := range cfg.ServerNames() {
		srv := cfg.Servers[name]
		if srv.Command == "" {
			continue
		}
		spec := reconcile.SpecOf(srv)
		var old *config.Server
		if running != nil {
			old = running.Servers[name]
		}
		added := old == nil
		if added && !usedBy(cfg, name) || !added && spec.Fingerprint() == reconcile.SpecOf(old).Fingerprint() {
			continue
		}
		cerr := spec.CheckCommand()
		if cerr == nil {
			continue
		}
		where := fmt.Sprintf("%s: %s: server %q cannot start", d.file, config.JoinPath("mcpServers", name, pool.CommandField(cerr)), name)
		if added {
			warnings = append(warnings, fmt.Sprintf("%s; its sessions retry it with backoff: %v", where, cerr))
		} else {
			errs = append(errs, fmt.Errorf("%s, and its running connection keeps serving: %w", where, cerr))
		}
	}
	return warnings, errors.Join(errs...)
}

// usedBy reports whether a session of cfg uses server (see
// config.Session.Effective).
func usedBy(cfg *config.Config, server string) bool {
	for _, sess := range cfg.Sessions {
		if _, enabled := sess.EffectiveSettings(server); enabled {
			return true
		}
	}
	return false
}

func reloadLabel(kind error) string {
	if errors.Is(kind, ErrPolicyRefused) {
		return "policy_refused"
	}
	return "invalid"
}

// merge adds b's counts to a and unions the changed sessions.
func merge(a *reconcile.Summary, b reconcile.Summary) {
	// Sets, not searches of the lists: a reload can change every session
	// and fail every binding of thousands.
	changed := make(map[string]bool, len(a.Changed)+len(b.Changed))
	for _, s := range a.Changed {
		changed[s] = true
	}
	for _, s := range b.Changed {
		if !changed[s] {
			changed[s] = true
			a.Changed = append(a.Changed, s)
		}
	}
	slices.Sort(a.Changed)
	a.TransportsReused = b.TransportsReused // the last call's view (Apply comes last)
	a.TransportsStarted += b.TransportsStarted
	a.TransportsStopped += b.TransportsStopped
	a.Acquired += b.Acquired
	a.Released += b.Released
	a.Refreshed += b.Refreshed
	a.Replayed += b.Replayed
	a.RegistryOps += b.RegistryOps
	a.TransportChanges = append(a.TransportChanges, b.TransportChanges...) // SetPolicy makes none
	// A binding that failed in both calls (the swap, then the apply) is
	// counted once, with its latest error.
	type binding struct{ session, server string }
	at := make(map[binding]int, len(a.Errors)+len(b.Errors)) // index in a.Errors
	for i, e := range a.Errors {
		if _, seen := at[binding{e.Session, e.Server}]; !seen {
			at[binding{e.Session, e.Server}] = i
		}
	}
	for _, e := range b.Errors {
		k := binding{e.Session, e.Server}
		if i, ok := at[k]; ok {
			a.Errors[i] = e
		} else {
			at[k] = len(a.Errors)
			a.Errors = append(a.Errors, e)
		}
	}
}

// describeSummary is the one human line a reload (or start-up) logs.
func describeSummary(s reconcile.Summary, clients int, policyNote string) string {
	changed := "no session changed"
	switch len(s.Changed) {
	case 0:
	case 1:
		changed = "1 session changed (" + s.Changed[0] + ")"
	default:
		changed = fmt.Sprintf("%d sessions changed (%s)", len(s.Changed), strings.Join(s.Changed, ", "))
	}
	line := fmt.Sprintf("%s; transports %d reused, %d started, %d stopped; %d %s replayed; %d %s notified; %s",
		changed, s.TransportsReused, s.TransportsStarted, s.TransportsStopped,
		s.Replayed, plural(s.Replayed, "view", "views"), clients, plural(clients, "client", "clients"), policyNote)
	if n := len(s.Errors); n > 0 {
		line += fmt.Sprintf("; %d %s", n, plural(n, "binding failed", "bindings failed"))
	}
	for _, c := range s.TransportChanges {
		line += "; " + c.String()
	}
	return line
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// requestReload asks the debounce loop for a reload.
func (d *Daemon) requestReload(source string) {
	select {
	case d.trigger <- source:
	default: // one is pending already
	}
}

// debounceLoop turns bursts of triggers into one reload, Debounce after
// the last trigger of the burst.
func (d *Daemon) debounceLoop(ctx context.Context) {
	var timer *time.Timer
	var fire <-chan time.Time
	var sources []string
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case s := <-d.trigger:
			if !slices.Contains(sources, s) {
				sources = append(sources, s)
			}
			if timer == nil {
				timer = time.NewTimer(d.opts.Debounce)
			} else {
				timer.Reset(d.opts.Debounce)
			}
			fire = timer.C
		case <-fire:
			fire = nil
			trigger := strings.Join(sources, "+")
			sources = nil
			_, _ = d.Reload(ctx, trigger)
		}
	}
}

// setRefusedFiles records the files a refused reload read (nil: the reload
// applied) and tells the watcher to watch what it now depends on.
func (d *Daemon) setRefusedFiles(files map[string]string) {
	d.mu.Lock()
	d.refusedFiles = files
	d.mu.Unlock()
	select {
	case d.retarget <- struct{}{}:
	default: // one is pending already
	}
}
