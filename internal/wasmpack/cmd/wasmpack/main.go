// Command wasmpack packs the data segments of each module named on its
// command line, in place, as `wasmhost pack FILE` does. make go-plugins
// uses it: building cmd/wasmhost needs the embedded default plugin, which
// is what make go-plugins is building.
package main

import (
	"fmt"
	"os"

	"github.com/wasmhost/wasmhost/internal/wasmpack"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: wasmpack FILE...")
		os.Exit(2)
	}
	for _, f := range os.Args[1:] {
		r, err := wasmpack.PackFile(f, f, wasmpack.DefaultGap)
		if err != nil {
			fmt.Fprintf(os.Stderr, "wasmpack: %v\n", err)
			os.Exit(1)
		}
		fmt.Println(r)
	}
}
