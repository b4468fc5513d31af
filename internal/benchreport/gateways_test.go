package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"testing"
)

// gatewayOutput returns BenchmarkGateways lines for one round in which
// wasmhost makes tps[gw] calls/s with a p99 of p99[gw] ms, the same at
// every concurrency and on both upstreams; gateways not in tps are absent.
// Each call costs 300 µs of CPU in the load generator and the upstream
// each, and 400 µs in the gateway.
func gatewayOutput(tps, p99 map[string]float64) string {
	var b strings.Builder
	for _, up := range gwUpstreams {
		for _, c := range gwClients {
			for _, gw := range gwNames {
				if _, ok := tps[gw]; !ok {
					continue
				}
				fmt.Fprintf(&b, "%s-2 \t 1\t 600.0 calls\t %.1f calls/s\t 1000 p50-ns\t %.0f p99-ns\t 300 load-cpu-us/call\t 400 gw-cpu-us/call\t 300 up-cpu-us/call\n", gwBench(up, c, gw), tps[gw], p99[gw]*1e6)
			}
		}
	}
	return b.String()
}

func TestRenderGatewaysPass(t *testing.T) {
	r := newResults()
	tps := map[string]float64{"relay": 1000, "wasmhost": 950, "mcp-proxy": 400, "supergateway": 300}
	p99 := map[string]float64{"relay": 2, "wasmhost": 2.5, "mcp-proxy": 9, "supergateway": 20}
	r.parse(0, []byte(gatewayOutput(tps, p99)))
	checks, section, chart := renderGateways(r, "docs/chart.svg", 2)
	if len(checks) != 2 || checks[0].verdict != pass || checks[1].verdict != pass {
		t.Fatalf("checks: %+v", checks)
	}
	if !strings.Contains(checks[0].measured, "2.38x at worst (12 cells)") {
		t.Errorf("peer check: %q", checks[0].measured)
	}
	if !strings.Contains(section, "![calls/s and p99 per gateway and concurrency](docs/chart.svg)") {
		t.Errorf("the section does not link the chart:\n%s", section)
	}
	checkSVG(t, chart, 2*len(gwUpstreams)*len(gwClients)*len(gwNames))
}

func TestRenderGatewaysMissingPeerAndSlowRelay(t *testing.T) {
	r := newResults()
	// mcp-proxy could not be installed; wasmhost is below 0.9x the relay
	// and adds 2 ms to its p99.
	tps := map[string]float64{"relay": 1000, "wasmhost": 800, "supergateway": 300}
	p99 := map[string]float64{"relay": 2, "wasmhost": 4, "supergateway": 20}
	r.parse(0, []byte("gateway-missing: mcp-proxy node: npm could not install mcp-proxy@6.7.19\n"+gatewayOutput(tps, p99)))
	checks, section, chart := renderGateways(r, "c.svg", 2)
	if checks[0].verdict != miss || !strings.Contains(checks[0].measured, "missing: mcp-proxy (node), mcp-proxy (go)") {
		t.Errorf("peer check with a missing peer: %+v", checks[0])
	}
	if checks[1].verdict != miss || !strings.Contains(checks[1].measured, "0.80x at worst") || !strings.Contains(checks[1].measured, "+2.00 ms") {
		t.Errorf("relay check: %+v", checks[1])
	}
	if !strings.Contains(section, "- mcp-proxy node: npm could not install mcp-proxy@6.7.19") {
		t.Errorf("the section does not say why mcp-proxy is missing:\n%s", section)
	}
	checkSVG(t, chart, 2*len(gwUpstreams)*len(gwClients)*3)
	if n := strings.Count(chart, ">n/a<"); n != 2*len(gwUpstreams)*len(gwClients) {
		t.Errorf("chart marks %d missing bars, want %d", n, 2*len(gwUpstreams)*len(gwClients))
	}
}

// TestRenderGatewaysWhatTwiceTakes: each cell below 2x a peer says what
// 2x would take: at one client the round trip, at more the CPU a gateway
// may spend per call on the machine's CPUs, or that no gateway could.
func TestRenderGatewaysWhatTwiceTakes(t *testing.T) {
	r := newResults()
	// 2x mcp-proxy is 1,400 calls/s: 2 CPUs over 1,400 calls/s is 1,429 µs
	// a call, of which the load generator and upstream take 600. 2x
	// supergateway is 4,000: more than 2 CPUs over 600 µs a call (3,333).
	tps := map[string]float64{"relay": 1000, "wasmhost": 1000, "mcp-proxy": 700, "supergateway": 2000}
	p99 := map[string]float64{"relay": 2, "wasmhost": 2, "mcp-proxy": 9, "supergateway": 20}
	r.parse(0, []byte(gatewayOutput(tps, p99)))
	checks, section, _ := renderGateways(r, "c.svg", 2)
	if checks[0].verdict != miss {
		t.Errorf("peer check: %+v", checks[0])
	}
	for _, want := range []string{
		"- go c=8 against mcp-proxy: wasmhost 1.43x, relay 1.43x; 2x is 1400 calls/s: with the load generator and the upstream spending 600 µs of CPU per call, a gateway may spend 829 µs per call to reach it on 2 CPUs (wasmhost spends 400 µs, the relay 400 µs).",
		"- node c=64 against supergateway: wasmhost 0.50x, relay 0.50x; 2x is 4000 calls/s, more than the 2 CPUs allow any gateway here, even one that costs nothing (the load generator and the upstream spend 600 µs per call: at most 3333 calls/s).",
		"- go c=1 against mcp-proxy: wasmhost 1.43x, relay 1.43x; 2x is a round trip of 714 µs, in which the load generator and the upstream spend 600 µs of CPU per call and wasmhost 400 µs.",
		"| go | wasmhost | 300 / 400 / 300 | 300 / 400 / 300 | 300 / 400 / 300 |",
	} {
		if !strings.Contains(section, want) {
			t.Errorf("the section does not contain %q:\n%s", want, section)
		}
	}
}

