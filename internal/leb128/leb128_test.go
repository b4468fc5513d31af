package leb128

import (
	"bytes"
	"testing"
)

func TestAppendInt(t *testing.T) {
	// Values from the WebAssembly specification's examples and the edges
	// of each width.
	for _, tc := range []struct {
		v    int64
		want []byte
	}{
		{0, []byte{0x00}},
		{1, []byte{0x01}},
		{-1, []byte{0x7f}},
		{63, []byte{0x3f}},
		{64, []byte{0xc0, 0x00}},
		{-64, []byte{0x40}},
		{-65, []byte{0xbf, 0x7f}},
		{-123456, []byte{0xc0, 0xbb, 0x78}},
		{1<<31 - 1, []byte{0xff, 0xff, 0xff, 0xff, 0x07}},
		{-1 << 31, []byte{0x80, 0x80, 0x80, 0x80, 0x78}},
	} {
		if got := AppendInt([]byte{0xaa}, tc.v); !bytes.Equal(got, append([]byte{0xaa}, tc.want...)) {
			t.Errorf("AppendInt(%d) = % x, want aa % x", tc.v, got, tc.want)
		}
	}
}
