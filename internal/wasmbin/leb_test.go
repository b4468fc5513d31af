package wasmbin_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/wasmhost/wasmhost/internal/wasmbin"
)

func TestU32(t *testing.T) {
	for _, tc := range []struct {
		in    []byte
		want  uint32
		width int
	}{
		{[]byte{0x00}, 0, 1},
		{[]byte{0x7f}, 127, 1},
		{[]byte{0x80, 0x01}, 128, 2},
		{[]byte{0x80, 0x80, 0x00}, 0, 3}, // padded: wazero accepts it
		{[]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, math.MaxUint32, 5},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0x1f}, 0, 0},       // a bit past the 32nd
		{[]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 0, 0}, // six bytes
		{[]byte{0x80}, 0, 0},                               // truncated
		{nil, 0, 0},
	} {
		v, w := wasmbin.U32(tc.in, 0)
		assert.Equal(t, tc.width, w, "% x", tc.in)
		if tc.width != 0 {
			assert.Equal(t, tc.want, v, "% x", tc.in)
		}
	}
	_, w := wasmbin.U32([]byte{1}, -1)
	assert.Zero(t, w, "a negative position")
}

func TestSigned(t *testing.T) {
	v, w := wasmbin.S32([]byte{0x7f}, 0)
	assert.Equal(t, int32(-1), v)
	assert.Equal(t, 1, w)
	_, w = wasmbin.S32([]byte{0x80, 0x80, 0x80, 0x80, 0x08}, 0) // 2^31
	assert.Zero(t, w, "past the i32 range")
	v64, w := wasmbin.S33([]byte{0x40}, 0)
	assert.Equal(t, int64(-64), v64)
	assert.Equal(t, 1, w)
	_, w = wasmbin.S64([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 0)
	assert.Zero(t, w, "a 10th byte that is not a sign extension")
	v64, w = wasmbin.S64([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f}, 0)
	assert.Equal(t, int64(math.MinInt64), v64)
	assert.Equal(t, 10, w)
}

func TestRoundTrip(t *testing.T) {
	for _, v := range []uint32{0, 1, 127, 128, 1 << 14, 1<<21 - 1, 1 << 28, math.MaxUint32} {
		b := wasmbin.AppendU32(nil, v)
		assert.Len(t, b, wasmbin.SizeU32(v))
		got, w := wasmbin.U32(b, 0)
		assert.Equal(t, v, got)
		assert.Equal(t, len(b), w)
		for width := 1; width <= 5; width++ {
			p := wasmbin.AppendU32Width(nil, v, width)
			assert.Len(t, p, max(width, wasmbin.SizeU32(v)))
			got, w := wasmbin.U32(p, 0)
			assert.Equal(t, v, got)
			assert.Equal(t, len(p), w)
			assert.Equal(t, len(p), wasmbin.Width(p, 0, 5))
			q := make([]byte, len(p))
			wasmbin.PutU32(q, v)
			assert.Equal(t, p, q)
		}
	}
	for _, v := range []int64{0, 1, -1, 63, 64, -64, -65, math.MaxInt32, math.MinInt32, math.MaxInt64, math.MinInt64} {
		b := wasmbin.AppendS64(nil, v)
		got, w := wasmbin.S64(b, 0)
		assert.Equal(t, v, got)
		assert.Equal(t, len(b), w)
	}
}

func TestName(t *testing.T) {
	name, next, ok := wasmbin.Name([]byte{3, 'a', 'b', 'c', 9}, 0)
	assert.True(t, ok)
	assert.Equal(t, "abc", string(name))
	assert.Equal(t, 4, next)
	_, _, ok = wasmbin.Name([]byte{4, 'a', 'b', 'c'}, 0)
	assert.False(t, ok, "a name past the end")
}

// FuzzLEB checks that every reader accepts only what the writers would
// write (up to padding), and never reads past its input.
func FuzzLEB(f *testing.F) {
	f.Add([]byte{0x80, 0x01}, uint32(300), int64(-300))
	f.Fuzz(func(t *testing.T, b []byte, u uint32, s int64) {
		if v, w := wasmbin.U32(b, 0); w != 0 {
			if w > len(b) || wasmbin.Width(b, 0, 5) != w {
				t.Fatalf("U32 width %d of % x", w, b)
			}
			if got, _ := wasmbin.U32(wasmbin.AppendU32Width(nil, v, w), 0); got != v {
				t.Fatalf("U32 %d does not round-trip", v)
			}
		}
		if _, w := wasmbin.S64(b, 0); w > len(b) {
			t.Fatalf("S64 width %d of % x", w, b)
		}
		if got, _ := wasmbin.U32(wasmbin.AppendU32(nil, u), 0); got != u {
			t.Fatalf("U32 %d does not round-trip", u)
		}
		if got, _ := wasmbin.S64(wasmbin.AppendS64(nil, s), 0); got != s {
			t.Fatalf("S64 %d does not round-trip", s)
		}
	})
}
