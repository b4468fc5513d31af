package daemon_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/daemon"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/pool"
)

// TestPolicySwapNeverShowsOldSettingsUnderNewPlugin: a reload that swaps
// the plugin and changes a session's settings with it (the old plugin's
// key for the new one's filter) takes each view from the old settings
// under the old plugin straight to the new settings under the new one.
// The swap used to re-key every view with the old settings under the new
// plugin first, and apply the new settings after: in between, alice's
// {"readOnlyOnly": true}, a key the default policy ignores, showed her
// every tool of demo (write_note included, callable) for as long as the
// rest of the reload took. Here eight servers the reload adds hold it open
// (their connections wait), as slow upstreams would.
func TestPolicySwapNeverShowsOldSettingsUnderNewPlugin(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end to end (a daemon, an upstream process, two plugins); -short keeps a faster test of this area; run without -short")
	}
	cfg := readonlyConfig(t)
	set(cfg, "sessions.alice.overrides", map[string]any{"demo": map[string]any{"readOnlyOnly": true}})
	set(cfg, "sessions.alice.servers", []string{"demo"})
	set(cfg, "sessions.bob.servers", []string{"demo"})
	var entered atomic.Int32
	proceed := make(chan struct{})
	r := start(t, cfg, adminReloadsOnly, func(o *daemon.Options) {
		o.Dialer = func(ctx context.Context, spec pool.Spec) (mcp.Transport, error) {
			if strings.HasPrefix(spec.Name, "aslow-") {
				entered.Add(1)
				select {
				case <-proceed:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return pool.DefaultDialer(ctx, spec)
		}
	})
	alice := r.connect("alice", aliceToken)
	require.Equal(t, []string{"demo__echo", "demo__pid", "demo__read_note"}, alice.tools(t))

	// The default policy, alice's filter in its own key, and eight servers
	// of alice's that sort (and so are worked on) before demo.
	set(cfg, "policy", map[string]any{})
	delete(cfg["mcpServers"].(map[string]any)["demo"].(map[string]any), "readOnlyOnly")
	set(cfg, "sessions.alice.overrides", map[string]any{"demo": map[string]any{"includeTools": []string{"echo"}}})
	servers := []string{"demo"}
	for i := range 8 {
		name := fmt.Sprintf("aslow-%d", i)
		cfg["mcpServers"].(map[string]any)[name] = map[string]any{"command": "slow", "disabled": false}
		servers = append(servers, name)
	}
	set(cfg, "sessions.alice.servers", servers)
	done := make(chan struct{})
	go func() {
		defer close(done)
		writeConfig(t, r.path, cfg)
		code, body := r.send("POST", "/v1/reload", "")
		assert.Contains(t, []int{http.StatusOK, http.StatusBadGateway}, code, body)
	}()
	mcptest.WaitFor(t, eventWithin, func() bool { return entered.Load() == 8 }, r.logs.String, "the added servers' connections are being made")
	during := alice.tools(t)
	close(proceed)
	<-done
	assert.False(t, slices.Contains(during, "demo__write_note"), "during the reload alice saw %v", during)
	assert.Subset(t, []string{"demo__echo", "demo__pid", "demo__read_note"}, during, "during the reload alice saw more than before or after")
	assert.Equal(t, []string{"demo__echo"}, alice.tools(t))
}
