// Rebuild hostile.wasm (byte-reproducible, standard Go toolchain; `make
// go-plugins` runs both steps):
//
//	cd testplugins/hostile-go/hostile && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o hostile.wasm .
//	go run ./internal/wasmpack/cmd/wasmpack testplugins/hostile-go/hostile/hostile.wasm   # from the repository root
//
// The output is byte-reproducible for a given Go toolchain and go.sum as long
// as VCS stamping is off (GOFLAGS=-buildvcs=false). `make plugins` rebuilds
// it too.

//go:build wasip1

// Command hostile is a test policy plugin speaking ABI v1 that misbehaves
// on request. Settings without a "mode" key (or with "mode": "good") get the
// default policy's answers (metakey.Reference), so a test can show that the
// rest of the system keeps working around the misbehaving calls.
//
// A settings object selects a misbehaviour with keys the default policy
// ignores: the directive type lists them, and README.md in
// testplugins/hostile-go says what the host reports for each. A
// canonicalize call misbehaves when one of its settings objects asks for
// it. The key of a settings object with a mode other than "good" ends in
// " mode=MODE" (" in=EXPORT"), so a view's key changes with the mode and a
// project-only mode reaches the project export. It imports abi, metakey
// and sandboxprobe; only the "sandbox" mode reaches for anything outside
// its input.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/extism/go-pdk"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/metakey"
)

//lint:file-ignore U1000 the exports are called by the host through //go:wasmexport

func main() {}

// handshakeJSON is the output of the handshake export.
const handshakeJSON = `{"abi":1,"name":"hostile","version":"1.0.0"}`

// defaultSpin is the number of busy-loop iterations of the "slow" mode:
// about 200 ms of CPU time under wazero on a current x86-64 machine.
const defaultSpin = 6_000_000

// maxStack is the goroutine stack limit of the "recurse" mode, so that the
// runaway recursion ends as a Go stack overflow rather than by exhausting
// the memory cap while the stack grows.
const maxStack = 16 << 20

// A directive is the misbehaviour one settings object asks for, with these
// keys:
//
//	"mode": "panic"    a Go panic
//	        "bomb"     grow a Go slice until the memory cap refuses more
//	        "recurse"  runaway recursion until the Go stack overflows
//	        "loop"     an infinite loop
//	        "big"      a well-formed answer larger than abi.MaxOutputBytes
//	        "shape"    a well-formed answer of the wrong shape: one result
//	                   short (canonicalize), an unknown tool index (project)
//	        "fields"   canonicalize results without key or error (project
//	                   answers normally)
//	        "sandbox"  canonicalize reports, as each canonical form, what the
//	                   plugin could read from the sandbox (files, environment,
//	                   clock, randomness, network; project answers normally)
//	        "rename"   project renames the first visible tool to "renamed"
//	                   and redescribes it, although the handshake does not
//	                   opt into renames (abi/SPEC.md section 5.3)
//	        "slow"     spin the CPU ("spin" iterations, ~200 ms by default),
//	                   then answer normally
//	        "good"     answer normally
//	"in":   "canonicalize" or "project" limits the mode to that export; the
//	        other one answers normally. Missing: both.
//	"spin": iterations of the "slow" mode's busy loop.
//	"probePath": one more file the "sandbox" mode tries to read.
//	"probeEnv":  one more environment variable the "sandbox" mode looks up.
//
// Each of these keys is read on its own; a value of another JSON type is
// ignored.
type directive struct {
	Mode string
	In   string
	Spin int64
	Path string
	Env  string
}

// parseDirective reads the directive keys of a settings object, each on its
// own; anything that is not an object asks for nothing.
func parseDirective(settings json.RawMessage) directive {
	var obj map[string]json.RawMessage
	if json.Unmarshal(settings, &obj) != nil {
		return directive{}
	}
	var d directive
	for key, dst := range map[string]any{"mode": &d.Mode, "in": &d.In, "spin": &d.Spin, "probePath": &d.Path, "probeEnv": &d.Env} {
		if v, ok := obj[key]; ok {
			_ = json.Unmarshal(v, dst)
		}
	}
	return d
}

// appliesTo reports whether d asks export to misbehave.
func (d directive) appliesTo(export string) bool {
	return d.Mode != "" && d.Mode != "good" && (d.In == "" || d.In == export)
}

// keySuffix is what d adds to a key.
func (d directive) keySuffix() string {
	if d.Mode == "" || d.Mode == "good" {
		return ""
	}
	s := " mode=" + d.Mode
	if d.In != "" {
		s += " in=" + d.In
	}
	return s
}

//go:wasmexport handshake
func handshake() int32 {
	pdk.OutputString(handshakeJSON)
	return 0
}

