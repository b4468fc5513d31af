// Package stderrlog bounds what a stdio upstream's standard error makes
// wasmhost log. It owns the cutting, grouping and rate limiting of those
// lines, and touches nothing but the emit function it is given.
//
// A [Writer] takes the upstream's standard error and hands records to emit
// (the daemon logs each at info, stdio mode writes it to its own standard
// error):
//
//   - a line is cut at [Options.MaxLine] bytes (default 2 KiB), the cut
//     noted with the number of bytes left out; empty lines are dropped; a
//     line that waits for its newline longer than [Options.Burst] is taken
//     as it is;
//   - the lines of one burst, within [Options.Burst] (default 100 ms) of
//     each other such as a stack trace, make one record of at most
//     [Options.MaxRecordLines] (default 50) lines;
//   - at most [Options.Lines] lines (default 100) pass per
//     [Options.Interval] (default 10 s); the rest are counted and said in
//     one summary record when the interval ends. The budget is a [Budget],
//     which the processes of one server share across restarts. Why:
//     docs/design.md.
package stderrlog

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// The defaults of Options.
const (
	DefaultMaxLine        = 2 << 10
	DefaultBurst          = 100 * time.Millisecond
	DefaultMaxRecordLines = 50
	DefaultLines          = 100
	DefaultInterval       = 10 * time.Second
)

// Options are a Writer's bounds; a zero field takes its default.
type Options struct {
	// Server names the upstream in the summary record.
	Server string
	// MaxLine is the most bytes of a line passed on.
	MaxLine int
	// Burst is the longest pause between two lines of one record.
	Burst time.Duration
	// MaxRecordLines is the most lines of one record.
	MaxRecordLines int
	// Lines is the most lines passed on per Interval.
	Lines    int
	Interval time.Duration
}

// A Budget is the lines per interval of one server, shared by the Writers
// of its processes. It says what it left out in a summary record, at the
// end of the interval.
type Budget struct {
	emit func(string)
	opt  Options

	mu        sync.Mutex
	window    time.Time // start of the current interval
	passed    int       // lines passed on in it
	dropped   int       // lines left out in it
	droppedB  int       // their bytes
	summarize *time.Timer
}

// NewBudget returns the budget of opt (Lines per Interval) with emit for
// its summaries.
func NewBudget(emit func(string), opt Options) *Budget {
	return &Budget{emit: emit, opt: defaults(opt)}
}

// allow reports whether a line of n bytes may be passed on now, and counts
// it as left out when not.
func (b *Budget) allow(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if now.Sub(b.window) >= b.opt.Interval {
		b.summaryLocked()
		b.window, b.passed = now, 0
	}
	if b.passed < b.opt.Lines {
		b.passed++
		return true
	}
	b.dropped++
	b.droppedB += n
	if b.summarize == nil {
		b.summarize = time.AfterFunc(b.window.Add(b.opt.Interval).Sub(now), b.summaryNow)
	} else {
		b.summarize.Reset(b.window.Add(b.opt.Interval).Sub(now))
	}
	return false
}

func (b *Budget) summaryNow() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if time.Since(b.window) < b.opt.Interval {
		return // a later line rolled the interval over meanwhile
	}
	b.summaryLocked()
	b.window, b.passed = time.Now(), 0
}

// Flush says now what the interval left out so far, if anything.
func (b *Budget) Flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.summaryLocked()
}

// summaryLocked says what the interval left out, if anything. b.mu is
// held.
func (b *Budget) summaryLocked() {
	if b.dropped == 0 {
		return
	}
	who := "the upstream"
	if b.opt.Server != "" {
		who = fmt.Sprintf("server %q", b.opt.Server)
	}
	b.emit(fmt.Sprintf("[wasmhost: %d more lines (%d bytes) of %s's standard error left out: over %d lines in %s]",
		b.dropped, b.droppedB, who, b.opt.Lines, b.opt.Interval))
	b.dropped, b.droppedB = 0, 0
}

// Budgets holds the Budget of each server by name, with the defaults; the
// zero value is ready to use.
type Budgets struct {
	mu      sync.Mutex
	budgets map[string]*Budget
}

