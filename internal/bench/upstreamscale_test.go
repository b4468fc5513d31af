package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/procstat"
)

// upstreamScaleAdmin is the admin token of BenchmarkUpstreamScale.
const upstreamScaleAdmin = "admin-token-for-the-upstream-scale-bench"

// upstreamScaleConfig is a wasmhost config of servers pooled copies of
// up behind sessions sessions that each use all of them; the servers in
// trusted have "trust": true in every session.
func upstreamScaleConfig(up benchUpstream, servers, sessions int, trusted func(i int) bool) map[string]any {
	srvs := make(map[string]any, servers)
	for i := range servers {
		srvs[fmt.Sprintf("srv%03d", i)] = map[string]any{"command": up.argv[0], "args": up.argv[1:], "trust": trusted(i)}
	}
	sess := make(map[string]any, sessions)
	for i := range sessions {
		sess[fmt.Sprintf("s%02d", i)] = map[string]any{"token": fmt.Sprintf("token-for-the-upstream-scale-s%02d", i)}
	}
	return map[string]any{"admin": map[string]any{"token": upstreamScaleAdmin}, "mcpServers": srvs, "sessions": sess}
}

// reload writes cfg to g's config file and has g reload it through the
// admin API, and returns how long the reload took.
func reload(ctx context.Context, g *gateway, cfg map[string]any) (time.Duration, error) {
	data, err := json.Marshal(cfg)
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(g.cfgPath, data, 0o600); err != nil {
		return 0, err
	}
	base, _, _ := strings.Cut(g.url, "/mcp/")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/reload", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+upstreamScaleAdmin)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("reload: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("reload: %s: %s", resp.Status, body)
	}
	return took, nil
}

// upstreamRSS sums the RSS of the processes whose parent is pid.
func upstreamRSS(pid int) int64 {
	procs := processes()
	var sum int64
	for _, child := range procstat.Children(procs, pid) {
		sum += procs[child].RSS
	}
	return sum
}

// upstreamScale starts wasmhost with servers pooled Go upstreams behind
// sessions sessions and measures: the time from its start to ready (every
// upstream connected: the first reload has applied), its RSS and its
// upstreams', and reloads that change the trust of one server, then of
// ten (nine more), then nothing (each in every session).
func upstreamScale(ctx context.Context, tb testing.TB, servers, sessions int) (map[string]float64, error) {
	up := goUpstream(tb)
	none := func(int) bool { return false }
	start := time.Now()
	g, err := startGatewayConfig(ctx, tb, "wasmhost", up, 1, upstreamScaleConfig(up, servers, sessions, none))
	if err != nil {
		return nil, err
	}
	defer g.close()
	m := map[string]float64{"ready-s": time.Since(start).Seconds()}
	if n := childProcesses(g.cmd.Process.Pid); n != servers {
		return nil, fmt.Errorf("%d upstream processes for %d pooled servers", n, servers)
	}
	rss, err := g.rss()
	if err != nil {
		return nil, err
	}
	m["gateway-rss"], m["upstreams-rss"] = float64(rss), float64(upstreamRSS(g.cmd.Process.Pid))
	for _, step := range []struct {
		unit    string
		trusted func(int) bool
	}{
		{"reload-one-ns", func(i int) bool { return i == 0 }},
		{"reload-ten-ns", func(i int) bool { return i < 10 }},
		{"reload-none-ns", func(i int) bool { return i < 10 }},
	} {
		took, err := reload(ctx, g, upstreamScaleConfig(up, servers, sessions, step.trusted))
		if err != nil {
			return nil, fmt.Errorf("%s: %w\nstderr:\n%s", step.unit, err, g.stderr)
		}
		m[step.unit] = float64(took.Nanoseconds())
	}
	if n := childProcesses(g.cmd.Process.Pid); n != servers {
		return nil, fmt.Errorf("%d upstream processes after the reloads, want %d: a metadata reload restarted upstreams", n, servers)
	}
	return m, nil
}

// BenchmarkUpstreamScale runs upstreamScale with 200 pooled upstreams (the
// project's demo server) behind 50 sessions, 10,000 views.
func BenchmarkUpstreamScale(b *testing.B) {
	m, err := upstreamScale(b.Context(), b, 200, 50)
	require.NoError(b, err)
	for unit, v := range m {
		b.ReportMetric(v, unit)
	}
	b.ReportMetric(0, "ns/op")
}

// TestUpstreamScaleHarness runs upstreamScale at 4 upstreams behind 3
// sessions: each upstream starts once and no reload restarts one.
func TestUpstreamScaleHarness(t *testing.T) {
	m, err := upstreamScale(t.Context(), t, 4, 3)
	require.NoError(t, err)
	for _, unit := range []string{"ready-s", "gateway-rss", "upstreams-rss", "reload-one-ns", "reload-ten-ns", "reload-none-ns"} {
		require.Positive(t, m[unit], unit)
	}
}
