package wasmpack

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/wasmhost/wasmhost/internal/wasmbin"
)

// A seg is one data segment of a test module: active at offset, or passive.
type seg struct {
	offset  int32
	data    string
	passive bool
}

// module builds a module with one exported memory page, an optional data
// count section, and segs as its data section.
func module(segs []seg, dataCount bool) []byte {
	section := func(b []byte, id byte, body []byte) []byte {
		b = append(b, id)
		b = binary.AppendUvarint(b, uint64(len(body)))
		return append(b, body...)
	}
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = section(b, 5, []byte{1, 0, 1})                                         // memory: min 1 page
	b = section(b, 7, append([]byte{1, 6}, append([]byte("memory"), 2, 0)...)) // export "memory"
	if dataCount {
		b = section(b, 12, binary.AppendUvarint(nil, uint64(len(segs))))
	}
	body := binary.AppendUvarint(nil, uint64(len(segs)))
	for _, s := range segs {
		if s.passive {
			body = append(body, 1)
		} else {
			body = append(body, 0, 0x41)
			body = wasmbin.AppendS64(body, int64(s.offset))
			body = append(body, 0x0b)
		}
		body = binary.AppendUvarint(body, uint64(len(s.data)))
		body = append(body, s.data...)
	}
	return section(b, 11, body)
}

// memoryOf instantiates wasm with wazero and returns its first page of
// memory: what the data segments wrote.
func memoryOf(t testing.TB, wasm []byte) []byte {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	m, err := r.Instantiate(ctx, wasm)
	require.NoError(t, err)
	mem, ok := m.Memory().Read(0, 65536)
	require.True(t, ok)
	return bytes.Clone(mem)
}

func TestPack(t *testing.T) {
	tests := []struct {
		name      string
		segs      []seg
		gap       int
		dataCount bool
		want      Stats
	}{
		{
			name: "neighbours within the gap are joined",
			segs: []seg{{offset: 16, data: "ab"}, {offset: 20, data: "cd"}, {offset: 30, data: "ef"}},
			gap:  8,
			want: Stats{SegmentsBefore: 3, SegmentsAfter: 1, ZerosWritten: 2 + 8},
		},
		{
			name: "a gap longer than allowed splits",
			segs: []seg{{offset: 0, data: "ab"}, {offset: 11, data: "cd"}, {offset: 13, data: "ef"}},
			gap:  8,
			want: Stats{SegmentsBefore: 3, SegmentsAfter: 2, ZerosWritten: 0},
		},
		{
			name: "segments out of order are sorted first (as Go's linker writes them)",
			segs: []seg{{offset: 300, data: "late"}, {offset: 100, data: "early"}, {offset: 106, data: "x"}},
			gap:  1,
			want: Stats{SegmentsBefore: 3, SegmentsAfter: 2, ZerosWritten: 1},
		},
		{
			name:      "the data count section follows",
			segs:      []seg{{offset: 8, data: "a"}, {offset: 10, data: "b"}},
			gap:       4,
			dataCount: true,
			want:      Stats{SegmentsBefore: 2, SegmentsAfter: 1, ZerosWritten: 1},
		},
		{
			name: "touching segments join with no zeros",
			segs: []seg{{offset: 4, data: "ab"}, {offset: 6, data: "cd"}},
			gap:  0,
			want: Stats{SegmentsBefore: 2, SegmentsAfter: 1},
		},
		{
			name: "overlapping segments are left alone",
			segs: []seg{{offset: 0, data: "abcd"}, {offset: 2, data: "XY"}},
			gap:  8,
			want: Stats{SegmentsBefore: 2, SegmentsAfter: 2},
		},
		{
			name: "a passive segment leaves the section alone",
			segs: []seg{{offset: 0, data: "ab"}, {passive: true, data: "zz"}, {offset: 3, data: "cd"}},
			gap:  8,
			want: Stats{SegmentsBefore: 3, SegmentsAfter: 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := module(tt.segs, tt.dataCount)
			out, st, err := Pack(in, tt.gap)
			require.NoError(t, err)
			if diff := cmp.Diff(tt.want, st); diff != "" {
				t.Errorf("Stats (-want +got):\n%s", diff)
			}
			if st.SegmentsAfter == st.SegmentsBefore && st.ZerosWritten == 0 {
				require.Equal(t, in, out, "a module with nothing to join is returned as it was")
			}
			require.Equal(t, memoryOf(t, in), memoryOf(t, out), "memory after instantiation")
			again, st2, err := Pack(out, tt.gap)
			require.NoError(t, err)
			require.Equal(t, out, again, "packing twice changes nothing")
			require.Equal(t, st.SegmentsAfter, st2.SegmentsAfter)
		})
	}
}

func TestPackErrors(t *testing.T) {
	good := module([]seg{{offset: 0, data: "ab"}}, false)
	tests := map[string][]byte{
		"empty":            nil,
		"not wasm":         []byte("\x7fELF\x02\x01\x01\x00"),
		"version 2":        []byte("\x00asm\x02\x00\x00\x00"),
		"truncated":        good[:len(good)-1],
		"section too long": append(bytes.Clone(good[:8]), 5, 100, 1),
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			_, _, err := Pack(in, 8)
			require.ErrorIs(t, err, ErrMalformed)
		})
	}
	// The message says where.
	_, _, err := Pack(good[:len(good)-1], 8)
	require.ErrorContains(t, err, "byte ")
}

// TestDefaultPluginPacked: the committed default plugin is packed (make
// plugins runs wasmhost pack after go build), so packing it again changes
// nothing, and it has a handful of segments, not tens of thousands.
func TestDefaultPluginPacked(t *testing.T) {
	wasm, err := os.ReadFile("../../plugins/policy-default/policy-default.wasm")
	require.NoError(t, err)
	out, st, err := Pack(wasm, DefaultGap)
	require.NoError(t, err)
	require.True(t, bytes.Equal(wasm, out), "the committed plugin is not packed: run make plugins")
	require.Less(t, st.SegmentsAfter, 100, "data segments")
}

// FuzzPack: Pack never panics, marks every error ErrMalformed, and a
// module it returns packs to itself. (TestPack checks with wazero that
// packing keeps a module's meaning; compiling arbitrary fuzz input with
// wazero in every iteration exhausts the fuzz workers' memory.)
func FuzzPack(f *testing.F) {
	f.Add(module([]seg{{offset: 16, data: "ab"}, {offset: 20, data: "cd"}}, true), 8)
	f.Add(module([]seg{{offset: 300, data: "late"}, {offset: 100, data: "early"}}, false), 300)
	f.Add(module([]seg{{offset: 0, data: "abcd"}, {offset: 2, data: "XY"}}, false), 8)
	f.Fuzz(func(t *testing.T, in []byte, gap int) {
		if gap < 0 || gap > 1<<16 {
			return
		}
		out, st, err := Pack(in, gap)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error not marked ErrMalformed: %v", err)
			}
			return
		}
		if st.SegmentsAfter > st.SegmentsBefore {
			t.Fatalf("more segments after packing: %+v", st)
		}
		again, st2, err := Pack(out, gap)
		if err != nil || !bytes.Equal(again, out) || st2.SegmentsAfter != st.SegmentsAfter {
			t.Fatalf("packing twice: %v (%+v, then %+v)", err, st, st2)
		}
	})
}
