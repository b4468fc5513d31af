package policy

import (
	"errors"
	"fmt"
	"math/bits"
)

// In a WebAssembly guest run under CloseOnContextDone, every loop turn and
// every function entry exits to the host (see words.go), so the cost of a
// batch is counted in those. ProjectBatch keeps the work per item and tool
// to one loop turn and a few array loads: it reads every snapshot name once
// and numbers the distinct names, remembers per settings object whether
// each name is visible, and writes each snapshot's tool entries (for each
// combination of flags) and its prompt and resource lists once, so that an
// item's answer is a few copies of runs of those bytes.

// A batchSettings is one settings object of a project_batch request, read
// once however many items use it.
type batchSettings struct {
	c canon
	// refused is why the settings are refused; nil when they are not.
	refused error
	// ready is set once the fields below have been filled in, by the first
	// item that uses these settings.
	ready bool
	visibility
	// flags indexes flagsEnd: the flags of each visible tool.
	flags int
	// msg is the refusal as an encoded JSON string.
	msg []byte
	// vis remembers, for each name number, whether the name is visible
	// (visYes), hidden (visNo) or not seen yet (0). It is nil when the
	// memory budget for remembering is spent.
	vis []uint8
}

// The values of batchSettings.vis, chosen so that v>>1 is 1 only for
// visYes and v&1 is 0 only for a name not seen yet (0).
const (
	visNo  = 1
	visYes = 3
)

// visBudget caps the bytes of all batchSettings.vis of one request; past
// it, names are looked up for every item. (A variable for tests.)
var visBudget = 16 << 20

// flagsEnd is how each tool decision of a project_batch result ends, by
// flags (1 for trust, 2 for alwaysLoad): the flags that are true, false ones
// left out, and the closing brace.
var flagsEnd = [4]string{`}`, `,"trust":true}`, `,"alwaysLoad":true}`, `,"trust":true,"alwaysLoad":true}`}

// prepare fills in the fields of s that items use; names is the number of
// distinct names in the request, budget the memory left for vis.
func (s *batchSettings) prepare(names int, budget *int) {
	s.ready = true
	if s.refused != nil {
		s.msg = appendString(nil, refusal(s.refused).Error())
		return
	}
	s.visibility = newVisibility(&s.c)
	if s.c.trust == trustTrue {
		s.flags |= 1
	}
	if s.c.always {
		s.flags |= 2
	}
	if names <= *budget {
		*budget -= names
		s.vis = make([]uint8, names)
	}
}

// lookup returns visYes or visNo for the name numbered id, remembering it
// in s.vis, which must not be nil.
func (s *batchSettings) lookup(name string, id int32) uint8 {
	v := uint8(visNo)
	if s.visible(name) {
		v = visYes
	}
	s.vis[id] = v
	return v
}

