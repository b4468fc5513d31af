package conformance

// Options adjust a run (RunWith). The zero Options is RunBothWays's.
type Options struct {
	// Progress, when set, is called on the goroutine running the suites
	// as each case starts and as it ends, so a caller can show how far a
	// long run has got. It must return quickly: the next case waits.
	Progress func(Progress)
}

// A Progress is how far a run has got.
type Progress struct {
	// Done cases of Total have ended, Failed of them failed. A plugin
	// with direct exports runs every case twice (RunBothWays), and each
	// run of a case counts.
	Done, Failed, Total int
	// File and Case name the case running now; both are empty between
	// cases. Case is the file's path relative to its suite path for a
	// file that is not a valid suite.
	File, Case string
}

// progressTracker turns the cases a run starts and ends into Progress
// reports. A nil *progressTracker reports nothing.
type progressTracker struct {
	fn func(Progress)
	p  Progress
}

func newProgressTracker(fn func(Progress), total int) *progressTracker {
	if fn == nil {
		return nil
	}
	return &progressTracker{fn: fn, p: Progress{Total: total}}
}

// start reports that case c of s starts; a nil c is the file s itself.
func (t *progressTracker) start(s *Suite, c *Case) {
	if t == nil {
		return
	}
	t.p.File = s.File
	if c != nil {
		t.p.Case = c.Name
	} else {
		t.p.Case = fileResult(s).Case
	}
	t.fn(t.p)
}

// end reports that the case started last ended with res.
func (t *progressTracker) end(res Result) {
	if t == nil {
		return
	}
	t.p.Done++
	if !res.Passed {
		t.p.Failed++
	}
	t.p.File, t.p.Case = "", ""
	t.fn(t.p)
}

// countCases counts the results a run of suites gives: one per case, and
// one for each file that is not a valid suite.
func countCases(suites []*Suite) int {
	n := 0
	for _, s := range suites {
		if s.Err != nil {
			n++
			continue
		}
		n += len(s.Cases)
	}
	return n
}
