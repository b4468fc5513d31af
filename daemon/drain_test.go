package daemon_test

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/daemon"
	"github.com/wasmhost/wasmhost/internal/mcptest"
	"github.com/wasmhost/wasmhost/session"
)

// slowConfig is a config whose one session, alice, has the slow upstream.
func slowConfig(t *testing.T) map[string]any {
	self, err := os.Executable()
	require.NoError(t, err)
	cfg := baseConfig()
	cfg["mcpServers"] = map[string]any{"slow": map[string]any{"command": self, "env": map[string]any{mcptest.SlowEnv: "1"}}}
	cfg["sessions"] = map[string]any{"alice": map[string]any{"token": aliceToken}}
	return cfg
}

// TestReadyzAndReplicaMetric: /readyz answers 200 once the daemon serves,
// without a token, and /metrics names the replica.
func TestReadyzAndReplicaMetric(t *testing.T) {
	t.Parallel()
	r := start(t, baseConfig(), func(o *daemon.Options) { o.Replica = "wasmhost-7d9f-x2" })
	code, body := r.do("GET", "/readyz", "", nil, nil)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ready\n", body)
	code, body = r.do("GET", "/metrics", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `wasmhost_build_info{replica="wasmhost-7d9f-x2",version="`+daemon.Version+`"} 1`)
	assert.Contains(t, body, "wasmhost_ready 1")
}

// TestDrainOnStop: once told to stop, the daemon answers /readyz 503 at
// once (while /healthz stays 200), refuses new MCP requests with 503 and
// Retry-After, lets the call under way finish and answers it, and then
// returns; all of it within the call's own time plus a margin.
func TestDrainOnStop(t *testing.T) {
	skipEndToEndIfShort(t)
	r := start(t, slowConfig(t), func(o *daemon.Options) { o.DrainTimeout = 20 * time.Second })
	c := r.connect("alice", aliceToken)
	answered := mcptest.StartSlow(t, c.cs, "slow__slow", 2000, 0)

	began := time.Now()
	stopped := make(chan struct{})
	go func() { r.stop(); close(stopped) }()
	require.Eventually(t, func() bool {
		code, body := r.do("GET", "/readyz", "", nil, nil)
		return code == http.StatusServiceUnavailable && body == "draining\n"
	}, 10*time.Second, 5*time.Millisecond, "not ready once stopping")
	notReady := time.Since(began)

	code, _ := r.do("GET", "/healthz", "", nil, nil)
	assert.Equal(t, http.StatusOK, code, "alive while draining")
	req, err := http.NewRequest("POST", r.d.URL()+"/mcp/alice", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	resp, err := r.http.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "a new client session while draining")
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	_, err = c.call(t, "slow__slow", map[string]any{"mark": t.TempDir() + "/m", "ms": 1})
	require.Error(t, err, "a new call on a client session while draining")
	assert.Contains(t, err.Error(), "Service Unavailable")

	select {
	case res := <-answered:
		require.NotNil(t, res)
		assert.Equal(t, "slept", resultText(res), "the call under way is answered")
	case <-time.After(30 * time.Second):
		t.Fatal("the call under way got no answer")
	}
	<-stopped
	took := time.Since(began)
	t.Logf("not ready after %v, stopped after %v (a 2 s call under way)", notReady, took)
	assert.Less(t, took, 2*time.Second+10*time.Second, "stopped within the call's time and a margin")
	r.waitLog("stopping: answering the calls under way; not ready (/readyz 503)")
}

// TestDrainTimeoutCutsShort: a call still running at the drain timeout is
// cut short (its client told so), and the stop is bounded by the timeout
// plus the documented graces, not by the call.
func TestDrainTimeoutCutsShort(t *testing.T) {
	skipEndToEndIfShort(t)
	const drain = 500 * time.Millisecond
	r := start(t, slowConfig(t), func(o *daemon.Options) { o.DrainTimeout = drain })
	c := r.connect("alice", aliceToken)
	answered := mcptest.StartSlow(t, c.cs, "slow__slow", 60_000, 0)
	began := time.Now()
	r.stop()
	took := time.Since(began)
	select {
	case res := <-answered:
		require.NotNil(t, res)
		assert.True(t, res.IsError)
		assert.Contains(t, resultText(res), "cut short")
	case <-time.After(10 * time.Second):
		t.Fatal("the call cut short got no answer")
	}
	// Drain timeout, then at most session.AnswerGrace and the
	// cut-short wait (2 s) for the answers, then the closes; 10 s margin
	// for a loaded machine.
	assert.Less(t, took, drain+session.AnswerGrace+2*time.Second+10*time.Second, "the stop waited for the call, not the drain timeout")
	assert.Greater(t, took, drain, "the stop gave the call the drain timeout")
}