// appendRuns appends to out the entries of the visible names among names
// (numbered ids), head first if there is any, and reports whether there
// was. Entry i is blob[off[i]+i*fl : off[i+1]+(i+1)*fl] and starts with a
// comma, which the first entry written leaves out. Consecutive visible
// names are written with one copy: visibility is gathered into a bit mask,
// eight names a loop turn and without a call, and the mask's runs of ones
// are found with TrailingZeros64, one loop turn a run.
func (s *batchSettings) appendRuns(out []byte, names []string, ids, off []int32, fl int32, blob []byte, head string) ([]byte, bool) {
	wrote := false
	for base := 0; base < len(names); base += 64 {
		end := min(base+64, len(names))
		var m uint64 // bit j-base: name j is visible
		if vis := s.vis; vis != nil {
			var u uint64 // bit j-base: name j not seen before
			j := base
			for ; j+8 <= end; j += 8 {
				id := ids[j : j+8 : j+8]
				v0, v1, v2, v3 := vis[id[0]], vis[id[1]], vis[id[2]], vis[id[3]]
				v4, v5, v6, v7 := vis[id[4]], vis[id[5]], vis[id[6]], vis[id[7]]
				m |= uint64(v0>>1|v1>>1<<1|v2>>1<<2|v3>>1<<3|v4>>1<<4|v5>>1<<5|v6>>1<<6|v7>>1<<7) << (j - base)
				u |= uint64(^(v0&1 | v1&1<<1 | v2&1<<2 | v3&1<<3 | v4&1<<4 | v5&1<<5 | v6&1<<6 | v7&1<<7)) << (j - base)
			}
			// The rest, fewer than eight, without a loop.
			var tm, tu uint8
			switch end - j {
			case 7:
				v := vis[ids[j+6]]
				tm, tu = tm|v>>1<<6, tu|(v&1^1)<<6
				fallthrough
			case 6:
				v := vis[ids[j+5]]
				tm, tu = tm|v>>1<<5, tu|(v&1^1)<<5
				fallthrough
			case 5:
				v := vis[ids[j+4]]
				tm, tu = tm|v>>1<<4, tu|(v&1^1)<<4
				fallthrough
			case 4:
				v := vis[ids[j+3]]
				tm, tu = tm|v>>1<<3, tu|(v&1^1)<<3
				fallthrough
			case 3:
				v := vis[ids[j+2]]
				tm, tu = tm|v>>1<<2, tu|(v&1^1)<<2
				fallthrough
			case 2:
				v := vis[ids[j+1]]
				tm, tu = tm|v>>1<<1, tu|(v&1^1)<<1
				fallthrough
			case 1:
				v := vis[ids[j]]
				tm, tu = tm|v>>1, tu|(v&1^1)
			}
			m |= uint64(tm) << (j - base)
			u |= uint64(tu) << (j - base)
			// Names not seen before with these settings: look them up. (The
			// if saves a loop header, which is costly, when there are none.)
			if u != 0 {
				for ; u != 0; u &= u - 1 {
					k := bits.TrailingZeros64(u)
					if s.lookup(names[base+k], ids[base+k]) == visYes {
						m |= 1 << k
					}
				}
			}
		} else {
			for j := base; j < end; j++ {
				if s.visible(names[j]) {
					m |= 1 << (j - base)
				}
			}
		}
		for m != 0 { // one turn per run of visible names
			a := bits.TrailingZeros64(m)
			b := a + bits.TrailingZeros64(^(m >> a)) // the run is [a, b)
			i, k := int32(base+a), int32(base+b)
			start, stop := off[i]+i*fl, off[k]+k*fl
			if !wrote {
				out = append(out, head...)
				start++
				wrote = true
			}
			out = append(out, blob[start:stop]...)
			m &^= 1<<b - 1 // all of m when b is 64: 1<<64 is 0 in Go
		}
	}
	return out, wrote
}

// A batchSnapshot is the names of one snapshot of a project_batch request.
type batchSnapshot struct {
	tools, prompts      []string
	resources           int
	toolIDs, promptIDs  []int32 // the number of each name
	ready               bool
	toolOff, promptOff  []int32   // see prepare
	toolBlob            [4][]byte // by flags, built on first use
	promptBlob, resBlob []byte
}

// prepare writes the parts of answers that do not depend on the settings.
// Entry i of toolBlob[f], `,{"i":I` and flagsEnd[f], starts at toolOff[i] +
// i*len(flagsEnd[f]); entry i of promptBlob, `,I`, at promptOff[i]; both
// offset lists have one more entry, the end. resBlob is the resources
// member, every resource being visible.
func (s *batchSnapshot) prepare() {
	s.ready = true
	s.toolOff = make([]int32, len(s.tools)+1)
	n := 0
	for i := range s.tools {
		s.toolOff[i] = int32(n)
		n += len(`,{"i":`) + digits(i)
	}
	s.toolOff[len(s.tools)] = int32(n)
	s.promptOff = make([]int32, len(s.prompts)+1)
	for i := range s.prompts {
		s.promptBlob = append(s.promptBlob, ',')
		s.promptBlob = appendIndex(s.promptBlob, i)
		s.promptOff[i+1] = int32(len(s.promptBlob))
	}
	if s.resources > 0 {
		s.resBlob = append(s.resBlob, `"resources":[0`...)
		for i := 1; i < s.resources; i++ {
			s.resBlob = append(s.resBlob, ',')
			s.resBlob = appendIndex(s.resBlob, i)
		}
		s.resBlob = append(s.resBlob, ']')
	}
}