// checkSVG checks that chart is well-formed XML with bars bars (rects
// with a title) besides the background and the legend.
func checkSVG(t *testing.T, chart string, bars int) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(chart))
	titled := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v\n%s", err, chart)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "title" {
			titled++
		}
	}
	if titled != bars {
		t.Errorf("chart has %d bars, want %d", titled, bars)
	}
}

// scaleOutput returns BenchmarkSessionScale lines for one round as the
// benchmark writes them: set-up figures one at a time at 1,000 client
// sessions and in a 16-wide burst at 10,000, p99[n][gw] ms at n sessions
// (p50 a tenth of it), 21 KiB a session on wasmhost and 42 KiB on
// mcp-proxy; gateways without a p99 at n are absent.
func scaleOutput(p99 map[int]map[string]float64) string {
	var b strings.Builder
	for _, n := range []int{1000, 10000} {
		prefix := "seq-setup-"
		if n > 1000 {
			prefix = "burst16-setup-"
		}
		for _, gw := range []string{"wasmhost", "mcp-proxy"} {
			v, ok := p99[n][gw]
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "%s-2 \t 1\t %d bytes/session\t %.0f %sp50-ns\t %.0f %sp99-ns\t 5.5 %stotal-s\t 400 calls/s\t 1 upstreams\t 6.4e+07 idle-rss\t 2.6e+08 loaded-rss\t 7.3e+07 after-rss\t 8.0 settle-s\t 0 ns/op\n",
				scaleBench(n, gw), map[string]int{"wasmhost": 21 << 10, "mcp-proxy": 42 << 10}[gw], v*1e5, prefix, v*1e6, prefix, prefix)
		}
	}
	return b.String()
}

func TestRenderScaleSetUpOneAtATime(t *testing.T) {
	r := newResults()
	// One at a time at 1,000, wasmhost is within the target and below
	// mcp-proxy; the 16-wide bursts at 10,000 are far above 20 ms and do
	// not decide.
	r.parse(0, []byte(scaleOutput(map[int]map[string]float64{
		1000:  {"wasmhost": 12, "mcp-proxy": 30},
		10000: {"wasmhost": 120, "mcp-proxy": 280},
	})))
	checks, section := renderScale(r)
	if len(checks) != 2 || checks[0].verdict != pass {
		t.Fatalf("checks: %+v", checks)
	}
	setup := checks[1]
	if setup.verdict != pass {
		t.Errorf("set-up check, 12 ms one at a time against mcp-proxy's 30 ms: %+v", setup)
	}
	for _, want := range []string{"12.00 ms one at a time (mcp-proxy 30.00 ms)", "16-wide burst at 10,000, context: 120.00 ms (mcp-proxy 280.00 ms)"} {
		if !strings.Contains(setup.measured, want) {
			t.Errorf("set-up check measured %q, want it to contain %q", setup.measured, want)
		}
	}
	for _, want := range []string{
		"wasmhost total 8.7 s, set-up p50 6.8 ms, p99 37 ms", // the baseline, quoted
		"1,000 sessions in 8.7 s is 8.7 ms a session",        // why one at a time
		"| 1000 | wasmhost | one at a time | 21 KiB | 1.20 ms | 12.00 ms | 5.5 s |",
		"| 10000 | mcp-proxy | 16-wide burst | 42 KiB | 28.00 ms | 280.00 ms | 5.5 s |",
		"BenchmarkSessionSetupFloor",
	} {
		if !strings.Contains(section, want) {
			t.Errorf("the section does not contain %q:\n%s", want, section)
		}
	}
}

func TestRenderScaleSetUpMiss(t *testing.T) {
	for name, p99 := range map[string]map[int]map[string]float64{
		"above 20 ms":       {1000: {"wasmhost": 25, "mcp-proxy": 30}, 10000: {"wasmhost": 10, "mcp-proxy": 20}},
		"above mcp-proxy's": {1000: {"wasmhost": 15, "mcp-proxy": 14}, 10000: {"wasmhost": 10, "mcp-proxy": 20}},
		"mcp-proxy missing": {1000: {"wasmhost": 15}, 10000: {"wasmhost": 10}},
	} {
		r := newResults()
		r.parse(0, []byte(scaleOutput(p99)))
		checks, _ := renderScale(r)
		if checks[1].verdict != miss {
			t.Errorf("%s: set-up check %+v, want a miss (the burst at 10,000 does not decide)", name, checks[1])
		}
	}
	r := newResults()
	r.parse(0, []byte(scaleOutput(map[int]map[string]float64{10000: {"wasmhost": 10, "mcp-proxy": 20}})))
	if checks, _ := renderScale(r); checks[1].verdict != "no data" {
		t.Errorf("only bursts measured: set-up check %+v, want no data", checks[1])
	}
}
