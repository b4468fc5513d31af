package wasmmeter

import (
	"os"
	"path/filepath"
	"testing"
)

// defaultPlugin is the committed default plugin, a Go wasip1 module of
// several MB: the module the host rewrites on every plugin load.
var defaultPlugin = filepath.Join("..", "..", "plugins", "policy-default", "policy-default.wasm")

func BenchmarkInstrumentDefault(b *testing.B) {
	wasm, err := os.ReadFile(defaultPlugin)
	if err != nil {
		b.Fatal(err)
	}
	out, err := Instrument(wasm, 10000)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(out)-len(wasm)), "grown-B")
	b.SetBytes(int64(len(wasm)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Instrument(wasm, 10000); err != nil {
			b.Fatal(err)
		}
	}
}
