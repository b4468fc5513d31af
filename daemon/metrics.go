package daemon

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/session"
)

// metrics are the daemon's Prometheus metrics, in a registry of its own
// (nothing is registered globally).
type metrics struct {
	reg      *prometheus.Registry
	reloads  *prometheus.CounterVec
	swaps    *prometheus.CounterVec
	retries  *prometheus.CounterVec
	policyMs *prometheus.HistogramVec
	calls    *prometheus.CounterVec
	callTime *prometheus.HistogramVec
	// requestsRefused and connsRefused count refused requests and
	// connections by reason (http.go, conns.go).
	requestsRefused *prometheus.CounterVec
	connsRefused    *prometheus.CounterVec
}

func newMetrics(d *Daemon) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmhost_reloads_total",
			Help: "Config reloads by result: ok, partial (some bindings failed), invalid (config refused), policy_refused.",
		}, []string{"result"}),
		swaps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmhost_policy_swaps_total",
			Help: "Policy plugin swaps by result: ok or refused.",
		}, []string{"result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmhost_upstream_retries_total",
			Help: "Backoff retries of bindings whose upstream could not be started, by result.",
		}, []string{"result"}),
		policyMs: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "wasmhost_policy_call_duration_seconds",
			Help:    "Duration of policy plugin calls by export and outcome.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"export", "outcome"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmhost_upstream_requests_total",
			Help: "Client requests forwarded to upstreams (tools/call, prompts/get, resources/read), by server, method and outcome: " +
				"ok, tool_error (a tool result flagged isError), error (the upstream's JSON-RPC error), timeout, unavailable, cancelled, cut_short.",
		}, []string{"server", "method", "outcome"}),
		callTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "wasmhost_upstream_request_duration_seconds",
			Help:    "Time from sending a forwarded request upstream to its answer or failure, by server and method.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"server", "method"}),
		requestsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmhost_http_requests_refused_total",
			Help: "HTTP requests refused before their handler, by reason: host, origin (403); no_session, no_credentials, not_bearer, bad_token " +
				"and admin_no_credentials, admin_not_bearer, admin_bad_token (401); max_clients (503); admin_disabled (404).",
		}, []string{"reason"}),
		connsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmhost_http_conns_refused_total",
			Help: "HTTP connections refused when accepted (answered 503 and closed), by reason: max_conns, max_conns_per_ip.",
		}, []string{"reason"}),
	}
	m.reg.MustRegister(m.reloads, m.swaps, m.retries, m.policyMs, m.calls, m.callTime, m.requestsRefused, m.connsRefused)
	// Which replica answers: the same config runs on several, and a
	// dashboard joins on this to name them.
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "wasmhost_build_info",
		Help:        "Always 1; its labels name the wasmhost version and the replica (wasmhost run --replica).",
		ConstLabels: prometheus.Labels{"version": Version, "replica": d.opts.Replica},
	}, func() float64 { return 1 }))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "wasmhost_ready",
		Help: "1 while /readyz answers 200: the first config is applied and the daemon is not stopping.",
	}, func() float64 {
		if d.isReady() {
			return 1
		}
		return 0
	}))
	for _, r := range requestRefusals {
		m.requestsRefused.WithLabelValues(r)
	}
	for _, r := range []string{connRefusedMax, connRefusedPerIP} {
		m.connsRefused.WithLabelValues(r)
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wasmhost_http_conns", Help: "HTTP connections open."},
		func() float64 {
			if d.conns == nil {
				return 0
			}
			return float64(d.conns.Open())
		}))
	// The process's own: goroutines, heap, GC, open files, memory.
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, r := range []string{"ok", "partial", "invalid", "policy_refused"} {
		m.reloads.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "refused"} {
		m.swaps.WithLabelValues(r)
	}

	c := d.counters
	opCounter := func(name, help string, v *atomic.Int64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "wasmhost_" + name + "_total", Help: help},
			func() float64 { return float64(v.Load()) }))
	}
	opCounter("upstream_connects", "Upstream connections established.", &c.Connects)
	opCounter("upstream_disconnects", "Upstream connections ended.", &c.Disconnects)
	opCounter("handle_acquires", "Pool handles acquired by sessions.", &c.Acquires)
	opCounter("handle_releases", "Pool handles released.", &c.Releases)
	opCounter("view_refreshes", "Settings refreshes of session views.", &c.Refreshes)
	opCounter("view_replays", "Projections applied to session registries.", &c.Replays)
	opCounter("registry_ops", "Put or delete batches sent to session registries.", &c.RegistryOps)
	opCounter("policy_calls", "Calls into the policy (canonicalize or project).", &c.PolicyCalls)
	opCounter("upstream_notifications", "list_changed notifications received from upstreams.", &c.Notifications)
	opCounter("upstream_discoveries", "Snapshot listings of upstream servers.", &c.Discoveries)

	m.reg.MustRegister(&poolCollector{d: d, desc: prometheus.NewDesc("wasmhost_pool_entries",
		"Upstream connections in the pool, by state; a server whose connection could not be made counts as failed.", []string{"state"}, nil)})
	m.reg.MustRegister(&bindingCollector{d: d, desc: prometheus.NewDesc("wasmhost_bindings",
		"(session, server) bindings by state: healthy, pending (being reconnected), failed (holding no connection, "+
			"or a view the policy failed closed; /v1/state says why).", []string{"state"}, nil)})
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wasmhost_sessions", Help: "Configured sessions."},
		func() float64 {
			d.mu.Lock()
			defer d.mu.Unlock()
			return float64(len(d.endpoints))
		}))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "wasmhost_clients", Help: "MCP clients connected to session endpoints."},
		func() float64 { return float64(d.clientSessions()) }))
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// observePolicy records one policy call.
func (m *metrics) observePolicy(export string, took time.Duration, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.policyMs.WithLabelValues(export, outcome).Observe(took.Seconds())
}

// observeCall records one request a session forwarded (session.Options.OnCall).
func (m *metrics) observeCall(c session.Call) {
	m.calls.WithLabelValues(c.Server, c.Method, c.Outcome).Inc()
	if c.Took > 0 {
		m.callTime.WithLabelValues(c.Server, c.Method).Observe(c.Took.Seconds())
	}
}

// A poolCollector reports the pool's entries by state at scrape time.
type poolCollector struct {
	d    *Daemon
	desc *prometheus.Desc
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	counts := make(map[string]int)
	if c.d.pool != nil && c.d.rec != nil {
		// As /v1/state lists them: a server whose connection could not be
		// made counts as a failed entry.
		for _, e := range c.d.poolEntries(c.d.rec.State()) {
			counts[e.State]++
		}
	}
	for _, s := range pool.States() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[s.String()]), s.String())
	}
}

// A bindingCollector reports the reconciler's bindings by state at scrape
// time. Unlike the pool's entries it shows a server whose connection was
// never made, and a view the policy failed closed.
type bindingCollector struct {
	d    *Daemon
	desc *prometheus.Desc
}

func (c *bindingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *bindingCollector) Collect(ch chan<- prometheus.Metric) {
	var healthy, pending, failed int
	if r := c.d.rec; r != nil {
		for _, s := range r.State().Sessions {
			for _, b := range s.Servers {
				switch {
				case b.Pending:
					pending++
				case b.Error != "":
					failed++
				default:
					healthy++
				}
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(healthy), "healthy")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(pending), "pending")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(failed), "failed")
}
