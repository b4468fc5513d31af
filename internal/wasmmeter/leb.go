package wasmmeter

import (
	"encoding/binary"
	"math"
)

// readU32 decodes an unsigned LEB128 u32 at b[p:] with wazero's rules (at
// most 5 bytes, no bits past the 32nd) and returns it with its width, or a
// width of 0 if it is truncated or malformed.
func readU32(b []byte, p int) (uint32, int) {
	if p < len(b) && b[p] < 0x80 {
		return uint32(b[p]), 1
	}
	return readU32Slow(b, p)
}

func readU32Slow(b []byte, p int) (uint32, int) {
	var v uint32
	for i := 0; i < 5; i++ {
		if p+i >= len(b) {
			return 0, 0
		}
		c := b[p+i]
		if c < 0x80 {
			if i == 4 && c&0xf0 != 0 {
				return 0, 0
			}
			return v | uint32(c)<<(7*i), i + 1
		}
		v |= uint32(c&0x7f) << (7 * i)
	}
	return 0, 0
}

// skipLEB returns the position after the LEB128 number at b[p:], which may
// take at most max bytes, or bad.
func skipLEB(b []byte, p, max int) int {
	for i := 0; i < max; i++ {
		if p >= len(b) {
			return bad
		}
		c := b[p]
		p++
		if c < 0x80 {
			return p
		}
	}
	return bad
}

// readS33 decodes a signed LEB128 number of at most 33 bits (a block type) at
// b[p:] and returns it with its width, or a width of 0.
func readS33(b []byte, p int) (int64, int) {
	return readSigned(b, p, -(1 << 32), 1<<32-1)
}

// readS32 decodes the signed LEB128 i32 at b[p:] (the immediate of
// i32.const) and returns it with its width, or a width of 0 if it is
// truncated, longer than 5 bytes or out of the i32 range.
func readS32(b []byte, p int) (int32, int) {
	v, w := readSigned(b, p, math.MinInt32, math.MaxInt32)
	return int32(v), w
}

// readSigned decodes a signed LEB128 number of at most 5 bytes at b[p:] and
// returns it with its width, or a width of 0 if it is truncated, longer or
// outside [lo, hi].
func readSigned(b []byte, p int, lo, hi int64) (int64, int) {
	var v int64
	for i := 0; i < 5; i++ {
		if p+i >= len(b) {
			return 0, 0
		}
		c := b[p+i]
		v |= int64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if c&0x40 != 0 {
				v |= -1 << (7 * (i + 1))
			}
			if v < lo || v > hi {
				return 0, 0
			}
			return v, i + 1
		}
	}
	return 0, 0
}

// sizeU32 returns the width of the minimal LEB128 encoding of v.
func sizeU32(v uint32) int {
	switch {
	case v < 1<<7:
		return 1
	case v < 1<<14:
		return 2
	case v < 1<<21:
		return 3
	case v < 1<<28:
		return 4
	}
	return 5
}

// appendU32 appends the minimal LEB128 encoding of v.
func appendU32(b []byte, v uint32) []byte { return binary.AppendUvarint(b, uint64(v)) }

// appendU32Width appends v encoded in w bytes (padded), or minimally if it
// does not fit in w bytes. Keeping the width of the input's encoding keeps
// sizes stable.
func appendU32Width(b []byte, v uint32, w int) []byte {
	if n := sizeU32(v); n >= w {
		return appendU32(b, v)
	}
	for i := 0; i < w-1; i++ {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// putU32 writes v into b, padded to len(b) bytes, which must be at least
// sizeU32(v).
func putU32(b []byte, v uint32) {
	for i := 0; i < len(b)-1; i++ {
		b[i] = byte(v) | 0x80
		v >>= 7
	}
	b[len(b)-1] = byte(v)
}
