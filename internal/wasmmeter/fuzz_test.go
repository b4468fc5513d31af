package wasmmeter

import "testing"

// FuzzInstrument feeds arbitrary bytes, starting from the testdata modules,
// to Instrument. It must never panic, and when it succeeds on an input that
// wazero compiles, wazero must compile its output.
func FuzzInstrument(f *testing.F) {
	for _, name := range testdataModules(f) {
		f.Add(readTestdata(f, name))
	}
	r := fuzzRuntime(f)
	f.Fuzz(func(t *testing.T, wasm []byte) {
		checkProperty(t, r, wasm, false)
	})
}
