// Package wasmpack merges the data segments of a WebAssembly module.
//
// Go's wasm linker leaves out every run of more than eight zero bytes from
// the data section and starts a new active segment after it, so a Go
// plugin carries tens of thousands of small segments. A runtime decodes,
// bounds-checks and copies each one on every load, and with a warm
// compilation cache that per-segment work is a large part of what a load
// costs. Pack joins neighbouring segments whose gap is short, writing the
// gap's zeros out: linear memory starts zeroed, so the module's meaning is
// unchanged, and the output is a pure function of the input, so a
// byte-reproducible build stays byte-reproducible. It builds on
// internal/wasmbin; only [PackFile] touches files, the one it is given.
package wasmpack

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/wasmhost/wasmhost/internal/wasmbin"
)

// DefaultGap is the longest run of zeros Pack writes out to join two
// segments. At load, a segment costs a decode, a constant-expression
// evaluation and a bounds check, worth a few hundred bytes of copying. The
// gaps Go's linker leaves are mostly 9 to 64 bytes long, so with 256 a Go
// plugin ends with a handful of segments and about 11% more bytes.
const DefaultGap = 256

// ErrMalformed is returned (wrapped, with the byte offset) when the input
// is not a WebAssembly binary module Pack can read.
var ErrMalformed = errors.New("wasmpack: malformed module")

// A segment is one data segment. Only active segments of memory 0 whose
// offset is an i32.const (simple) can be joined.
type segment struct {
	simple bool
	offset uint32
	data   []byte
}

// Stats describes what Pack did.
type Stats struct {
	SegmentsBefore, SegmentsAfter int
	ZerosWritten                  int // bytes of gap now stored as zeros
}

// Pack returns module with its active data segments sorted by offset and
// joined wherever two neighbours are at most gap zero bytes apart, and what
// it did. Disjoint active segments write the same memory in any order, so
// sorting them is safe. It returns the module unchanged when two segments
// overlap or any segment is passive or has a computed offset: joining could
// then overwrite what another segment wrote. Every other section is copied
// byte for byte (a data count section gets the new count).
func Pack(module []byte, gap int) ([]byte, Stats, error) {
	var st Stats
	if !wasmbin.HasHeader(module) {
		return nil, st, fmt.Errorf("%w: no wasm version 1 header", ErrMalformed)
	}
	out := make([]byte, 0, len(module))
	out = append(out, module[:8]...)
	dataCountAt := -1 // where the data count section's payload starts in out
	for pos := 8; pos < len(module); {
		sec, ok := wasmbin.SectionAt(module, pos)
		if !ok {
			return nil, st, fmt.Errorf("%w: section %d at byte %d runs past the end", ErrMalformed, module[pos], pos)
		}
		id, start, end := sec.ID, sec.Body, sec.End
		switch id {
		case wasmbin.SecDataCount:
			dataCountAt = len(out)
			out = append(out, module[pos:end]...)
		case wasmbin.SecData:
			segs, err := readData(module[:end], start)
			if err != nil {
				return nil, st, err
			}
			st.SegmentsBefore = len(segs)
			merged, zeros, ok := merge(segs, gap)
			if !ok {
				return module, Stats{SegmentsBefore: len(segs), SegmentsAfter: len(segs)}, nil
			}
			st.SegmentsAfter, st.ZerosWritten = len(merged), zeros
			body := writeData(merged)
			out = wasmbin.AppendSection(out, id, body)
		default:
			out = append(out, module[pos:end]...)
		}
		pos = end
	}
	if dataCountAt >= 0 && st.SegmentsAfter != st.SegmentsBefore {
		out, err := setDataCount(out, dataCountAt, st.SegmentsAfter)
		return out, st, err
	}
	return out, st, nil
}

// readData reads the data section that starts at byte start of p and ends
// with p, so that every position (and error message) is the module's.
func readData(p []byte, start int) ([]segment, error) {
	count, n, err := uleb(p, start)
	if err != nil {
		return nil, err
	}
	pos := start + n
	// A segment takes at least three bytes (flags, an offset expression
	// or none, a size): a count the bytes left cannot hold is refused
	// before anything is allocated for it.
	if uint64(count) > uint64(len(p)-pos)/3 {
		return nil, fmt.Errorf("%w: %d data segments in the %d bytes left of the section", ErrMalformed, count, len(p)-pos)
	}
	segs := make([]segment, 0, count)
	for i := range count {
		at := pos
		flags, n, err := uleb(p, pos)
		if err != nil {
			return nil, err
		}
		pos += n
		s := segment{}
		switch flags {
		case 0: // active, memory 0, offset expression
			if pos < len(p) && p[pos] == wasmbin.OpI32Const {
				off, m, err := sleb32(p, pos+1)
				if err == nil && pos+1+m < len(p) && p[pos+1+m] == wasmbin.OpEnd {
					s.simple, s.offset = true, uint32(off)
					pos += 1 + m + 1
					break
				}
			}
			if pos, err = skipExpr(p, pos); err != nil {
				return nil, fmt.Errorf("segment %d: %w", i, err)
			}
		case 1: // passive
		case 2: // active, explicit memory index
			_, n, err := uleb(p, pos)
			if err != nil {
				return nil, err
			}
			if pos, err = skipExpr(p, pos+n); err != nil {
				return nil, fmt.Errorf("segment %d: %w", i, err)
			}
		default:
			return nil, fmt.Errorf("%w: data segment %d at byte %d has flags %d", ErrMalformed, i, at, flags)
		}
		size, n, err := uleb(p, pos)
		if err != nil {
			return nil, err
		}
		pos += n
		if pos+int(size) > len(p) || pos+int(size) < pos {
			return nil, fmt.Errorf("%w: data segment %d at byte %d runs past its section", ErrMalformed, i, at)
		}
		s.data = p[pos : pos+int(size)]
		pos += int(size)
		segs = append(segs, s)
	}
	if pos != len(p) {
		return nil, fmt.Errorf("%w: %d bytes after the last data segment", ErrMalformed, len(p)-pos)
	}
	return segs, nil
}

