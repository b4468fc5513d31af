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
func gatewayOutput(tps, p99 map[string]float64) string {
	var b strings.Builder
	for _, up := range gwUpstreams {
		for _, c := range gwClients {
			for _, gw := range gwNames {
				if _, ok := tps[gw]; !ok {
					continue
				}
				fmt.Fprintf(&b, "%s-2 \t 1\t 600.0 calls\t %.1f calls/s\t 1000 p50-ns\t %.0f p99-ns\n", gwBench(up, c, gw), tps[gw], p99[gw]*1e6)
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
	checks, section, chart := renderGateways(r, "docs/chart.svg")
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
	checks, section, chart := renderGateways(r, "c.svg")
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
