package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
)

// readAdminBody reads an admin request's body, at most maxAdminBody bytes;
// it answers the request and returns false when it cannot.
func (d *Daemon) readAdminBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxAdminBody+1))
	switch {
	case err != nil:
		d.writeJSON(w, http.StatusBadRequest, errorBody{Error: "request body unreadable: " + err.Error()})
		return nil, false
	case len(body) > maxAdminBody:
		d.writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{Error: "request body larger than 1 MiB"})
		return nil, false
	}
	return body, true
}

// overlayTarget answers 404 and returns false when the running config has
// no session sessionName or no server named server: an overlay changes
// a configured server for a configured session (and may enable it for a
// session that does not list it: the overlay is the whole entry), it does
// not add a server to the config (a misspelt server name would otherwise
// start a new binding beside the one meant). d.reloadMu is held.
func (d *Daemon) overlayTarget(w http.ResponseWriter, sessionName, server string) bool {
	cfg := d.runningConfig()
	var msg string
	switch {
	case cfg == nil:
		msg = "the daemon has no config yet"
	case cfg.Sessions[sessionName] == nil:
		msg = "no session named " + strconv.Quote(sessionName) + " in " + d.file
	case cfg.Servers[server] == nil:
		msg = "no server named " + strconv.Quote(server) + " in " + d.file + " (mcpServers); an overlay changes a configured server"
	default:
		return true
	}
	d.writeJSON(w, http.StatusNotFound, errorBody{Error: msg})
	return false
}

// servePatchOverlay applies the body, a JSON merge patch (RFC 7386), to
// the entry the session has now for the server (its overlay, or else the
// file's entry with the session's override applied) and puts the result
// as the session's overlay, with the validation a PUT has.
func (d *Daemon) servePatchOverlay(w http.ResponseWriter, r *http.Request) {
	sessionName, server := r.PathValue("session"), r.PathValue("server")
	body, ok := d.readAdminBody(w, r)
	if !ok {
		return
	}
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	if !d.overlayTarget(w, sessionName, server) {
		return
	}
	if !json.Valid(body) {
		// parseServerEntry locates a syntax error by line and column.
		_, _, err := d.parseServerEntry(server, body)
		d.writeJSON(w, http.StatusBadRequest, errorBody{Error: err.Error()})
		return
	}
	merged, err := config.MergePatch(d.overlayBase(sessionName, server), body)
	if err != nil {
		d.writeJSON(w, http.StatusBadRequest, errorBody{Error: "request body: " + err.Error()})
		return
	}
	d.putOverlay(w, "patch", sessionName, server, merged)
}

// overlayBase returns the entry a PATCH applies to: the session's overlay
// for server if it has one, else the running config's entry as the
// session sees it (its override applied). d.reloadMu is held.
func (d *Daemon) overlayBase(sessionName, server string) []byte {
	if srv := d.overlays[sessionName][server]; srv != nil {
		return srv.Entry()
	}
	cfg := d.runningConfig()
	srv, _, _ := cfg.Sessions[sessionName].Effective(server)
	return srv.Entry()
}

// keepOverlay records srv as the overlay PutOverlay put for sessionName,
// which it did unless err says it refused it. d.reloadMu is held.
func (d *Daemon) keepOverlay(sessionName string, srv *config.Server, err error) {
	if errors.Is(err, reconcile.ErrUnknownSession) || errors.Is(err, pool.ErrInvalidSpec) || errors.Is(err, reconcile.ErrClosed) {
		return
	}
	if d.overlays == nil {
		d.overlays = make(map[string]map[string]*config.Server)
	}
	if d.overlays[sessionName] == nil {
		d.overlays[sessionName] = make(map[string]*config.Server)
	}
	d.overlays[sessionName][srv.Name] = srv
}

// dropOverlay forgets the overlay DeleteOverlay removed. d.reloadMu is
// held.
func (d *Daemon) dropOverlay(sessionName, server string) {
	delete(d.overlays[sessionName], server)
	if len(d.overlays[sessionName]) == 0 {
		delete(d.overlays, sessionName)
	}
}

// pruneOverlays forgets the overlays of the sessions and servers cfg no
// longer has, as the reconciler's Apply drops them. d.reloadMu is held.
func (d *Daemon) pruneOverlays(cfg *config.Config) {
	for name, ov := range d.overlays {
		for server := range ov {
			if cfg.Servers[server] == nil {
				delete(ov, server)
			}
		}
		if cfg.Sessions[name] == nil || len(ov) == 0 {
			delete(d.overlays, name)
		}
	}
}

// overlayKeysDropped refuses a swap to next while a runtime overlay of a
// session cfg keeps holds a plugin settings key next does not declare:
// next would get a key it does not know, and might ignore a narrowing
// one. It names the sessions. d.reloadMu is held.
func (d *Daemon) overlayKeysDropped(cfg *config.Config, next *loadedPolicy) error {
	hs := next.policy.Handshake()
	users := make(map[string][]string) // key -> sessions
	for _, sname := range slices.Sorted(maps.Keys(d.overlays)) {
		if cfg.Sessions[sname] == nil {
			continue // Apply drops the overlays of a removed session
		}
		for server, srv := range d.overlays[sname] {
			if cfg.Servers[server] == nil {
				continue // and those of a removed server
			}
			for k := range srv.Settings.Extra {
				if !slices.Contains(hs.SettingsKeys, k) && !slices.Contains(users[k], sname) {
					users[k] = append(users[k], sname)
				}
			}
		}
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(users)) {
		errs = append(errs, fmt.Errorf("plugin %q does not declare the settings key %q, which the runtime overlays of sessions %s use",
			hs.Name, k, strings.Join(users[k], ", ")))
	}
	return errors.Join(errs...)
}