// skipExpr skips a constant expression, which for a data offset has one
// instruction before end: global.get with an index, or a constant.
func skipExpr(p []byte, pos int) (int, error) {
	for pos < len(p) {
		op := p[pos]
		pos++
		if op == wasmbin.OpEnd {
			return pos, nil
		}
		switch op {
		case wasmbin.OpGlobalGet, wasmbin.OpI32Const, wasmbin.OpI64Const: // one LEB immediate
			n := wasmbin.Width(p, pos, 10)
			if n == 0 {
				return 0, fmt.Errorf("%w: bad LEB128 number at byte %d", ErrMalformed, pos)
			}
			pos += n
		default:
			return 0, fmt.Errorf("%w: unsupported opcode 0x%02x in a data offset", ErrMalformed, op)
		}
	}
	return 0, fmt.Errorf("%w: data offset runs past its section", ErrMalformed)
}

// merge sorts the segments by offset and joins neighbours at most gap
// zeros apart. Disjoint active segments write the same memory in any
// order, so sorting them keeps the module's meaning. ok is false when some
// segment is not simple or two segments overlap.
func merge(segs []segment, gap int) (out []segment, zeros int, ok bool) {
	for _, s := range segs {
		if !s.simple {
			return nil, 0, false
		}
	}
	sorted := slices.Clone(segs)
	slices.SortStableFunc(sorted, func(a, b segment) int { return cmp.Compare(a.offset, b.offset) })
	var prevEnd uint64
	for _, s := range sorted {
		if uint64(s.offset) < prevEnd {
			return nil, 0, false
		}
		prevEnd = uint64(s.offset) + uint64(len(s.data))
	}
	// Each run of joined segments is copied once, into its own buffer.
	var run []byte
	var runAt uint32
	flush := func() {
		out = append(out, segment{simple: true, offset: runAt, data: run})
	}
	for i, s := range sorted {
		if i > 0 {
			if d := uint64(s.offset) - (uint64(runAt) + uint64(len(run))); d <= uint64(gap) {
				run = append(run, make([]byte, d)...)
				run = append(run, s.data...)
				zeros += int(d)
				continue
			}
			flush()
		}
		run, runAt = append([]byte(nil), s.data...), s.offset
	}
	if len(sorted) > 0 {
		flush()
	}
	return out, zeros, true
}

func writeData(segs []segment) []byte {
	var b []byte
	b = wasmbin.AppendU32(b, uint32(len(segs)))
	for _, s := range segs {
		b = append(b, 0, wasmbin.OpI32Const)
		b = wasmbin.AppendS64(b, int64(int32(s.offset)))
		b = append(b, wasmbin.OpEnd)
		b = wasmbin.AppendU32(b, uint32(len(s.data)))
		b = append(b, s.data...)
	}
	return b
}

// setDataCount rewrites the data count section starting at at in out.
func setDataCount(out []byte, at, count int) ([]byte, error) {
	size, n, err := uleb(out, at+1)
	if err != nil {
		return nil, err
	}
	end := at + 1 + n + int(size)
	sec := wasmbin.AppendSection(nil, wasmbin.SecDataCount, wasmbin.AppendU32(nil, uint32(count)))
	return append(append(append([]byte(nil), out[:at]...), sec...), out[end:]...), nil
}

// uleb reads the u32 at p[pos:].
func uleb(p []byte, pos int) (uint32, int, error) {
	v, n := wasmbin.U32(p, pos)
	if n == 0 {
		return 0, 0, fmt.Errorf("%w: bad LEB128 u32 at byte %d", ErrMalformed, pos)
	}
	return v, n, nil
}

// sleb32 reads the i32 at p[pos:].
func sleb32(p []byte, pos int) (int32, int, error) {
	v, n := wasmbin.S32(p, pos)
	if n == 0 {
		return 0, 0, fmt.Errorf("%w: bad signed LEB128 number at byte %d", ErrMalformed, pos)
	}
	return v, n, nil
}