// toolEntries returns the tool entries of s with flags f, writing them on
// first use. The result is not nil even without tools, so that ProjectBatch,
// which calls toolEntries only when toolBlob[f] is nil, calls it once.
func (s *batchSnapshot) toolEntries(f int) []byte {
	if b := s.toolBlob[f]; b != nil {
		return b
	}
	end := flagsEnd[f]
	b := make([]byte, 0, int(s.toolOff[len(s.tools)])+len(s.tools)*len(end))
	for i := range s.tools {
		b = append(b, `,{"i":`...)
		b = appendIndex(b, i)
		b = append(b, end...)
	}
	s.toolBlob[f] = b
	return b
}

// digits returns the number of decimal digits of a non-negative i.
func digits(i int) int {
	n := 1
	for ; i >= 10; i /= 10 {
		n++
	}
	return n
}

// ProjectBatch answers one project_batch request (an abi.ProjectBatchRequest
// as JSON) with the JSON of an abi.ProjectBatchResponse: for each item, in
// order, what Project answers for the item's settings and snapshot, or, when
// Project would refuse the settings, {"error": MESSAGE} with Project's
// message. Each settings object and each snapshot is read once, whatever the
// number of items using it.
//
// The answer is compact: a list with nothing visible is left out, and so is
// a tool flag that is false. Members of the request other than settings,
// snapshots and items (and toolAnnotations in snapshots) are ignored; a
// repeated member replaces the earlier one. It returns an error only when
// the request as a whole is malformed: not JSON of the request's shape, an
// item that is not two indexes, or an index out of range.
func ProjectBatch(req []byte) ([]byte, error) {
	var (
		p        parser
		settings []batchSettings
		snaps    []batchSnapshot
		items    []int32 // settings and snapshot index of each item, flattened
		hasItems bool
	)
	p.buf, p.alias, p.unsorted = req, true, true
	err := p.object(func(key string) error {
		var err error
		switch key {
		case "settings":
			settings = settings[:0]
			_, err = p.array(func(i int) error {
				// Fresh lists for each settings object: its canon keeps them.
				p.include, p.exclude = nil, nil
				c, refused, err := p.settings()
				if err != nil {
					return fmt.Errorf("settings[%d]: %w", i, err)
				}
				settings = append(settings, batchSettings{c: c, refused: refused})
				return nil
			})
		case "snapshots":
			snaps = snaps[:0]
			_, err = p.array(func(i int) error {
				s, err := p.snapshot()
				if err != nil {
					return fmt.Errorf("snapshots[%d]: %w", i, err)
				}
				snaps = append(snaps, s)
				return nil
			})
		case "items":
			items, hasItems = items[:0], true
			var ok bool
			if items, ok = p.fastItems(items); !ok {
				items, err = p.items(items)
			}
		default:
			err = p.skipValue(1)
		}
		return err
	})
	if err == nil {
		err = p.end()
	}
	if err == nil && !hasItems {
		err = errors.New("items: missing")
	}
	size := 64
	for k := 0; err == nil && k < len(items); k += 2 {
		switch a, b := int(items[k]), int(items[k+1]); {
		case a >= len(settings):
			err = fmt.Errorf("items[%d]: settings index %d out of range [0,%d)", k/2, a, len(settings))
		case b >= len(snaps):
			err = fmt.Errorf("items[%d]: snapshot index %d out of range [0,%d)", k/2, b, len(snaps))
		default:
			s := &snaps[b]
			size += 48 + 24*len(s.tools) + 4*(len(s.prompts)+s.resources)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("project_batch request: %w", err)
	}
	names := numberNames(snaps)
	budget := visBudget

	out := make([]byte, 0, size)
	out = append(out, `{"results":[`...)
	for k := 0; k < len(items); k += 2 {
		if k > 0 {
			out = append(out, ',')
		}
		s, snap := &settings[items[k]], &snaps[items[k+1]]
		if !s.ready { // the checks are here, not in prepare: calls are costly
			s.prepare(names, &budget)
		}
		if s.refused != nil {
			out = append(out, `{"error":`...)
			out = append(out, s.msg...)
			out = append(out, '}')
			continue
		}
		if !snap.ready {
			snap.prepare()
		}
		blob := snap.toolBlob[s.flags]
		if blob == nil {
			blob = snap.toolEntries(s.flags)
		}
		out = append(out, '{')
		mark := len(out) // nothing written for this result yet

		var wrote bool
		out, wrote = s.appendRuns(out, snap.tools, snap.toolIDs, snap.toolOff,
			int32(len(flagsEnd[s.flags])), blob, `"tools":[`)
		if wrote {
			out = append(out, ']')
		}
		head := `"prompts":[`
		if len(out) > mark {
			head = `,"prompts":[`
		}
		if out, wrote = s.appendRuns(out, snap.prompts, snap.promptIDs, snap.promptOff, 0, snap.promptBlob, head); wrote {
			out = append(out, ']')
		}
		if snap.resources > 0 {
			if len(out) > mark {
				out = append(out, ',')
			}
			out = append(out, snap.resBlob...)
		}
		out = append(out, '}')
	}
	return append(out, "]}"...), nil
}

// numberNames gives every tool and prompt name of snaps a number, equal
// names the same, filling in toolIDs and promptIDs, and returns how many
// distinct names there are. (A crafted set of names colliding in the map
// only slows one call down.)
func numberNames(snaps []batchSnapshot) int {
	total := 0
	for i := range snaps {
		total += len(snaps[i].tools) + len(snaps[i].prompts)
	}
	ids := make([]int32, total)
	m := make(map[string]int32, 256)
	number := func(names []string) []int32 {
		out := ids[:len(names):len(names)]
		ids = ids[len(names):]
		for k, name := range names {
			id, ok := m[name]
			if !ok {
				id = int32(len(m))
				m[name] = id
			}
			out[k] = id
		}
		return out
	}
	for i := range snaps {
		s := &snaps[i]
		s.toolIDs = number(s.tools)
		s.promptIDs = number(s.prompts)
	}
	return len(m)
}

// snapshot reads one snapshot of a project_batch request: its tool and
// prompt names, read as Project reads them, and the number of its
// resources. toolAnnotations and unknown members are skipped.
func (p *parser) snapshot() (batchSnapshot, error) {
	var s batchSnapshot
	err := p.object(func(key string) error {
		var err error
		switch key {
		case "tools":
			s.tools, err = p.names(key, nil)
		case "prompts":
			s.prompts, err = p.names(key, nil)
		case "resources":
			s.resources, err = p.count(key)
		default:
			err = p.skipValue(2)
		}
		return err
	})
	return s, err
}

// maxIndex bounds the indexes of a batch item: no request can list more
// settings objects or snapshots.
const maxIndex = 1 << 31

// fastItems reads, at the current position, the items of a request in the
// form the host sends: a compact array of [settings,snapshot] pairs of
// indexes below 100,000 without leading zeros. It appends the indexes to
// dst. It reports false, having consumed nothing, for any other form, which
// items then reads.
func (p *parser) fastItems(dst []int32) (_ []int32, ok bool) {
	buf, i := p.buf, p.pos
	if i+1 >= len(buf) || buf[i] != '[' {
		return dst, false
	}
	if buf[i+1] == ']' {
		p.pos = i + 2
		return dst, true
	}
	n0 := len(dst)
	i++
	for {
		// '[' a ',' b ']' and then ',' or ']': at least six bytes.
		if i+6 > len(buf) || buf[i] != '[' {
			return dst[:n0], false
		}
		a, j := shortIndex(buf, i+1)
		if j < 0 || j >= len(buf) || buf[j] != ',' {
			return dst[:n0], false
		}
		b, k := shortIndex(buf, j+1)
		if k < 0 || k+1 >= len(buf) || buf[k] != ']' {
			return dst[:n0], false
		}
		dst = append(dst, int32(a), int32(b))
		switch buf[k+1] {
		case ',':
			i = k + 2
		case ']':
			p.pos = k + 2
			return dst, true
		default:
			return dst[:n0], false
		}
	}
}

// shortIndex reads, without a loop, an index of one to five digits without
// a leading zero at buf[i], and returns it and the index just past it; -1
// when there is none, or more digits follow.
func shortIndex(buf []byte, i int) (v, end int) {
	v = digitAt(buf, i)
	switch {
	case v < 0:
		return 0, -1
	case v == 0:
		if digitAt(buf, i+1) >= 0 {
			return 0, -1
		}
		return 0, i + 1
	}
	d := digitAt(buf, i+1)
	if d < 0 {
		return v, i + 1
	}
	v = v*10 + d
	if d = digitAt(buf, i+2); d < 0 {
		return v, i + 2
	}
	v = v*10 + d
	if d = digitAt(buf, i+3); d < 0 {
		return v, i + 3
	}
	v = v*10 + d
	if d = digitAt(buf, i+4); d < 0 {
		return v, i + 4
	}
	if digitAt(buf, i+5) >= 0 {
		return 0, -1
	}
	return v*10 + d, i + 5
}

// digitAt returns the value of the decimal digit at buf[k], or -1.
func digitAt(buf []byte, k int) int {
	if k < len(buf) && buf[k] >= '0' && buf[k] <= '9' {
		return int(buf[k] - '0')
	}
	return -1
}

// items reads the items of a request in any form, an array of items or
// null, appending their indexes to dst.
func (p *parser) items(dst []int32) ([]int32, error) {
	_, err := p.array(func(i int) error {
		a, b, err := p.item(i)
		dst = append(dst, int32(a), int32(b))
		return err
	})
	return dst, err
}

// item reads batch item i, an array of two non-negative integers.
func (p *parser) item(i int) (settings, snapshot int, err error) {
	if err := p.consume('[', "'[' (a batch item)"); err != nil {
		return 0, 0, err
	}
	if settings, err = p.index(i); err != nil {
		return 0, 0, err
	}
	if err := p.consume(',', "',' (a batch item has two indexes)"); err != nil {
		return 0, 0, err
	}
	if snapshot, err = p.index(i); err != nil {
		return 0, 0, err
	}
	if err := p.consume(']', "']' (a batch item has two indexes)"); err != nil {
		return 0, 0, err
	}
	return settings, snapshot, nil
}

// index reads a non-negative integer of batch item i.
func (p *parser) index(i int) (int, error) {
	c := p.peek()
	if c < '0' || c > '9' {
		kind := kindOf(c)
		if kind == "" {
			return 0, p.unexpected("an index")
		}
		return 0, p.errorf("items[%d]: expected a non-negative integer, got %s", i, kind)
	}
	start := p.pos
	if err := p.number(); err != nil {
		return 0, err
	}
	n := 0
	for _, d := range p.buf[start:p.pos] {
		if d < '0' || d > '9' || n >= maxIndex {
			n = maxIndex // a fraction, an exponent or too many digits
			break
		}
		n = n*10 + int(d-'0')
	}
	if n >= maxIndex {
		return 0, &SyntaxError{Offset: start, Msg: fmt.Sprintf("items[%d]: index %s is not an integer below %d", i, p.buf[start:p.pos], maxIndex)}
	}
	return n, nil
}
