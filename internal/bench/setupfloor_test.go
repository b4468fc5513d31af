package bench

import (
	"fmt"
	"testing"
)

// BenchmarkSessionSetupFloor is a development aid that make bench does not
// run: it measures the client session set-up of BenchmarkSessionScale
// (initialize and initialized, each client then making its first call) at
// 1,000 client sessions held at once, the clients arriving one at a time
// (seq) and 16 at once (burst16), on wasmhost (its 10 filtered sessions)
// and on the minimal go-sdk relay (serveRelay: one go-sdk server, no
// session logic), in rounds that alternate between the two running
// processes, and reports wasmhost's p50 and p99 against the relay's (the
// median of the rounds' ratios; ≤ 1 means wasmhost's set-up is as fast as
// the go-sdk's own) and the medians of both p99s. The relay is the floor:
// what a client's set-up costs on this machine whatever the gateway does.
func BenchmarkSessionSetupFloor(b *testing.B) {
	const sessions, rounds = 1000, 3
	up := goUpstream(b)
	wh, err := startGatewayWith(b.Context(), b, "wasmhost", up, len(scaleFilters))
	if err != nil {
		b.Fatal(err)
	}
	defer wh.close()
	relay, err := startGatewayWith(b.Context(), b, "relay", up, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer relay.close()
	widths := []int{1, burstWidth}
	// By width: the rounds' ratios and p99s.
	p50s, p99s := make([][]float64, len(widths)), make([][]float64, len(widths))
	whP99, relayP99 := make([][]float64, len(widths)), make([][]float64, len(widths))
	for b.Loop() {
		for r := range rounds {
			for wi, width := range widths {
				var res [2]scaleResult
				order := []int{0, 1}
				if r%2 == 1 {
					order = []int{1, 0}
				}
				for _, i := range order {
					g := []*gateway{wh, relay}[i]
					if res[i], err = scale(b.Context(), g, up, sessions, width, 0, nil); err != nil {
						b.Fatalf("%v\n%s stderr:\n%s", err, g.name, g.stderr)
					}
				}
				p50s[wi] = append(p50s[wi], float64(res[0].setupP50)/float64(res[1].setupP50))
				p99s[wi] = append(p99s[wi], float64(res[0].setupP99)/float64(res[1].setupP99))
				whP99[wi] = append(whP99[wi], float64(res[0].setupP99.Nanoseconds()))
				relayP99[wi] = append(relayP99[wi], float64(res[1].setupP99.Nanoseconds()))
				fmt.Printf("round %d, %d at once: wasmhost set-up p50 %v p99 %v (all %v); relay p50 %v p99 %v (all %v)\n", r, width,
					res[0].setupP50, res[0].setupP99, res[0].setupTotal, res[1].setupP50, res[1].setupP99, res[1].setupTotal)
			}
		}
	}
	for wi, width := range widths {
		prefix := "seq-"
		if width != 1 {
			prefix = fmt.Sprintf("burst%d-", width)
		}
		b.ReportMetric(medianOf(p50s[wi]), prefix+"p50/relay")
		b.ReportMetric(medianOf(p99s[wi]), prefix+"p99/relay")
		b.ReportMetric(medianOf(whP99[wi]), prefix+"setup-p99-ns")
		b.ReportMetric(medianOf(relayP99[wi]), prefix+"relay-setup-p99-ns")
	}
	b.ReportMetric(0, "ns/op")
}
