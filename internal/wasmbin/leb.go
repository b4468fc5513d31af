package wasmbin

import (
	"encoding/binary"
	"math"
)

// U32 decodes the unsigned LEB128 u32 at b[p:] with wazero's rules (at most
// 5 bytes, no bits past the 32nd) and returns it with its width, or a width
// of 0 if it is truncated or malformed.
func U32(b []byte, p int) (uint32, int) {
	if uint(p) < uint(len(b)) && b[p] < 0x80 {
		return uint32(b[p]), 1
	}
	return u32Slow(b, p)
}

func u32Slow(b []byte, p int) (uint32, int) {
	if p < 0 {
		return 0, 0
	}
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

// U64 decodes the unsigned LEB128 u64 at b[p:] (at most 10 bytes, no bits
// past the 64th) and returns it with its width, or a width of 0.
func U64(b []byte, p int) (uint64, int) {
	if p < 0 {
		return 0, 0
	}
	var v uint64
	for i := 0; i < 10; i++ {
		if p+i >= len(b) {
			return 0, 0
		}
		c := b[p+i]
		if c < 0x80 {
			if i == 9 && c > 1 {
				return 0, 0
			}
			return v | uint64(c)<<(7*i), i + 1
		}
		v |= uint64(c&0x7f) << (7 * i)
	}
	return 0, 0
}

// S32 decodes the signed LEB128 i32 at b[p:] (the immediate of i32.const)
// and returns it with its width, or a width of 0 if it is truncated, longer
// than 5 bytes or out of the i32 range.
func S32(b []byte, p int) (int32, int) {
	v, w := signed(b, p, 5, math.MinInt32, math.MaxInt32)
	return int32(v), w
}

// S33 decodes the signed LEB128 number of at most 33 bits at b[p:] (a block
// type) and returns it with its width, or a width of 0.
func S33(b []byte, p int) (int64, int) {
	return signed(b, p, 5, -(1 << 32), 1<<32-1)
}

// S64 decodes the signed LEB128 i64 at b[p:] (the immediate of i64.const)
// and returns it with its width, or a width of 0 if it is truncated or
// longer than 10 bytes.
func S64(b []byte, p int) (int64, int) {
	return signed(b, p, 10, math.MinInt64, math.MaxInt64)
}

// signed decodes a signed LEB128 number of at most maxBytes bytes at b[p:]
// and returns it with its width, or a width of 0 if it is truncated,
// longer, or outside [lo, hi].
func signed(b []byte, p, maxBytes int, lo, hi int64) (int64, int) {
	if p < 0 {
		return 0, 0
	}
	var v int64
	for i := 0; i < maxBytes; i++ {
		if p+i >= len(b) {
			return 0, 0
		}
		c := b[p+i]
		if 7*i < 64 {
			v |= int64(c&0x7f) << (7 * i)
		}
		if c < 0x80 {
			if c&0x40 != 0 && 7*(i+1) < 64 {
				v |= -1 << (7 * (i + 1))
			}
			if maxBytes == 10 && i == 9 && c != 0x00 && c != 0x7f {
				return 0, 0 // bits past the 64th that are not sign extension
			}
			if v < lo || v > hi {
				return 0, 0
			}
			return v, i + 1
		}
	}
	return 0, 0
}

// Width returns the width of the LEB128 number at b[p:] if it takes at most
// maxBytes bytes, without checking its value, or 0.
func Width(b []byte, p, maxBytes int) int {
	if p < 0 {
		return 0
	}
	for i := 0; i < maxBytes; i++ {
		if p+i >= len(b) {
			return 0
		}
		if b[p+i] < 0x80 {
			return i + 1
		}
	}
	return 0
}

// SizeU32 returns the width of the minimal LEB128 encoding of v.
func SizeU32(v uint32) int {
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

// AppendU32 appends the minimal unsigned LEB128 encoding of v.
func AppendU32(b []byte, v uint32) []byte { return binary.AppendUvarint(b, uint64(v)) }

// AppendU32Width appends v encoded in w bytes (padded with continuation
// bytes), or minimally if it does not fit in w bytes. Keeping the width of
// an input's encoding keeps sizes stable when a rewriter renumbers.
func AppendU32Width(b []byte, v uint32, w int) []byte {
	if n := SizeU32(v); n >= w {
		return AppendU32(b, v)
	}
	for i := 0; i < w-1; i++ {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// PutU32 writes v into b, padded to len(b) bytes, which must be at least
// SizeU32(v).
func PutU32(b []byte, v uint32) {
	for i := 0; i < len(b)-1; i++ {
		b[i] = byte(v) | 0x80
		v >>= 7
	}
	b[len(b)-1] = byte(v)
}

// AppendS64 appends the minimal signed LEB128 encoding of v. (It is not
// encoding/binary's AppendVarint, which zigzag-encodes.)
func AppendS64(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// Name decodes the name (a u32 length, then that many bytes) at b[p:] and
// returns its bytes and the position after it, or ok false if it is
// truncated. The bytes are not checked to be UTF-8.
func Name(b []byte, p int) (name []byte, next int, ok bool) {
	n, w := U32(b, p)
	if w == 0 {
		return nil, 0, false
	}
	p += w
	if uint64(n) > uint64(len(b)-p) {
		return nil, 0, false
	}
	return b[p : p+int(n)], p + int(n), true
}