//go:wasmexport canonicalize
func canonicalize() int32 {
	const export = abi.ExportCanonicalize
	var req abi.CanonicalizeRequest
	if err := json.Unmarshal(pdk.Input(), &req); err != nil {
		return refuse("canonicalize: reading the request: %v", err)
	}
	dirs := make([]directive, len(req.Settings))
	var act directive // the first directive that applies to this export
	for i, s := range req.Settings {
		dirs[i] = parseDirective(s)
		if act.Mode == "" && dirs[i].appliesTo(export) {
			act = dirs[i]
		}
	}
	if !misbehaveFirst(export, act) {
		return refuse("canonicalize: unknown mode %q", act.Mode)
	}
	resp, err := metakey.Reference{}.Canonicalize(context.Background(), &req)
	if err != nil {
		return refuse("canonicalize: %v", err)
	}
	for i := range resp.Results {
		if r := &resp.Results[i]; r.Error == "" {
			r.Key += dirs[i].keySuffix()
		}
	}
	switch act.Mode {
	case "big":
		return outputBig(resp)
	case "shape":
		// One result too few (or, for an empty batch, one too many).
		if n := len(resp.Results); n > 0 {
			resp.Results = resp.Results[:n-1]
		} else {
			resp.Results = []abi.CanonicalResult{{Key: "extra"}}
		}
	case "fields":
		// Results with neither a key nor an error.
		for i := range resp.Results {
			resp.Results[i] = abi.CanonicalResult{Canonical: resp.Results[i].Canonical}
		}
	case "sandbox":
		for i, d := range dirs {
			if d.Mode == "sandbox" && resp.Results[i].Error == "" {
				resp.Results[i].Canonical = probe(d)
			}
		}
	}
	return output(resp)
}

//go:wasmexport project
func project() int32 {
	const export = abi.ExportProject
	var req abi.ProjectRequest
	if err := json.Unmarshal(pdk.Input(), &req); err != nil {
		return refuse("project: reading the request: %v", err)
	}
	var act directive
	if d := parseDirective(req.Settings); d.appliesTo(export) {
		act = d
	}
	if !misbehaveFirst(export, act) {
		return refuse("project: unknown mode %q", act.Mode)
	}
	resp, err := metakey.Reference{}.Project(context.Background(), &req)
	if err != nil {
		return refuse("%s", strings.TrimPrefix(err.Error(), "metakey: "))
	}
	switch act.Mode {
	case "big":
		return outputBig(resp)
	case "shape":
		// A tool index one past the last tool.
		resp.Tools = append(resp.Tools, abi.ToolDecision{Index: len(req.Tools)})
	case "rename":
		if len(resp.Tools) > 0 {
			resp.Tools[0].Name, resp.Tools[0].Description = "renamed", "A description of its own."
		}
	}
	return output(resp)
}

// misbehaveFirst runs, in export, the misbehaviours that never return and
// the slow mode's busy loop. It reports false for an unknown mode.
func misbehaveFirst(export string, d directive) bool {
	switch d.Mode {
	case "", "good", "big", "shape", "fields", "sandbox", "rename":
	case "panic":
		panic("hostile: " + export + " panics on purpose")
	case "bomb":
		bomb()
	case "recurse":
		debug.SetMaxStack(maxStack)
		sink = uint64(recurse(0))
	case "loop":
		loop()
	case "slow":
		n := d.Spin
		if n <= 0 {
			n = defaultSpin
		}
		sink = spin(n)
	default:
		return false
	}
	return true
}

// sink keeps the results of the busy loops alive.
var sink uint64

// hoard is the slice the memory bomb grows.
var hoard []byte

// bomb grows hoard by 1 MiB at a time until the Go runtime cannot get more
// memory (a fatal error that ends the instance).
func bomb() {
	for {
		hoard = append(hoard, make([]byte, 1<<20)...)
		hoard[len(hoard)-1] = 1
	}
}

// recurse calls itself until the Go stack overflows.
//
//go:noinline
func recurse(n int) int {
	var pad [256]byte
	pad[n&255] = byte(n)
	//lint:ignore SA5007 runaway recursion is this mode's misbehaviour
	return recurse(n+1) + int(pad[(n*7)&255])
}

// loop never returns.
func loop() {
	for {
		sink++
	}
}

// spin runs n rounds of xorshift64.
func spin(n int64) uint64 {
	x := uint64(88172645463325252)
	for i := int64(0); i < n; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// refuse sets the Extism error and returns the refusal status.
func refuse(format string, args ...any) int32 {
	pdk.SetErrorString(fmt.Sprintf(format, args...))
	return 1
}

// outputBig writes v as JSON followed by abi.MaxOutputBytes of white
// space: well-formed, and over the output cap.
func outputBig(v any) int32 {
	out, err := json.Marshal(v)
	if err != nil {
		return refuse("encoding the answer: %v", err)
	}
	pdk.Output(append(out, strings.Repeat(" ", abi.MaxOutputBytes)...))
	return 0
}

// output writes v as the call's JSON output.
func output(v any) int32 {
	out, err := json.Marshal(v)
	if err != nil {
		return refuse("encoding the answer: %v", err)
	}
	pdk.Output(out)
	return 0
}
