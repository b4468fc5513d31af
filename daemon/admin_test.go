package daemon_test

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/daemon"
	"github.com/wasmhost/wasmhost/internal/demoserver"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	policydefault "github.com/wasmhost/wasmhost/plugins/policy-default"
	"github.com/wasmhost/wasmhost/pool"
)

// TestAdminHammer runs admin reloads, overlay puts and deletes, restarts
// and state and metrics reads from many goroutines at once (run it with
// -race). Each (session, server) overlay and the config file have one
// writer, so the final state is known: /v1/state and what each session's
// client lists agree with it, and the upstream is still shared.
func TestAdminHammer(t *testing.T) {
	if testing.Short() {
		t.Skip("a hammer of admin requests")
	}
	cfg := baseConfig()
	r := start(t, cfg)
	self, err := os.Executable()
	require.NoError(t, err)
	includes := [][]string{{"echo"}, {"echo", "add"}, {"pid", "read_note"}, {"echo", "add", "pid"}}
	const rounds = 24
	// The same policy from a file: switching to and from it swaps the
	// plugin without changing what anyone sees.
	plugin := filepath.Join(t.TempDir(), "policy.wasm")
	require.NoError(t, os.WriteFile(plugin, policydefault.Wasm, 0o644))

	// The last write of each writer, for the final check.
	var lastFile []string
	lastOverlay := map[string][]string{} // session -> includeTools, nil: no overlay

	var wg sync.WaitGroup
	wg.Go(func() { // the config file's one writer
		rng := rand.New(rand.NewPCG(1, 2))
		for range rounds {
			inc := includes[rng.IntN(len(includes))]
			next := set(baseConfig(), "sessions.alice.overrides.demo.includeTools", inc)
			if rng.IntN(4) == 0 {
				set(next, "policy", map[string]any{"path": plugin})
			}
			if rng.IntN(2) == 0 {
				set(next, "sessions.carol", map[string]any{"token": "carol-token-0123456789abcdef"})
			}
			data, err := json.Marshal(pinNames(t, next))
			assert.NoError(t, err)
			assert.NoError(t, os.WriteFile(r.path+".tmp", data, 0o600))
			assert.NoError(t, os.Rename(r.path+".tmp", r.path))
			code, body := r.send("POST", "/v1/reload", "")
			assert.Equal(t, http.StatusOK, code, body)
			lastFile = inc
		}
	})
	var mu sync.Mutex
	for i, session := range []string{"alice", "bob"} {
		wg.Go(func() { // one overlay writer per session
			rng := rand.New(rand.NewPCG(uint64(i), 3))
			var last []string
			for range rounds {
				if rng.IntN(3) == 0 {
					code, body := r.send("DELETE", "/v1/sessions/"+session+"/servers/demo", "")
					assert.Contains(t, []int{http.StatusOK, http.StatusNotFound}, code, body)
					last = nil
					continue
				}
				inc := includes[rng.IntN(len(includes))]
				entry := mustJSON(t, map[string]any{"command": self, "env": map[string]any{demoserver.ChildEnv: "1"}, "includeTools": inc})
				code, body := r.send("PUT", "/v1/sessions/"+session+"/servers/demo", entry)
				assert.Equal(t, http.StatusOK, code, body)
				last = inc
			}
			mu.Lock()
			lastOverlay[session] = last
			mu.Unlock()
		})
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, path := range []string{"/v1/state", "/metrics"} {
					code, body := r.send("GET", path, "")
					assert.Equal(t, http.StatusOK, code, body)
				}
			}
		})
	}
	readers.Go(func() {
		for range 3 {
			code, body := r.send("POST", "/v1/servers/demo/restart", "")
			assert.Equal(t, http.StatusOK, code, body)
			// The pace of the hammer: restarts spaced so that readers
			// and reloads run between them; nothing is waited for.
			time.Sleep(50 * time.Millisecond)
		}
	})
	wg.Wait()
	close(stop)
	readers.Wait()

	want := map[string][]string{"alice": lastFile, "bob": nil}
	for session, inc := range lastOverlay {
		if inc != nil {
			want[session] = inc
		}
	}
	expected := func(session string) []string {
		inc := want[session]
		if inc == nil { // bob's file settings
			return []string{"demo__add", "demo__echo", "demo__pid", "demo__read_note"}
		}
		var out []string
		for _, name := range inc {
			out = append(out, "demo__"+name)
		}
		slices.Sort(out)
		return out
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var st daemon.State
		_, body := r.send("GET", "/v1/state", "")
		require.NoError(c, json.Unmarshal([]byte(body), &st))
		if assert.Len(c, st.Pool, 1, "one shared upstream") {
			assert.NotZero(c, st.Pool[0].PID)
		}
		require.GreaterOrEqual(c, len(st.Sessions), 2)
		for _, s := range st.Sessions[:2] { // alice, bob (carol may follow)
			assert.Equal(c, expected(s.Name), s.Tools, s.Name)
			require.Len(c, s.Servers, 1, s.Name)
			assert.Equal(c, lastOverlay[s.Name] != nil, s.Servers[0].Overlay, s.Name)
			assert.Empty(c, s.Servers[0].Error, s.Name)
		}
	}, eventWithin, 50*time.Millisecond, "the final state")
	for _, s := range []struct{ name, token string }{{"alice", aliceToken}, {"bob", bobToken}} {
		c := r.connect(s.name, s.token)
		assert.Equal(t, expected(s.name), c.tools(t), "%s lists what /v1/state says", s.name)
	}
}

