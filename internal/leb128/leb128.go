// Package leb128 writes the signed LEB128 numbers of the WebAssembly binary
// format. Unsigned ones are encoding/binary's AppendUvarint; signed LEB128
// is not binary.AppendVarint, which zigzag-encodes.
package leb128

// AppendInt appends the minimal signed LEB128 encoding of v to b.
func AppendInt(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
