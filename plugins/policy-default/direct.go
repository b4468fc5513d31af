//go:build wasip1

package main

import (
	"unsafe"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/plugins/policy-default/internal/policy"
)

// Direct calls (abi/SPEC.md section 5.2): wasmhost writes the request into
// a buffer wasmhost_alloc hands out and reads the answer where the direct
// export says it is, one copy each way, instead of the eight bytes per
// kernel call of kernel.go. Both buffers are held by package variables so
// that the Go collector keeps them (and their addresses) until the next
// call replaces them.
//
// The request buffer and canonicalize's answer buffer are reused from one
// call to the next: a canonicalize call of a thousand settings reads some
// 160 KiB and writes some 340 KiB, and fresh buffers for those made every
// such call leave about 600 KiB of garbage, which the Go runtime's
// collector, slow in WebAssembly, then spends a good part of the next calls
// on. Nothing the policy keeps outlives a call (its strings may alias the
// request, but only while it answers), so the request buffer may be
// written over by the next one.
var (
	directRequest []byte // the buffer of the last wasmhost_alloc
	directAnswer  []byte // the last direct answer, read by the host after the call
	// canonicalizeAnswers is the buffer canonicalize_direct answers in,
	// reused by the next call (directAnswer holds it meanwhile).
	canonicalizeAnswers []byte
)

// keepBytes bounds the buffers kept for the next call: a larger one (the
// request or answer of an unusually large call) is left to the collector
// rather than held for the life of the instance.
const keepBytes = 1 << 20

//go:wasmexport wasmhost_alloc
func wasmhostAlloc(n uint32) uint32 {
	if int(n) <= cap(directRequest) && cap(directRequest) <= keepBytes {
		directRequest = directRequest[:n]
	} else {
		directRequest = make([]byte, n)
	}
	directAnswer = nil
	return addressOf(directRequest)
}

//go:wasmexport canonicalize_direct
func canonicalizeDirect(addr, n uint32) uint64 {
	return answerDirect(appendCanonicalize, addr, n)
}

// appendCanonicalize answers a canonicalize request in canonicalizeAnswers.
func appendCanonicalize(req []byte) ([]byte, error) {
	buf := canonicalizeAnswers
	if cap(buf) > keepBytes {
		buf = nil
	}
	out, err := policy.AppendCanonicalize(buf[:0], req)
	canonicalizeAnswers = out[:0]
	return out, err
}

//go:wasmexport project_direct
func projectDirect(addr, n uint32) uint64 {
	return answerDirect(policy.Project, addr, n)
}

//go:wasmexport project_batch_direct
func projectBatchDirect(addr, n uint32) uint64 {
	return answerDirect(policy.ProjectBatch, addr, n)
}

// answerDirect runs fn on the request at (addr, n), which must lie in the
// buffer of the last wasmhost_alloc, and returns where the answer (or the
// refusal message) is.
func answerDirect(fn func([]byte) ([]byte, error), addr, n uint32) uint64 {
	defer yield() // the answer is held by directAnswer meanwhile
	var out []byte
	var err error
	if addr != addressOf(directRequest) || int(n) > len(directRequest) {
		err = errNotAllocated
	} else {
		out, err = fn(directRequest[:n:n])
	}
	if err != nil {
		directAnswer = []byte(err.Error())
		return abi.PackDirectResult(addressOf(directAnswer), uint32(len(directAnswer)), true)
	}
	directAnswer = out
	return abi.PackDirectResult(addressOf(directAnswer), uint32(len(directAnswer)), false)
}

// errNotAllocated refuses a direct call whose request is not in the buffer
// wasmhost_alloc returned.
var errNotAllocated = directError("direct call: the request is not in the buffer wasmhost_alloc returned")

type directError string

func (e directError) Error() string { return string(e) }

// addressOf returns the address of b's first byte in linear memory (0 for
// an empty slice).
func addressOf(b []byte) uint32 {
	if cap(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}