// send is do with the admin token for goroutines other than the test's:
// a failed request is reported, not fatal.
func (r *running) send(method, path, body string) (int, string) {
	req, err := http.NewRequest(method, r.d.URL()+path, strings.NewReader(body))
	if !assert.NoError(r.t, err) {
		return 0, ""
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := r.http.Do(req)
	if !assert.NoError(r.t, err) {
		return 0, ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	assert.NoError(r.t, err)
	return resp.StatusCode, string(b)
}

// holdingAdmin starts a daemon on cfg whose dials of a server named
// "slow-…" wait until the returned hold is released: an overlay PUT of
// such a server holds the admin lock meanwhile, so admin requests sent
// then wait for it. The config gets disabled entries "slow-1" and
// "slow-2" (an overlay changes a configured server). Watch reloads are put
// off for the test's duration.
func holdingAdmin(t *testing.T, cfg map[string]any) (r *running, hold func(server string) (release func())) {
	t.Helper()
	servers := cfg["mcpServers"].(map[string]any)
	for _, name := range []string{"slow-1", "slow-2"} {
		servers[name] = map[string]any{"command": "slow", "disabled": true}
	}
	entered := make(chan struct{})
	proceed := make(chan struct{})
	r = start(t, cfg, func(o *daemon.Options) {
		o.Debounce = time.Hour
		o.Dialer = func(ctx context.Context, spec pool.Spec) (mcp.Transport, error) {
			if strings.HasPrefix(spec.Name, "slow-") {
				entered <- struct{}{}
				<-proceed
			}
			return pool.DefaultDialer(ctx, spec)
		}
	})
	self, err := os.Executable()
	require.NoError(t, err)
	return r, func(server string) func() {
		done := make(chan int, 1)
		go func() {
			entry := mustJSON(t, map[string]any{"command": self, "env": map[string]any{demoserver.ChildEnv: "1"}})
			code, _ := r.send("PUT", "/v1/sessions/bob/servers/"+server, entry)
			done <- code
		}()
		<-entered
		return func() {
			proceed <- struct{}{}
			assert.Equal(t, http.StatusOK, <-done, "the PUT holding the lock")
		}
	}
}

// sendAndGiveUp sends an admin request and cancels it once the daemon's
// handler (handler, its full function name) waits for the admin lock, as a
// client whose timeout runs out does; it returns once the daemon noticed
// that the client is gone (the request's context is cancelled).
func (r *running) sendAndGiveUp(method, path, body, handler string) {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, r.d.URL()+path, strings.NewReader(body))
	require.NoError(r.t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	done := make(chan error, 1)
	go func() {
		resp, err := r.http.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	// net/http cancels a request's context when the read it keeps going
	// on the connection while the handler runs ends: the goroutine of that
	// read is the one to see end.
	var reader string
	mcptest.WaitFor(r.t, eventWithin, func() bool {
		reader = ""
		var waiting string
		gs := mcptest.Goroutines()
		for _, g := range gs {
			if g.State == "sync.Mutex.Lock" && strings.Contains(g.Stack, handler+"(") {
				waiting = g.ID
			}
		}
		if waiting == "" {
			return false
		}
		for _, g := range gs {
			if strings.Contains(g.Stack, "net/http.(*connReader).backgroundRead(") &&
				strings.Contains(g.Stack, "created by net/http.(*connReader).startBackgroundRead in goroutine "+waiting+"\n") {
				reader = g.ID
			}
		}
		return reader != ""
	}, mcptest.Stacks, "%s waits for the admin lock, its connection read in the background", handler)
	cancel()
	require.ErrorIs(r.t, <-done, context.Canceled)
	mcptest.WaitFor(r.t, eventWithin, func() bool {
		return !slices.ContainsFunc(mcptest.Goroutines(), func(g mcptest.Goroutine) bool { return g.ID == reader })
	}, mcptest.Stacks, "the daemon notices the client is gone (goroutine %s ends)", reader)
}

// TestAdminChangeOutlivesItsClient: an admin reload, or overlay PUT,
// whose client gives up before it is applied (here while it waits for
// another admin change) is applied whole all the same. It used to run
// under the request's context, cancelled with it: the policy calls of the
// change failed, and the views they were for failed closed, leaving alice
// with no tools until the next reload.
func TestAdminChangeOutlivesItsClient(t *testing.T) {
	t.Parallel()
	skipEndToEndIfShort(t)
	cfg := baseConfig()
	r, hold := holdingAdmin(t, cfg)
	alice := r.connect("alice", aliceToken)
	pid := alice.pid(t)
	require.Equal(t, []string{"demo__add", "demo__echo", "demo__pid"}, alice.tools(t))

	release := hold("slow-1")
	writeConfig(t, r.path, set(cfg, "sessions.alice.overrides.demo.includeTools", []string{"echo", "add", "pid", "read_note"}))
	r.sendAndGiveUp("POST", "/v1/reload", "", "github.com/wasmhost/wasmhost/daemon.(*Daemon).serveReload")
	release()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var st daemon.State
		_, body := r.send("GET", "/v1/state", "")
		require.NoError(c, json.Unmarshal([]byte(body), &st))
		require.NotNil(c, st.LastReload)
		assert.True(c, st.LastReload.OK, st.LastReload.Error)
	}, eventWithin, 20*time.Millisecond, "the reload is applied")
	assert.Equal(t, []string{"demo__add", "demo__echo", "demo__pid", "demo__read_note"}, alice.tools(t))

	release = hold("slow-2")
	self, err := os.Executable()
	require.NoError(t, err)
	r.sendAndGiveUp("PUT", "/v1/sessions/alice/servers/demo",
		mustJSON(t, map[string]any{"command": self, "env": map[string]any{demoserver.ChildEnv: "1"}, "includeTools": []string{"echo", "pid"}}),
		"github.com/wasmhost/wasmhost/daemon.(*Daemon).servePutOverlay")
	release()
	require.Eventually(t, func() bool { return slices.Equal([]string{"demo__echo", "demo__pid"}, alice.tools(t)) },
		eventWithin, 20*time.Millisecond, "the overlay is applied")
	for _, s := range r.state().Sessions {
		for _, b := range s.Servers {
			assert.Empty(t, b.Error, "%s: %s", s.Name, b.Server)
		}
	}
	assert.Equal(t, pid, alice.pid(t), "on the same upstream")
}

// TestAdminOverlayDeleteBringingRefusedSettingsIsRefused: while alice has
// an overlay of demo, her file settings of demo are not hers, so a reload
// bringing settings the policy refuses there is applied. Deleting the
// overlay would bring them in force: it is refused (422, the overlay
// stays) naming the file and the settings' JSON path, as the reload would
// have been, and alice keeps what she sees. It used to be applied, and
// alice's view of demo failed closed.
func TestAdminOverlayDeleteBringingRefusedSettingsIsRefused(t *testing.T) {
	t.Parallel()
	r, cfg, alice, before := startPicky(t)

	self, err := os.Executable()
	require.NoError(t, err)
	entry := mustJSON(t, map[string]any{"command": self, "env": map[string]any{demoserver.ChildEnv: "1"}})
	code, body := r.do("PUT", "/v1/sessions/alice/servers/demo", adminToken, strings.NewReader(entry), nil)
	require.Equal(t, http.StatusOK, code, body)
	code, _, body = r.reloadWith(set(cfg, "sessions.alice.overrides", map[string]any{"demo": map[string]any{"trust": true}}))
	require.Equal(t, http.StatusOK, code, "the overlay decides alice's settings of demo: %s", body)

	code, body = r.do("DELETE", "/v1/sessions/alice/servers/demo", adminToken, nil, nil)
	assert.Equal(t, http.StatusUnprocessableEntity, code, body)
	assert.Contains(t, body, r.path+`: sessions.alice.overrides.demo over mcpServers.demo: session \"alice\", server \"demo\": the policy refuses the settings`)
	assert.Equal(t, before, alice.tools(t), "alice keeps what she sees")
	st := r.state()
	require.Len(t, st.Sessions[0].Servers, 1)
	assert.True(t, st.Sessions[0].Servers[0].Overlay, "the overlay stays")
	assert.Empty(t, st.Sessions[0].Servers[0].Error)

	// Once the file is fixed, the overlay goes.
	code, _, body = r.reloadWith(set(cfg, "sessions.alice.overrides", map[string]any{}))
	require.Equal(t, http.StatusOK, code, body)
	code, body = r.do("DELETE", "/v1/sessions/alice/servers/demo", adminToken, nil, nil)
	assert.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, before, alice.tools(t))
	assert.False(t, r.state().Sessions[0].Servers[0].Overlay)
}
