package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// The gateways of BenchmarkGateways, in the order they are drawn, the
// upstreams and the concurrencies.
var (
	gwNames     = []string{"relay", "wasmhost", "mcp-proxy", "supergateway"}
	gwPeers     = []string{"mcp-proxy", "supergateway"}
	gwUpstreams = []string{"node", "go"}
	gwClients   = []int{1, 8, 64}
	gwColors    = map[string]string{"relay": "#9e9e9e", "wasmhost": "#1565c0", "mcp-proxy": "#ef6c00", "supergateway": "#2e7d32"}
)

// Targets of the gateway comparison (issue 29).
const (
	targetPeerRatio  = 2.0 // wasmhost's calls/s against every peer's
	targetRelayRatio = 0.9 // wasmhost's calls/s against the relay's
	targetRelayP99   = 1e6 // ns wasmhost's p99 may add to the relay's at 8 clients
)

func gwBench(up string, c int, gw string) string {
	return fmt.Sprintf("BenchmarkGateways/upstream=%s/c=%d/gw=%s", up, c, gw)
}

// p99Diff returns the median and range over rounds of target's p99 minus
// baseline's, in ns.
func (r *results) p99Diff(target, baseline string) (med, lo, hi float64, ok bool) {
	var xs []float64
	for _, round := range r.rounds(target) {
		t, ok1 := r.values[target][round]["p99-ns"]
		b, ok2 := r.values[baseline][round]["p99-ns"]
		if ok1 && ok2 {
			xs = append(xs, t-b)
		}
	}
	med, ok = median(xs)
	if !ok {
		return 0, 0, 0, false
	}
	return med, slices.Min(xs), slices.Max(xs), true
}

// The CPU time per call BenchmarkGateways reports, in µs: the load
// generator's, the gateway process's, and that of the processes it started
// (its upstreams).
const (
	cpuLoad     = "load-cpu-us/call"
	cpuGateway  = "gw-cpu-us/call"
	cpuUpstream = "up-cpu-us/call"
)

// A cpuSplit is the median CPU time per call of one cell, in µs.
type cpuSplit struct{ load, gateway, upstream float64 }

// cpuOf returns the CPU split of a BenchmarkGateways cell, if it has one.
func (r *results) cpuOf(bench string) (cpuSplit, bool) {
	l, ok1 := r.median(bench, cpuLoad)
	g, ok2 := r.median(bench, cpuGateway)
	u, ok3 := r.median(bench, cpuUpstream)
	return cpuSplit{l, g, u}, ok1 && ok2 && ok3
}

// whatItTakes says what 2x peer's calls/s would take in the cell (up, c)
// on cpus CPUs, from the CPU each call cost there: at one client, the
// round trip it means next to the CPU the load generator and the upstream
// spend per call; at more, where calls overlap and the CPUs are shared,
// the CPU a gateway may spend per call to get there, beside wasmhost's
// and the relay's (CPU is conserved: calls/s × CPU per call ≤ cpus).
func (r *results) whatItTakes(up string, c int, peer string, cpus int) string {
	w, ok := r.cpuOf(gwBench(up, c, "wasmhost"))
	pt, okp := r.median(gwBench(up, c, peer), "calls/s")
	if !ok || !okp || pt <= 0 {
		return ""
	}
	need := targetPeerRatio * pt
	if c == 1 {
		return fmt.Sprintf("2x is a round trip of %.0f µs, in which the load generator and the upstream spend %.0f µs of CPU per call and wasmhost %.0f µs", 1e6/need, w.load+w.upstream, w.gateway)
	}
	others := w.load + w.upstream
	ceiling := float64(cpus) * 1e6 / others
	budget := float64(cpus)*1e6/need - others
	rel := "n/a"
	if rc, ok := r.cpuOf(gwBench(up, c, "relay")); ok {
		rel = fmt.Sprintf("%.0f µs", rc.gateway)
	}
	if budget <= 0 {
		return fmt.Sprintf("2x is %.0f calls/s, more than the %d CPUs allow any gateway here, even one that costs nothing (the load generator and the upstream spend %.0f µs per call: at most %.0f calls/s)", need, cpus, others, ceiling)
	}
	return fmt.Sprintf("2x is %.0f calls/s: with the load generator and the upstream spending %.0f µs of CPU per call, a gateway may spend %.0f µs per call to reach it on %d CPUs (wasmhost spends %.0f µs, the relay %s)", need, others, budget, cpus, w.gateway, rel)
}

