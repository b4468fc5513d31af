package bench

import (
	"fmt"
	"testing"
)

// BenchmarkSessionSetupFloor is a development aid that make bench does not
// run: it measures the client session set-up of BenchmarkSessionScale
// (initialize and initialized, 16 at once, each client then making its
// first call) at 1,000 client sessions held at once, on wasmhost (its 10
// filtered sessions) and on the minimal go-sdk relay (serveRelay: one
// go-sdk server, no session logic), in rounds that alternate between the
// two running processes, and reports wasmhost's p50 and p99 against the
// relay's (the median of the rounds' ratios; ≤ 1 means wasmhost's set-up
// is as fast as the go-sdk's own). The relay is the floor: what a client's
// set-up costs on this machine whatever the gateway does.
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
	var p50s, p99s []float64
	var whP99, relayP99 []float64
	for b.Loop() {
		for r := range rounds {
			var res [2]scaleResult
			order := []int{0, 1}
			if r%2 == 1 {
				order = []int{1, 0}
			}
			for _, i := range order {
				g := []*gateway{wh, relay}[i]
				if res[i], err = scale(b.Context(), g, up, sessions, 0, nil); err != nil {
					b.Fatalf("%v\n%s stderr:\n%s", err, g.name, g.stderr)
				}
			}
			p50s = append(p50s, float64(res[0].setupP50)/float64(res[1].setupP50))
			p99s = append(p99s, float64(res[0].setupP99)/float64(res[1].setupP99))
			whP99 = append(whP99, float64(res[0].setupP99.Nanoseconds()))
			relayP99 = append(relayP99, float64(res[1].setupP99.Nanoseconds()))
			fmt.Printf("round %d: wasmhost set-up p50 %v p99 %v; relay p50 %v p99 %v\n", r, res[0].setupP50, res[0].setupP99, res[1].setupP50, res[1].setupP99)
		}
	}
	b.ReportMetric(medianOf(p50s), "p50/relay")
	b.ReportMetric(medianOf(p99s), "p99/relay")
	b.ReportMetric(medianOf(whP99), "setup-p99-ns")
	b.ReportMetric(medianOf(relayP99), "relay-setup-p99-ns")
	b.ReportMetric(0, "ns/op")
}