// Of returns server's budget, made with emit for its summaries the first
// time.
func (b *Budgets) Of(server string, emit func(string)) *Budget {
	b.mu.Lock()
	defer b.mu.Unlock()
	if bu := b.budgets[server]; bu != nil {
		return bu
	}
	if b.budgets == nil {
		b.budgets = make(map[string]*Budget)
	}
	bu := NewBudget(emit, Options{Server: server})
	b.budgets[server] = bu
	return bu
}

// A Writer is the standard error of one upstream process. It is safe for
// concurrent use; emit is called with no two calls at once, in order.
type Writer struct {
	emit   func(string)
	opt    Options
	budget *Budget
	own    bool // the budget is the Writer's own (New), flushed by Close

	mu      sync.Mutex
	line    []byte // the line being read, at most opt.MaxLine bytes
	lineCut int    // bytes of that line left out
	record  []string
	flush   *time.Timer // ends the record after a pause of opt.Burst
}

// New returns a Writer handing its records to emit, with a budget of its
// own.
func New(emit func(string), opt Options) *Writer {
	w := NewShared(emit, opt, NewBudget(emit, opt))
	w.own = true
	return w
}

// NewShared returns a Writer handing its records to emit, within budget
// (whose Lines and Interval are used, not opt's).
func NewShared(emit func(string), opt Options, budget *Budget) *Writer {
	return &Writer{emit: emit, opt: defaults(opt), budget: budget}
}

func defaults(opt Options) Options {
	if opt.MaxLine <= 0 {
		opt.MaxLine = DefaultMaxLine
	}
	if opt.Burst <= 0 {
		opt.Burst = DefaultBurst
	}
	if opt.MaxRecordLines <= 0 {
		opt.MaxRecordLines = DefaultMaxRecordLines
	}
	if opt.Lines <= 0 {
		opt.Lines = DefaultLines
	}
	if opt.Interval <= 0 {
		opt.Interval = DefaultInterval
	}
	return opt
}

// Write takes more of the upstream's standard error. It never fails.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		seg := p
		if i >= 0 {
			seg = p[:i]
		}
		if room := w.opt.MaxLine - len(w.line); room > 0 {
			k := min(room, len(seg))
			w.line = append(w.line, seg[:k]...)
			w.lineCut += len(seg) - k
		} else {
			w.lineCut += len(seg)
		}
		if i < 0 {
			break
		}
		w.endLine()
		p = p[i+1:]
	}
	if len(w.record) > 0 || len(w.line) > 0 || w.lineCut > 0 {
		if w.flush == nil {
			w.flush = time.AfterFunc(w.opt.Burst, w.flushNow)
		} else {
			w.flush.Reset(w.opt.Burst)
		}
	}
	return n, nil
}

// Close passes on what is still gathered: the last line if it had no
// newline, the record, and (for a budget of its own) the summary.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.line) > 0 || w.lineCut > 0 {
		w.endLine()
	}
	w.flushLocked()
	if w.own {
		w.budget.Flush()
	}
	return nil
}

// endLine takes the line read so far. w.mu is held.
func (w *Writer) endLine() {
	line := strings.TrimSuffix(string(w.line), "\r")
	cut := w.lineCut
	w.line, w.lineCut = w.line[:0], 0
	if strings.TrimSpace(line) == "" && cut == 0 {
		return
	}
	if !w.budget.allow(len(line) + cut) {
		return
	}
	if cut > 0 {
		// Cut on a rune boundary, so that the record stays valid UTF-8.
		for i := 1; i < utf8.UTFMax && len(line) > 0; i++ {
			if r, size := utf8.DecodeLastRuneInString(line); r != utf8.RuneError || size != 1 {
				break
			}
			line, cut = line[:len(line)-1], cut+1
		}
		line += fmt.Sprintf(" [%d bytes cut]", cut)
	}
	w.record = append(w.record, line)
	if len(w.record) >= w.opt.MaxRecordLines {
		w.flushLocked()
	}
}

// flushNow ends the record after a pause; a line without its newline yet
// ends with it.
func (w *Writer) flushNow() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.line) > 0 || w.lineCut > 0 {
		w.endLine()
	}
	w.flushLocked()
}

// flushLocked passes the record on. w.mu is held.
func (w *Writer) flushLocked() {
	if len(w.record) == 0 {
		return
	}
	text := strings.Join(w.record, "\n")
	w.record = w.record[:0]
	w.emit(text)
}