// renderGateways returns the summary lines and the section of the gateway
// comparison, and the chart (SVG) it links to as chartPath; cpus is the
// machine's CPU count.
func renderGateways(r *results, chartPath string, cpus int) ([]check, string, string) {
	var sec strings.Builder
	s := func(format string, args ...any) { fmt.Fprintf(&sec, format, args...) }
	var checks []check

	// Peers against wasmhost: the worst cell decides.
	worstPeer, worstPeerOK, peerCells := math.Inf(1), true, 0
	p99Below := true
	worstRelay, relayCells := math.Inf(1), 0
	worstAdded := math.Inf(-1)
	var missingPeers []string
	for _, peer := range gwPeers {
		for _, up := range gwUpstreams {
			if len(r.rounds(gwBench(up, 1, peer))) == 0 {
				missingPeers = append(missingPeers, peer+" ("+up+")")
			}
		}
	}
	for _, up := range gwUpstreams {
		for _, c := range gwClients {
			w := gwBench(up, c, "wasmhost")
			for _, peer := range gwPeers {
				q, ok := r.ratio(w, gwBench(up, c, peer), "calls/s", false)
				if !ok {
					continue
				}
				peerCells++
				worstPeer = min(worstPeer, q.med)
				if r.num(w, "p99-ns") >= r.num(gwBench(up, c, peer), "p99-ns") {
					p99Below = false
				}
			}
			if q, ok := r.ratio(w, gwBench(up, c, "relay"), "calls/s", false); ok {
				relayCells++
				worstRelay = min(worstRelay, q.med)
			}
			if c == 8 {
				if d, _, _, ok := r.p99Diff(w, gwBench(up, c, "relay")); ok {
					worstAdded = max(worstAdded, d)
				}
			}
		}
	}
	if len(missingPeers) > 0 {
		worstPeerOK = false
	}
	peerMeasured := "n/a"
	if peerCells > 0 {
		peerMeasured = fmt.Sprintf("%.2fx at worst (%d cells), p99 below every peer's: %v", worstPeer, peerCells, p99Below)
	}
	if len(missingPeers) > 0 {
		peerMeasured += "; missing: " + strings.Join(missingPeers, ", ")
	}
	checks = append(checks, check{"j", "tool calls/s through wasmhost over streamable HTTP against the peer gateways, 1/8/64 clients, Node and Go upstreams", "mcp-proxy, supergateway (npm, pinned), same run",
		"BenchmarkGateways/*/wasmhost vs mcp-proxy, supergateway", peerMeasured, "≥ 2x every peer in every cell, p99 below every peer's",
		verdict(worstPeerOK && worstPeer >= targetPeerRatio && p99Below, peerCells > 0)})
	relayMeasured := "n/a"
	if relayCells > 0 {
		relayMeasured = fmt.Sprintf("%.2fx at worst (%d cells); p99 added at 8 clients %s at worst", worstRelay, relayCells, signedDur(worstAdded))
	}
	checks = append(checks, check{"k", "tool calls/s through wasmhost over streamable HTTP against the minimal go-sdk relay", "go-sdk server forwarding to a go-sdk client, same run",
		"BenchmarkGateways/*/wasmhost vs relay", relayMeasured, "≥ 0.9x in every cell, p99 added ≤ 1 ms at 8 clients",
		verdict(worstRelay >= targetRelayRatio && worstAdded <= targetRelayP99, relayCells > 0)})

	s("### j, k. Gateways over streamable HTTP\n\n")
	s("`BenchmarkGateways` drives four gateways, each a process of its own with the upstream behind it over stdio, from one Go load generator " +
		"(go-sdk clients over streamable HTTP, protocol 2025-11-25, one client session each, connected before the clock starts and warmed up with two calls each): " +
		"the minimal go-sdk relay (a go-sdk streamable HTTP server whose tool handlers forward each call's raw arguments through one go-sdk client of the upstream: no sessions, policy or routing; the floor of any gateway on the go-sdk), " +
		"wasmhost (the daemon with its defaults, one session, the upstream pooled), " +
		"`mcp-proxy` 6.7.19 (one upstream client shared by its client sessions, as wasmhost's pool) and `supergateway` 4.0.0 `--stateful` (one upstream process per client session, as it is built to), from npm. " +
		"Upstreams: Node is `@modelcontextprotocol/server-everything`'s `echo`, Go is the project's demo server's `echo`. " +
		"Each load is bounded: 1,500 calls or 3 s at 1 client, 2,000 calls or 3 s at 8, 3,000 calls or 4 s at 64. " +
		"The gateways of one upstream are measured in turn at each concurrency, so one invocation interleaves them; the invocation runs in rounds, and every figure below is the median of per-round ratios between two gateways measured in the same round, with their range.\n\n")
	if len(r.missing) > 0 {
		s("Missing peers (not installed or not started, measured nowhere):\n\n")
		for _, m := range r.missing {
			s("- %s\n", m)
		}
		s("\n")
	}
	s("![calls/s and p99 per gateway and concurrency](%s)\n\n", chartPath)
	for _, up := range gwUpstreams {
		s("**%s upstream.** wasmhost's calls/s against each gateway's (≥ 1 means wasmhost is faster), and each gateway's p99 against wasmhost's (≥ 1 means wasmhost's is lower):\n\n", map[string]string{"node": "Node", "go": "Go"}[up])
		s("| against | calls/s c=1 | c=8 | c=64 | p99 c=1 | c=8 | c=64 |\n|---|---|---|---|---|---|---|\n")
		for _, gw := range gwNames {
			if gw == "wasmhost" {
				continue
			}
			var tps, p99s []string
			for _, c := range gwClients {
				w := gwBench(up, c, "wasmhost")
				q, ok := r.ratio(w, gwBench(up, c, gw), "calls/s", false)
				tps = append(tps, fmtRatio(q, ok))
				q, ok = r.ratio(gwBench(up, c, gw), w, "p99-ns", false)
				p99s = append(p99s, fmtRatio(q, ok))
			}
			s("| %s | %s | %s |\n", gw, strings.Join(tps, " | "), strings.Join(p99s, " | "))
		}
		var added []string
		for _, c := range gwClients {
			d, lo, hi, ok := r.p99Diff(gwBench(up, c, "wasmhost"), gwBench(up, c, "relay"))
			if ok {
				added = append(added, fmt.Sprintf("%s (%s to %s) at c=%d", signedDur(d), signedDur(lo), signedDur(hi), c))
			}
		}
		s("\np99 wasmhost adds to the relay's: %s.\n\n", strings.Join(added, ", "))
	}
	// The cells where wasmhost is below the peer target, each with the
	// minimal relay's own ratio to that peer in the same rounds: what any
	// gateway on the go-sdk reaches there.
	var below []string
	for _, up := range gwUpstreams {
		for _, c := range gwClients {
			for _, peer := range gwPeers {
				q, ok := r.ratio(gwBench(up, c, "wasmhost"), gwBench(up, c, peer), "calls/s", false)
				if !ok || q.med >= targetPeerRatio {
					continue
				}
				f, ok := r.ratio(gwBench(up, c, "relay"), gwBench(up, c, peer), "calls/s", false)
				line := fmt.Sprintf("%s c=%d against %s: wasmhost %.2fx, relay %s", up, c, peer, q.med, fmtRatio(f, ok))
				if takes := r.whatItTakes(up, c, peer, cpus); takes != "" {
					line += "; " + takes
				}
				below = append(below, line)
			}
		}
	}
	if len(below) > 0 {
		s("Cells below %.0fx a peer, with the minimal go-sdk relay's calls/s against the same peer in the same rounds, and what 2x would take (from the CPU time per call below):\n\n", targetPeerRatio)
		for _, line := range below {
			s("- %s.\n", line)
		}
		s("\n")
	}
	s("Where the time goes. The CPU table below splits each call's CPU time between the load generator, the gateway's process and the upstreams it started. " +
		"Where many clients share the Go upstream, the two vCPUs are nearly always busy, so calls/s is about 2 CPU-seconds divided by the CPU all three processes spend per call: CPU a gateway saves turns into calls/s only in proportion to its share. " +
		"wasmhost's own process spends no more CPU per call than the relay's, and the load generator and the upstream, both go-sdk programs, spend about as much each; the list above says for each missed cell how little a gateway would have to spend to reach 2x. " +
		"A CPU profile of wasmhost (`BenchmarkGatewayProfile`, a development aid outside `make bench`: 8 clients on the Go upstream for 5 s, run on 2026-12-03 with the machine quiet) shows 0.54 CPU-seconds per second, of which " +
		"the go-sdk's JSON decoding 21%% (segmentio's `Decoder`, which allocates and clears a fresh buffer of more than 32 KiB for every message it reads, from the upstream's pipe and from each HTTP request), system calls 15%% (a read and a write per message on each leg), the garbage collector 13%% (mostly those buffers) and stack growth 5%% (goroutines the go-sdk starts for each request); " +
		"wasmhost's own layers (token check, draining gate, carrier and gone-client wrappers, route lookup, `_meta` copy) are thin wrappers in the cumulative profile, under 2%% flat. " +
		"Until 2026-12-03 wasmhost also flushed each call's response headers as the call started, to keep a long call's stream alive: an extra write and packet per call, a tenth of its CPU in that profile. " +
		"The headers now go out once a call has been under way for a second (its first keep-alive comment follows at 15 s of silence), and a call answered sooner leaves in one write, as the go-sdk writes it (session/keepalive.go, `TestStartCallWritesNothingUntilTheKeepAlive`, `TestCallHeadersBeforeTheFirstComment`). " +
		"What would close the missed cells: less CPU per message in the go-sdk, on both sides of every leg (decoding with a reused buffer instead of a fresh `Decoder` per message would remove about a fifth of wasmhost's CPU and much of its GC work, and the same in the upstream and the load generator), a change that belongs in the go-sdk; " +
		"decoding and writing JSON-RPC by hand on wasmhost's data path, which would give up the go-sdk's handling of every message on both legs (the fidelity the project builds on) for at most wasmhost's share of the CPU; " +
		"or several upstream processes per server, which wasmhost does not run, because an MCP connection carries state (subscriptions, the log level, requests from the server to its client) that a client session must find on the one connection it was made on. " +
		"On a quiet machine the peers are much faster than in issue 29's table, which was measured under load. " +
		"Against the relay, a cell below 0.9x moves from round to round on a loaded machine (see the ranges), and a quiet machine is what makes these ratios a verdict.\n\n")
	s("Medians of the absolute figures, context only (the machine is shared):\n\n")
	s("| upstream | gateway | calls/s c=1 | c=8 | c=64 | p50 c=1 | c=8 | c=64 | p99 c=1 | c=8 | c=64 |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, up := range gwUpstreams {
		for _, gw := range gwNames {
			var cols []string
			for _, unit := range []string{"calls/s", "p50-ns", "p99-ns"} {
				for _, c := range gwClients {
					v, ok := r.median(gwBench(up, c, gw), unit)
					switch {
					case !ok:
						cols = append(cols, "n/a")
					case unit == "calls/s":
						cols = append(cols, fmt.Sprintf("%.0f", v))
					default:
						cols = append(cols, dur(v))
					}
				}
			}
			s("| %s | %s | %s |\n", up, gw, strings.Join(cols, " | "))
		}
	}
	s("\nCPU time per call in µs, load generator / gateway / upstreams, medians over the rounds (the gateway's and its descendants' from /proc at the start and end of each load, in 10 ms ticks; the load generator's from its own rusage):\n\n")
	s("| upstream | gateway | c=1 | c=8 | c=64 |\n|---|---|---|---|---|\n")
	for _, up := range gwUpstreams {
		for _, gw := range gwNames {
			var cols []string
			for _, c := range gwClients {
				if cs, ok := r.cpuOf(gwBench(up, c, gw)); ok {
					cols = append(cols, fmt.Sprintf("%.0f / %.0f / %.0f", cs.load, cs.gateway, cs.upstream))
				} else {
					cols = append(cols, "n/a")
				}
			}
			s("| %s | %s | %s |\n", up, gw, strings.Join(cols, " | "))
		}
	}
	s("\n")
	return checks, sec.String(), gatewayChart(r)
}

