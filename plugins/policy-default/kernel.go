//go:build wasip1

package main

import "encoding/binary"

// The plugin copies its input in and its output out through these Extism
// kernel functions itself instead of through go-pdk's Input and Output,
// which take one loop turn per eight bytes. Under the host's
// CloseOnContextDone every loop turn of the guest is an exit to Go to check
// for termination, about as costly as the kernel call in it; copying 64
// bytes per turn saves seven of every eight of those exits, which counts for
// large answers (a project_batch of thousands of items is hundreds of KiB).
// go-pdk also stores the last len%8 bytes one at a time, each a call into
// the kernel module through a fresh wazero call engine; output pads the
// answer instead.

//go:wasmimport extism:host/env input_length
func kernelInputLength() uint64

//go:wasmimport extism:host/env input_load_u64
func kernelInputLoadU64(offset uint64) uint64

//go:wasmimport extism:host/env input_load_u8
func kernelInputLoadU8(offset uint64) uint32

//go:wasmimport extism:host/env alloc
func kernelAlloc(length uint64) uint64

//go:wasmimport extism:host/env store_u64
func kernelStoreU64(offset, v uint64)

//go:wasmimport extism:host/env output_set
func kernelOutputSet(offset, length uint64)

// input returns the call's input.
func input() []byte {
	n := int(kernelInputLength())
	buf := make([]byte, n)
	i := 0
	for ; i+64 <= n; i += 64 {
		b, o := buf[i:i+64:i+64], uint64(i)
		binary.LittleEndian.PutUint64(b[0:], kernelInputLoadU64(o))
		binary.LittleEndian.PutUint64(b[8:], kernelInputLoadU64(o+8))
		binary.LittleEndian.PutUint64(b[16:], kernelInputLoadU64(o+16))
		binary.LittleEndian.PutUint64(b[24:], kernelInputLoadU64(o+24))
		binary.LittleEndian.PutUint64(b[32:], kernelInputLoadU64(o+32))
		binary.LittleEndian.PutUint64(b[40:], kernelInputLoadU64(o+40))
		binary.LittleEndian.PutUint64(b[48:], kernelInputLoadU64(o+48))
		binary.LittleEndian.PutUint64(b[56:], kernelInputLoadU64(o+56))
	}
	for ; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], kernelInputLoadU64(uint64(i)))
	}
	// The host pads its requests to whole words (host.padInput), so this
	// loop rarely runs.
	for ; i < n; i++ {
		buf[i] = byte(kernelInputLoadU8(uint64(i)))
	}
	return buf
}

// output sets out, a JSON document, as the call's output, first padding it
// with spaces to a whole number of words, which changes nothing in its
// meaning and leaves no byte to store on its own.
func output(out []byte) {
	for len(out)%8 != 0 {
		out = append(out, ' ')
	}
	n := len(out)
	off := kernelAlloc(uint64(n))
	i := 0
	for ; i+64 <= n; i += 64 {
		b, o := out[i:i+64:i+64], off+uint64(i)
		kernelStoreU64(o, binary.LittleEndian.Uint64(b[0:]))
		kernelStoreU64(o+8, binary.LittleEndian.Uint64(b[8:]))
		kernelStoreU64(o+16, binary.LittleEndian.Uint64(b[16:]))
		kernelStoreU64(o+24, binary.LittleEndian.Uint64(b[24:]))
		kernelStoreU64(o+32, binary.LittleEndian.Uint64(b[32:]))
		kernelStoreU64(o+40, binary.LittleEndian.Uint64(b[40:]))
		kernelStoreU64(o+48, binary.LittleEndian.Uint64(b[48:]))
		kernelStoreU64(o+56, binary.LittleEndian.Uint64(b[56:]))
	}
	for ; i < n; i += 8 {
		kernelStoreU64(off+uint64(i), binary.LittleEndian.Uint64(out[i:]))
	}
	kernelOutputSet(off, uint64(n))
}
