package daemon

import (
	"encoding/json"
	"maps"

	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/session"
)

// A State is what GET /v1/state returns.
type State struct {
	Config     string         `json:"config"`
	Listen     string         `json:"listen"`
	Policy     PolicyState    `json:"policy"`
	LastReload *ReloadResult  `json:"lastReload,omitempty"`
	Pool       []EntryState   `json:"pool"`
	Sessions   []SessionView  `json:"sessions"`
	Counters   opcount.Values `json:"counters"`

	// Reloads are the latest reloads (at most 20), newest first; the
	// first is LastReload.
	Reloads []*ReloadResult `json:"reloads"`
}

// A PolicyState describes the running policy plugin.
type PolicyState struct {
	// Name and Version are what the plugin's handshake reports.
	Name    string `json:"name"`
	Version string `json:"version"`
	// Source is the plugin file, or "embedded:policy-default".
	Source string `json:"source"`
	SHA256 string `json:"sha256"`
	// SettingsKeys are the per-server settings keys the plugin declares.
	SettingsKeys []string `json:"settingsKeys,omitempty"`
	// Renames is true when the plugin opted into renaming and redescribing
	// tools and prompts (abi/SPEC.md section 5.3).
	Renames bool `json:"renames,omitempty"`
	// Config is the plugin's "policy.config" with every value replaced by
	// "REDACTED" (config.Policy.RedactedConfig), and ConfigSHA256 the
	// digest of its compact bytes, to tell two configurations apart.
	Config       json.RawMessage `json:"config,omitempty"`
	ConfigSHA256 string          `json:"configSha256,omitempty"`
}

// An EntryState describes one upstream connection of the pool, or a server
// whose connection could not be made: state "failed", no ID, and Error
// saying why.
type EntryState struct {
	ID       string `json:"id"`
	Identity string `json:"identity"`
	Server   string `json:"server"`
	Pooled   bool   `json:"pooled"`
	State    string `json:"state"`
	// PID is the upstream process id of a pooled stdio upstream (its
	// newest process); 0 when unknown or not a process.
	PID     int    `json:"pid,omitempty"`
	Refs    int    `json:"refcount"`
	Views   int    `json:"views"`
	Version uint64 `json:"snapshotVersion"`
	Error   string `json:"error,omitempty"`
	// Subscriptions are the resource URIs the sessions' clients hold
	// through this connection; each is subscribed to upstream once (a new
	// connection's, after a restart, in the background).
	Subscriptions []string `json:"subscriptions,omitempty"`

	// Restarts counts the restarts of this connection (after its upstream
	// went away, or asked for); a connection that failed for good is
	// replaced by a new entry, counting from 0.
	Restarts int `json:"restarts"`
	// LastError is the latest reason the connection went away or could
	// not be made, kept after a restart succeeds.
	LastError string `json:"lastError,omitempty"`
}

// A SessionView describes one session: its endpoint and its bindings.
type SessionView struct {
	Name        string                   `json:"name"`
	URL         string                   `json:"url"`
	TokenSource string                   `json:"tokenSource"`
	Clients     int                      `json:"clients"`
	Tools       []string                 `json:"tools"`
	Prompts     []string                 `json:"prompts"`
	Resources   []string                 `json:"resources"`
	Servers     []reconcile.BindingState `json:"servers"`

	// ClientList describes each connected client as its initialize
	// request did: at most session.MaxClientInfos of them (Clients counts
	// them all), each field cut to 128 bytes.
	ClientList []session.ClientInfo `json:"clientList"`
}

// State describes the daemon at one instant.
func (d *Daemon) State() State {
	pol := d.policy.Load()
	st := State{
		Config:   d.file,
		Listen:   d.Addr(),
		Pool:     []EntryState{},
		Sessions: []SessionView{},
		Counters: d.counters.Snapshot(),
	}
	if pol != nil {
		hs := pol.policy.Handshake()
		st.Policy = PolicyState{Name: hs.Name, Version: hs.Version, Source: pol.policy.Name(), SHA256: pol.policy.Digest(),
			SettingsKeys: hs.SettingsKeys, Renames: hs.Renames, Config: pol.src.RedactedConfig(), ConfigSHA256: pol.src.ConfigSHA256()}
	}
	rs := d.rec.State()
	st.Pool = d.poolEntries(rs)
	d.mu.Lock()
	st.LastReload = d.lastReload
	st.Reloads = make([]*ReloadResult, 0, len(d.reloads))
	for i := len(d.reloads) - 1; i >= 0; i-- {
		st.Reloads = append(st.Reloads, d.reloads[i])
	}
	cfg := d.cfg
	eps := maps.Clone(d.endpoints)
	d.mu.Unlock()
	base := d.URL()
	for _, s := range rs.Sessions { // sorted by name
		sv := SessionView{Name: s.Name, URL: base + "/mcp/" + s.Name, Servers: s.Servers, ClientList: []session.ClientInfo{},
			Tools: []string{}, Prompts: []string{}, Resources: []string{}}
		if cs := cfg.Sessions[s.Name]; cs != nil {
			sv.TokenSource = cs.TokenSource
		}
		if e := eps[s.Name]; e != nil {
			sv.Clients = e.ep.Clients()
			sv.ClientList = e.ep.ClientInfos()
			sv.Tools = nonNil(e.ep.Tools())
			sv.Prompts = nonNil(e.ep.Prompts())
			sv.Resources = nonNil(e.ep.Resources())
		}
		st.Sessions = append(st.Sessions, sv)
	}
	return st
}

// poolEntries describes the pool's entries and, as entries in state
// "failed" without an ID, each server whose connection could not be made
// (so that the pool holds no entry for it) with its last error: a server
// that never connected, or whose connection failed and is being retried.
// rs is the reconciler's state. The entries come sorted by ID, then the
// servers without one, in session order.
func (d *Daemon) poolEntries(rs reconcile.State) []EntryState {
	out := []EntryState{}
	held := make(map[string]bool) // identities with an entry
	for _, e := range d.pool.Entries() {
		es := EntryState{
			ID: e.ID, Identity: e.Identity, Server: e.Server, Pooled: e.Pooled, State: e.State.String(),
			Refs: e.Refs, Views: e.Views, Version: e.Version, Subscriptions: e.Subscriptions, Restarts: e.Restarts,
		}
		if e.Pooled {
			es.PID = d.pids.get(e.Identity)
		}
		if e.Err != nil {
			es.Error = e.Err.Error()
		}
		if e.LastErr != nil {
			es.LastError = e.LastErr.Error()
		}
		held[e.Identity] = true
		out = append(out, es)
	}
	for _, s := range rs.Sessions {
		for _, b := range s.Servers {
			if b.Pending || b.Identity != "" || b.Error == "" {
				continue // holds a connection, or is being replaced
			}
			identity := b.Desired
			if held[identity] {
				continue // an entry for it is connecting (or listed already)
			}
			held[identity] = true
			out = append(out, EntryState{Identity: identity, Server: b.Server, State: pool.StateFailed.String(), Error: b.Error, LastError: b.Error})
		}
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