// signedDur formats a difference of nanoseconds with its sign.
func signedDur(ns float64) string {
	if math.IsInf(ns, 0) || math.IsNaN(ns) {
		return "n/a"
	}
	if ns < 0 {
		return "−" + dur(-ns)
	}
	return "+" + dur(ns)
}

// gatewayChart draws, for each upstream, the median calls/s and p99 of
// every gateway at every concurrency as grouped bars: four panels.
func gatewayChart(r *results) string {
	const (
		panelW, panelH = 460, 260
		left, top      = 60, 40
		plotW, plotH   = panelW - left - 20, panelH - top - 50
	)
	var b strings.Builder
	w, h := 2*panelW, 2*panelH+40
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	for row, metric := range []struct{ unit, title string }{{"calls/s", "calls/s (higher is better)"}, {"p99-ns", "p99 latency, ms (lower is better)"}} {
		for col, up := range gwUpstreams {
			x0, y0 := col*panelW, row*panelH
			vals := make(map[string]map[int]float64)
			maxV := 0.0
			for _, gw := range gwNames {
				vals[gw] = make(map[int]float64)
				for _, c := range gwClients {
					if v, ok := r.median(gwBench(up, c, gw), metric.unit); ok {
						if metric.unit == "p99-ns" {
							v /= 1e6
						}
						vals[gw][c] = v
						maxV = max(maxV, v)
					}
				}
			}
			scale := niceCeil(maxV)
			fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="13" font-weight="bold">%s upstream: %s</text>`+"\n", x0+left, y0+22, map[string]string{"node": "Node", "go": "Go"}[up], metric.title)
			// Axis and grid.
			for i := 0; i <= 4; i++ {
				y := float64(y0+top+plotH) - float64(plotH)*float64(i)/4
				fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", x0+left, y, x0+left+plotW, y)
				fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", x0+left-4, y+4, trimNum(scale*float64(i)/4))
			}
			groupW := float64(plotW) / float64(len(gwClients))
			barW := (groupW - 20) / float64(len(gwNames))
			for gi, c := range gwClients {
				gx := float64(x0+left) + groupW*float64(gi) + 10
				for bi, gw := range gwNames {
					v, ok := vals[gw][c]
					bx := gx + barW*float64(bi)
					if !ok {
						fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#b00">n/a</text>`+"\n", bx+barW/2, y0+top+plotH-4)
						continue
					}
					bh := 0.0
					if scale > 0 {
						bh = float64(plotH) * v / scale
					}
					fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s c=%d: %s</title></rect>`+"\n",
						bx, float64(y0+top+plotH)-bh, barW-2, bh, gwColors[gw], gw, c, trimNum(v))
				}
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d client%s</text>`+"\n", gx+(groupW-20)/2, y0+top+plotH+16, c, map[bool]string{true: "", false: "s"}[c == 1])
			}
		}
	}
	// Legend.
	for i, gw := range gwNames {
		x := 60 + i*150
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", x, 2*panelH+12, gwColors[gw], x+16, 2*panelH+22, gw)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// trimNum formats a chart value with at most three significant digits.
func trimNum(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// Targets of session scale (issue 29).
const (
	targetBytesPerSession = 32 << 10 // RSS per idle client session
	targetSetupP99        = 20e6     // ns, set-up p99 at 1,000 client sessions arriving one at a time
)

func scaleBench(n int, gw string) string {
	return fmt.Sprintf("BenchmarkSessionScale/sessions=%d/gw=%s", n, gw)
}

// An arrival is how BenchmarkSessionScale's clients came to be set up:
// the prefix of its set-up units and how the report names it.
type arrival struct{ prefix, label string }

// The arrivals of BenchmarkSessionScale: one at a time at 1,000 client
// sessions (the verdict's), a 16-wide burst at 10,000.
var (
	arriveSeq     = arrival{"seq-setup-", "one at a time"}
	arriveBurst16 = arrival{"burst16-setup-", "16-wide burst"}
)

// setupOf returns how bench's clients arrived and the medians of its
// set-up p50, p99 (ns) and total (s), if it measured any.
func (r *results) setupOf(bench string) (a arrival, p50, p99, total float64, ok bool) {
	for _, a := range []arrival{arriveSeq, arriveBurst16} {
		if p99, ok := r.median(bench, a.prefix+"p99-ns"); ok {
			return a, r.num(bench, a.prefix+"p50-ns"), p99, r.num(bench, a.prefix+"total-s"), true
		}
	}
	return arrival{}, 0, 0, 0, false
}

// setupFloorFinding is what BenchmarkSessionSetupFloor, a development aid
// outside make bench, measured when it was last run by hand (go test -run
// '^$' -bench BenchmarkSessionSetupFloor -benchtime 1x ./internal/bench).
const setupFloorFinding = "`BenchmarkSessionSetupFloor` (a development aid outside `make bench`) sets up 1,000 client sessions on wasmhost and on the minimal go-sdk relay (one go-sdk server, no session logic: what a set-up costs on this machine whatever the gateway does), " +
	"one at a time and in a 16-wide burst, in three rounds alternating the two processes; run once on 2026-12-02 with the load average (1 min) at 15.6 to 19.6, " +
	"one at a time wasmhost's set-up p99 was 13.47 ms against the relay's 16.01 ms (medians of the rounds; per-round ratio 0.84x, 0.53–1.56x), at the go-sdk's own floor, " +
	"and in the 16-wide burst 178.87 ms against 117.84 ms (1.40x, 0.84–1.52x), both gateways' burst p99 being mostly the queue for the 2 cores, moving to either side of the relay's from round to round."

// renderScale returns the summary lines and the section of the session
// scale benchmark.
func renderScale(r *results) ([]check, string) {
	var sec strings.Builder
	s := func(format string, args ...any) { fmt.Fprintf(&sec, format, args...) }
	w10, p10 := scaleBench(10000, "wasmhost"), scaleBench(10000, "mcp-proxy")
	w1, p1 := scaleBench(1000, "wasmhost"), scaleBench(1000, "mcp-proxy")
	bw, okb := r.median(w10, "bytes/session")
	bp, okp := r.median(p10, "bytes/session")
	sw, oks := r.median(w1, arriveSeq.prefix+"p99-ns")
	sp, oksp := r.median(p1, arriveSeq.prefix+"p99-ns")
	ups, oku := r.median(w10, "upstreams")
	var checks []check
	checks = append(checks, check{"l", "RSS per client session, 10,000 held over 10 filtered sessions and one pooled upstream", "the gateway's idle RSS; mcp-proxy at the same count, same run",
		"BenchmarkSessionScale/sessions=10000", fmt.Sprintf("%s (mcp-proxy %s); upstream processes %.0f", kib(bw), kibOr(bp, okp), ups),
		"≤ 32 KiB, below mcp-proxy's, upstream started once", verdict(bw <= targetBytesPerSession && okp && bw < bp && ups == 1, okb && oku)})
	setupMeasured := fmt.Sprintf("%s one at a time (mcp-proxy %s)", durOr(sw, oks), durOr(sp, oksp))
	bw99, okbw := r.median(w10, arriveBurst16.prefix+"p99-ns")
	bp99, okbp := r.median(p10, arriveBurst16.prefix+"p99-ns")
	if okbw || okbp {
		setupMeasured += fmt.Sprintf("; 16-wide burst at 10,000, context: %s (mcp-proxy %s)", durOr(bw99, okbw), durOr(bp99, okbp))
	}
	checks = append(checks, check{"l", "client session set-up p99 at 1,000 client sessions, the clients arriving one at a time as in issue 29's baseline", "mcp-proxy at the same count and arrival, same run",
		"BenchmarkSessionScale/sessions=1000", setupMeasured,
		"≤ 20 ms, below mcp-proxy's", verdict(sw <= targetSetupP99 && oksp && sw < sp, oks)})
	s("### l. Session scale\n\n")
	s("`BenchmarkSessionScale` holds 1,000 and then 10,000 client sessions at once (go-sdk clients over streamable HTTP, protocol 2025-11-25, each making its first call as soon as it is set up) " +
		"on wasmhost (10 sessions with different tool filters over one pooled upstream, the Go demo server; each session takes a tenth of the clients) and on mcp-proxy (its one endpoint; one upstream client shared by its sessions), each a fresh process. " +
		"Memory is the gateway process's RSS once every client session is set up, beyond its idle RSS (after one client per endpoint came and went), divided by the client sessions; " +
		"calls/s is 32 callers taking the held sessions in turn (3,000 calls or 4 s). Then every client closes its session (DELETE) and the RSS is read until it is back within a tenth of the growth (at most 30 s).\n\n")
	s("**How set-up is measured, and why.** Set-up is a client's initialize and initialized, timed by the client. " +
		"The target (p99 ≤ 20 ms at 1,000 client sessions) is issue 29's, and so is the method: its baseline table reads \"at 1,000 client sessions, each set up and making its first call (Go upstream): wasmhost total 8.7 s, set-up p50 6.8 ms, p99 37 ms\". " +
		"1,000 sessions in 8.7 s is 8.7 ms a session, a p50 set-up and a first call: those clients arrived one at a time. " +
		"So at 1,000 the clients here arrive one at a time too (each sets up its session and makes its first call before the next comes, the sessions before it still held), and that p99 is the figure the verdict reads. " +
		"At 10,000, one at a time would make the run long, so 16 clients are set up at once (each taking the next when its first call is made), which bounds the run in time; " +
		"those percentiles are labelled a 16-wide burst and are context, not a client's set-up: on this machine (2 cores, shared with the load generator and the upstream) they measure mostly how long 16 clients queue for 2 cores. " +
		"wasmhost and mcp-proxy are measured the same way at each count, in the same run. Set-up total is the time to set up every client session, first calls included (the issue's 8.7 s).\n\n")
	s("%s\n\n", setupFloorFinding)
	s("| client sessions | gateway | clients arriving | RSS per session | set-up p50 | set-up p99 | set-up total | calls/s | upstream processes | RSS idle → loaded → after close (waited) |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, n := range []int{1000, 10000} {
		for _, gw := range []string{"wasmhost", "mcp-proxy"} {
			b := scaleBench(n, gw)
			if len(r.rounds(b)) == 0 {
				s("| %d | %s | n/a | | | | | | | |\n", n, gw)
				continue
			}
			a, p50, p99, total, ok := r.setupOf(b)
			arriving, setup := "n/a", "n/a | n/a | n/a"
			if ok {
				arriving, setup = a.label, fmt.Sprintf("%s | %s | %.1f s", dur(p50), dur(p99), total)
			}
			s("| %d | %s | %s | %s | %s | %.0f | %.0f | %.0f → %.0f → %.0f MiB (%.1f s) |\n", n, gw, arriving, kib(r.num(b, "bytes/session")), setup,
				r.num(b, "calls/s"), r.num(b, "upstreams"),
				r.num(b, "idle-rss")/(1<<20), r.num(b, "loaded-rss")/(1<<20), r.num(b, "after-rss")/(1<<20), r.num(b, "settle-s"))
		}
	}
	s("\n")
	return checks, sec.String()
}

func kibOr(v float64, ok bool) string {
	if !ok {
		return "missing"
	}
	return kib(v)
}

func durOr(v float64, ok bool) string {
	if !ok {
		return "missing"
	}
	return dur(v)
}

// seriesRatio is the median and range over rounds of a benchmark's own
// ratio metric (one measured within each invocation, such as a median of
// paired ratios).
func (r *results) seriesRatio(name, unit string) (ratio, bool) {
	xs := r.series(name, unit)
	med, ok := median(xs)
	if !ok {
		return ratio{}, false
	}
	return ratio{med: med, lo: slices.Min(xs), hi: slices.Max(xs), n: len(xs)}, true
}

// renderUpstreamScale returns the summary line and the section of the
// upstream scale benchmark.
func renderUpstreamScale(r *results) ([]check, string) {
	var sec strings.Builder
	s := func(format string, args ...any) { fmt.Fprintf(&sec, format, args...) }
	const b = "BenchmarkUpstreamScale"
	one, ok1 := r.median(b, "reload-one-ns")
	ten, ok2 := r.median(b, "reload-ten-ns")
	none, _ := r.median(b, "reload-none-ns")
	share := one / ten
	checks := []check{{"m", "reload changing one of 200 pooled servers' metadata, behind 50 sessions", "the next reload, changing nine servers' more, same process",
		b, fmt.Sprintf("%.0f%% of it (%s against %s; unchanged %s)", 100*share, dur(one), dur(ten), dur(none)), "grows with what changed: ≤ 25%",
		verdict(share <= 0.25, ok1 && ok2)}}
	s("### m. Upstream scale\n\n")
	s("`BenchmarkUpstreamScale` starts wasmhost (a process of its own) on a config of 200 pooled servers, each the project's demo server over stdio, behind 50 sessions that each use all of them (10,000 views). "+
		"It reports the time from the start of the process to ready (the first reload applied, every upstream started): %.1f s; "+
		"the RSS of wasmhost, %.0f MiB, and of its 200 upstream processes together, %.0f MiB; "+
		"and three reloads through the admin API, each rewriting the config file: one changing one server's metadata (its trust) in every session (50 views), %s; the next changing nine servers' more (450 views), %s; one changing nothing, %s. "+
		"The upstreams are not restarted by any of them (the benchmark fails otherwise). "+
		"A development run (2026-12-02, load average near 30) of a reload changing all 200 servers' trust (10,000 views, each re-keyed, re-projected and re-registered in its session's go-sdk server) took 194.3 s against 1.30 s for one server and 0.33 s for none: "+
		"the cost follows what changed, but a changed view cost about 19 ms on that machine with the daemon's registries, against `BenchmarkReconcileMetadata`'s 10,000 views in tens of milliseconds with minimal registries. "+
		"The cause was the session endpoint's naming: each registration of one server's tools resolved the names of every tool of the session (their candidate names counted and sorted again), so a reload that re-registers each of a session's 200 servers in turn cost the square of its tools; "+
		"the endpoint now keeps an index of the candidate names and resolves only the tools a registration touches and those sharing a name with them (session/names.go, `TestPutToolsLooksAtItsOwn`). "+
		"`BenchmarkReloadAllServers` (a development aid: every server's settings changed, 200 views, auto naming, tools named alike on every server) gives the cost per view against one project call measured in the same run: with 100 servers a session, 18.3x before and 1.0-2.3x after, now the same as with 25 servers a session. "+
		"What a changed view costs now is mostly the go-sdk's `AddTool`, which encodes and decodes each tool's input schema twice (about 60%% of the CPU of such a reload of the daemon). "+
		"The target compares two reloads that both pay a reload's fixed cost, so that cost must stay small: on 2026-12-03 a reload changing nothing took 30.85 ms and the check missed (31%%). "+
		"Most of it grew with the servers and sessions, not with what changed: the check of the new settings against the running policy located every one of the 10,000 (session, server) pairs (sorting the 200 server names again for each session) before dropping the unchanged ones, the naming step sorted them again for each session, and the embedded policy plugin's bytes were hashed again on every reload. "+
		"The check now compares each pair's settings in one reused buffer and drops an unchanged pair before it locates it, the names are sorted once a reload, and the embedded plugin's digest is its package's constant (reconcile/check.go, daemon/endpoints.go, daemon/policy.go). "+
		"`BenchmarkReloadUnchanged` (daemon; the same 200 servers behind 50 sessions in one process, upstreams in memory, 100 reloads) measured 16.5 and 17.4 ms a reload (36,727 allocations) before and 7.5 and 7.0 ms (15,181) after, run alternately at a load average near 1.5; "+
		"this benchmark alone, run alternately at a load average of 0.6-2.6 on a development machine, gave one-change against nine-change 26%%, 18%% and 15%% before and 11%%, 8%% and 9%% after. "+
		"The measurement itself waits on nothing but the admin request: no poll, no sleep; the file watcher's reload of the rewritten file comes 200 ms after the last write (its debounce), after the three reloads unless the nine-server reload takes longer than that.\n\n",
		r.num(b, "ready-s"), r.num(b, "gateway-rss")/(1<<20), r.num(b, "upstreams-rss")/(1<<20), dur(one), dur(ten), dur(none))
	return checks, sec.String()
}
