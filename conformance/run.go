package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
)

// A Result is the outcome of one case.
type Result struct {
	// File is the suite file's path, Suite its "suite" name.
	File  string `json:"file"`
	Suite string `json:"suite,omitempty"`
	// Case is the case's name ("cases[N]" when it has none; for a file that could
	// not be read as a suite, the file's path relative to the path given to
	// Load).
	Case   string `json:"case"`
	Kind   Kind   `json:"kind"`
	Passed bool   `json:"passed"`
	// Message says what went wrong; empty when the case passed.
	Message string `json:"message,omitempty"`
	// Want and Got, when set, are what the case expected and what the
	// policy gave, usually as compact JSON.
	Want string `json:"want,omitempty"`
	Got  string `json:"got,omitempty"`
	// Warnings name inputs the case gives that the policy does not ask
	// for, so that it never sees them (see [wantsWarnings]); they do not
	// fail the case.
	Warnings []string `json:"warnings,omitempty"`
}

// String returns the result as one report line:
//
//	PASS FILE: CASE (KIND)
//	FAIL FILE: CASE (KIND): MESSAGE: want WANT; got GOT
func (r Result) String() string {
	if r.Passed {
		return fmt.Sprintf("PASS %s: %s (%s)", label(r.File), label(r.Case), r.Kind)
	}
	line := fmt.Sprintf("FAIL %s: %s (%s): %s", label(r.File), label(r.Case), r.Kind, oneLine(r.Message))
	if r.Want != "" || r.Got != "" {
		line += fmt.Sprintf(": want %s; got %s", oneLine(r.Want), oneLine(r.Got))
	}
	return line
}

// A Report is the outcome of running suites against one policy.
type Report struct {
	// Policy is the policy's handshake.
	Policy abi.Handshake `json:"policy"`
	// Plugin and Digest name the plugin file and its SHA-256 when the
	// caller knows them; Run leaves them empty.
	Plugin string `json:"plugin,omitempty"`
	Digest string `json:"digest,omitempty"`
	// Results holds one entry per case, in suite and case order.
	Results []Result `json:"results"`
	Passed  int      `json:"passed"`
	Failed  int      `json:"failed"`
}

// OK reports whether no case failed.
func (r *Report) OK() bool { return r.Failed == 0 }

// Summary returns the closing line, "N passed, N failed".
func (r *Report) Summary() string {
	return fmt.Sprintf("%d passed, %d failed", r.Passed, r.Failed)
}

// WriteText writes one line per failing case (per case when verbose), a
// "WARN FILE: CASE: MESSAGE" line per warning of any case, and then the
// summary line alone.
func (r *Report) WriteText(w io.Writer, verbose bool) error {
	var b bytes.Buffer
	for _, res := range r.Results {
		if verbose || !res.Passed {
			b.WriteString(res.String())
			b.WriteByte('\n')
		}
		for _, warn := range res.Warnings {
			fmt.Fprintf(&b, "WARN %s: %s: %s\n", label(res.File), label(res.Case), oneLine(warn))
		}
	}
	b.WriteString(r.Summary())
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

func (r *Report) add(res Result) {
	r.Results = append(r.Results, res)
	if res.Passed {
		r.Passed++
	} else {
		r.Failed++
	}
}

// Run runs every case of suites against p and reports each one. It never
// stops early: policy errors, timeouts, traps and panics fail the case at
// hand. A cancelled ctx fails the cases that remain. When p is an
// abi.BatchProjector, the project and reject cases of each suite also go
// through one ProjectBatch call (see the package documentation).
func Run(ctx context.Context, p abi.Policy, suites []*Suite) *Report {
	r, _ := run(ctx, p, suites, false, nil)
	return r
}

// run runs suites as Run does. With record set it also returns, for each
// result, what the policy answered while the case ran (nil for a file
// result). A non-nil pt is told of each case as it starts and ends.
func run(ctx context.Context, p abi.Policy, suites []*Suite, record bool, pt *progressTracker) (*Report, []*answers) {
	r := &Report{Policy: handshake(p), Results: []Result{}}
	var all []*answers
	for _, s := range suites {
		if s.Err != nil {
			res := fileResult(s)
			pt.start(s, nil)
			r.add(res)
			pt.end(res)
			all = append(all, nil)
			continue
		}
		sb := newSuiteBatch(ctx, p, s.Cases)
		for _, c := range s.Cases {
			var ans *answers
			if record {
				ans = &answers{}
			}
			pt.start(s, c)
			res := runCase(ctx, p, s, c, sb, ans)
			r.add(res)
			pt.end(res)
			all = append(all, ans)
		}
	}
	return r, all
}

// RunBothWays runs suites against p, a plugin making direct calls
// (abi/SPEC.md section 5.2), and against extism, the same plugin loaded
// with host.Options.NoDirect, and reports each case as passing only when it
// passed both ways with the same answers: F_direct must answer, byte for
// byte, what F answers. A case failing only through Extism calls is
// reported with its message prefixed "through Extism calls: ". A case
// passing both ways fails when any answer the runner got for it (each
// canonicalize result, key, canonical form and refusal message, each
// projection, project refusal and batch-path answer) differs between the
// two ways; its message names the first such answer, want being the
// Extism answer and got the direct one. A nil extism runs suites once, as
// Run.
func RunBothWays(ctx context.Context, p, extism abi.Policy, suites []*Suite) *Report {
	return RunWith(ctx, p, extism, suites, Options{})
}

// RunWith runs suites as RunBothWays does (as Run when extism is nil), with
// opts.
func RunWith(ctx context.Context, p, extism abi.Policy, suites []*Suite, opts Options) *Report {
	passes := 1
	if extism != nil {
		passes = 2
	}
	pt := newProgressTracker(opts.Progress, passes*countCases(suites))
	if extism == nil {
		r, _ := run(ctx, p, suites, false, pt)
		return r
	}
	r, direct := run(ctx, p, suites, true, pt)
	er, viaExtism := run(ctx, extism, suites, true, pt)
	for i, res := range er.Results {
		if !r.Results[i].Passed {
			continue
		}
		if !res.Passed {
			res.Message = "through Extism calls: " + res.Message
		} else if f := direct[i].differ(viaExtism[i]); f != nil {
			res.Passed, res.Message, res.Want, res.Got = false, f.msg, f.want, f.got
		} else {
			continue
		}
		r.Results[i] = res
		r.Passed--
		r.Failed++
	}
	return r
}

// An answer is one thing a policy answered while a case ran: what names
// it in a report ("the first canonicalize call's answer for same[1]"), value
// shows it exactly.
type answer struct {
	what, value string
}

// answers records, in call order, what a policy answered while one case
// ran, for RunBothWays to compare the answers of two ways. A nil *answers
// records nothing.
type answers []answer

func (a *answers) add(what, value string) {
	if a != nil {
		*a = append(*a, answer{what, shown(value)})
	}
}

// maxShown bounds a value a report shows (Want, Got) and an answer kept
// to compare two ways: a plugin answers up to 16 MiB a call, a golden
// case's own values take a few KiB.
const maxShown = 64 << 10

// shown returns s, or, when it is longer than maxShown, its start, its
// length and a digest of it, so that two long values that differ anywhere
// still show differently.
func shown(s string) string {
	if len(s) <= maxShown {
		return s
	}
	cut := maxShown
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	sum := sha256.Sum256([]byte(s))
	return fmt.Sprintf("%s… (%d bytes in all, sha256 %x)", s[:cut], len(s), sum[:12])
}

// canonicalize records the two answers keysTwice got for each settings
// object, label naming settings object i: its key or refusal message and,
// for a key, its canonical form as the policy's bytes.
func (a *answers) canonicalize(label func(int) string, first, second []abi.CanonicalResult) {
	if a == nil {
		return
	}
	for call, results := range [][]abi.CanonicalResult{first, second} {
		nth := [...]string{"first", "second"}[call]
		for i, r := range results {
			if r.Error != "" {
				a.add(fmt.Sprintf("the %s canonicalize call's answer for %s", nth, label(i)), "error "+strconv.Quote(r.Error))
				continue
			}
			a.add(fmt.Sprintf("the %s canonicalize call's answer for %s", nth, label(i)), "key "+showKey(r.Key))
			canonical := "none"
			if r.Canonical != nil {
				canonical = showKey(string(r.Canonical))
			}
			a.add(fmt.Sprintf("the canonical form the %s canonicalize call gave %s", nth, label(i)), canonical)
		}
	}
}

// differ compares a, the answers of direct calls, with the answers of
// Extism calls for the same case, and describes the first difference, or
// returns nil when there is none.
func (a *answers) differ(extism *answers) *failure {
	if a == nil || extism == nil {
		return nil
	}
	d, e := *a, *extism
	for i := range max(len(d), len(e)) {
		if i < len(d) && i < len(e) && d[i] == e[i] {
			continue
		}
		want, got := answer{value: "no answer"}, answer{value: "no answer"}
		if i < len(e) {
			want = e[i]
		}
		if i < len(d) {
			got = d[i]
		}
		what := got.what
		if what == "" {
			what = want.what
		}
		return fail("direct calls answer differently from Extism calls (abi/SPEC.md section 5.2): %s (want: through Extism calls; got: direct calls)", what).
			wantGot(want.value, got.value)
	}
	return nil
}

// handshake returns p's handshake, or the zero Handshake when p.Handshake
// panics: a broken policy fails its cases, never the run.
func handshake(p abi.Policy) (h abi.Handshake) {
	defer func() { _ = recover() }()
	return p.Handshake()
}

func fileResult(s *Suite) Result {
	name := s.Rel
	if name == "" {
		name = s.File
	}
	return Result{File: s.File, Case: name, Kind: KindFile, Message: "not a valid suite file: " + s.Err.Error()}
}

// RunCase runs one case of suite s against p. When p is an
// abi.BatchProjector, a project or reject case also goes through
// ProjectBatch, in a batch of its own.
func RunCase(ctx context.Context, p abi.Policy, s *Suite, c *Case) Result {
	return runCase(ctx, p, s, c, newSuiteBatch(ctx, p, []*Case{c}), nil)
}

// runCase runs one case, checking the answer sb holds for it (if any) once
// the case has passed otherwise, and records what p answered in ans.
func runCase(ctx context.Context, p abi.Policy, s *Suite, c *Case, sb *suiteBatch, ans *answers) (res Result) {
	res = Result{File: s.File, Suite: s.Name, Case: c.Name, Kind: c.Kind}
	res.Warnings = wantsWarnings(handshake(p), c)
	defer func() {
		if v := recover(); v != nil {
			res.Passed, res.Message, res.Want, res.Got = false, fmt.Sprintf("the policy panicked: %v", v), "", ""
		}
	}()
	var f *failure
	switch c.Kind {
	case KindCanonical:
		f = runCanonical(ctx, p, c, ans)
	case KindSame:
		f = runSame(ctx, p, c, ans)
	case KindDiffer:
		f = runDiffer(ctx, p, c, ans)
	case KindProject:
		if f = runProject(ctx, p, c, ans); f == nil {
			f = sb.check(c, ans, "")
		}
	case KindReject:
		var refusal string
		if refusal, f = runReject(ctx, p, c, ans); f == nil {
			f = sb.check(c, ans, refusal)
		}
	case KindMalformed:
		f = &failure{msg: "malformed case: " + c.Err.Error()}
	default:
		f = &failure{msg: fmt.Sprintf("unknown case kind %q", c.Kind)}
	}
	if f == nil {
		res.Passed = true
		return res
	}
	res.Message, res.Want, res.Got = f.msg, shown(f.want), shown(f.got)
	return res
}

// wantsWarnings names the inputs case c gives that a policy with
// handshake h never sees: tool annotations in the snapshot without
// wants ["toolAnnotations"]. The host then sends names only, so a case
// whose outcome depends on annotations passes or fails for the wrong
// reason.
func wantsWarnings(h abi.Handshake, c *Case) []string {
	var out []string
	if c.Snapshot != nil && !slices.Contains(h.Wants, abi.WantToolAnnotations) {
		if snap, err := DecodeSnapshot(c.Snapshot); err == nil {
			for i, t := range snap.Tools {
				if t.Annotations != nil {
					out = append(out, fmt.Sprintf("snapshot.tools[%d] %q has annotations, but the plugin's handshake does not want %q, so project never sees them", i, t.Name, abi.WantToolAnnotations))
					break
				}
			}
		}
	}
	return out
}

// projectFunc is view.Project; tests replace it to check that the runner
// catches a projection that breaks the view contract.
var projectFunc = view.Project

// A failure is why a case failed.
type failure struct {
	msg, want, got string
}

func fail(format string, args ...any) *failure {
	return &failure{msg: fmt.Sprintf(format, args...)}
}

func (f *failure) wantGot(want, got string) *failure {
	f.want, f.got = want, got
	return f
}

// canonicalize sends one canonicalize call and checks the answer's shape,
// which a hand-written abi.Policy may not have done.
func canonicalize(ctx context.Context, p abi.Policy, settings []json.RawMessage) ([]abi.CanonicalResult, error) {
	req := &abi.CanonicalizeRequest{Settings: settings}
	resp, err := p.Canonicalize(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp == nil {
		return nil, errors.New("canonicalize returned no response")
	}
	if err := abi.ValidateCanonicalize(req, resp); err != nil {
		return nil, err
	}
	return resp.Results, nil
}

// keysTwice canonicalizes settings in two separate calls, the second with the
// batch reversed, and returns both answers in the order of settings. The
// second call sends each settings object with a trailing space: the same
// JSON value in other bytes, so that a policy memoizing results by the exact
// settings bytes (host.Plugin does) asks its plugin again rather than
// answering from its memo, which would hide a nondeterministic plugin.
func keysTwice(ctx context.Context, p abi.Policy, settings []json.RawMessage) (first, second []abi.CanonicalResult, f *failure) {
	first, err := canonicalize(ctx, p, settings)
	if err != nil {
		return nil, nil, fail("canonicalize failed: %v", err)
	}
	reversed := make([]json.RawMessage, len(settings))
	for i, s := range settings {
		if len(s) > 0 {
			s = append(s[:len(s):len(s)], ' ')
		}
		reversed[len(settings)-1-i] = s
	}
	second, err = canonicalize(ctx, p, reversed)
	if err != nil {
		return nil, nil, fail("second canonicalize call failed: %v", err)
	}
	slices.Reverse(second)
	return first, second, nil
}

// deterministic checks that two answers for the same settings object agree.
func deterministic(label string, a, b abi.CanonicalResult) *failure {
	switch {
	case (a.Error == "") != (b.Error == ""):
		return nondeterministic("%s was refused by one canonicalize call and accepted by the other", label).
			wantGot(resultString(a), resultString(b))
	case a.Key != b.Key:
		return nondeterministic("%s got two different keys from two canonicalize calls", label).
			wantGot(showKey(a.Key), showKey(b.Key))
	case a.Error != "" || bytes.Equal(a.Canonical, b.Canonical):
		return nil
	}
	eq, err := jsonEqual(a.Canonical, b.Canonical)
	switch {
	case len(a.Canonical) == 0 || len(b.Canonical) == 0:
		return nondeterministic("%s got a canonical form from one canonicalize call and none from the other", label).
			wantGot(resultString(a), resultString(b))
	case err != nil:
		return fail("%s: the policy's canonical form is not valid JSON: %v", label, err).
			wantGot(compactJSON(a.Canonical), compactJSON(b.Canonical))
	case !eq:
		return nondeterministic("%s got two different canonical forms from two canonicalize calls", label).
			wantGot(compactJSON(a.Canonical), compactJSON(b.Canonical))
	}
	return nil
}

// nondeterministic is the failure of a policy whose two answers for one
// settings object disagree. The message says how the second call differed
// from the first, since a policy that answers those bytes differently, not
// one that answers at random, fails the same way.
func nondeterministic(format string, args ...any) *failure {
	return fail("nondeterministic: "+format+" (the second call sent the same settings with a trailing space, in reverse order)", args...)
}

// showKey shows an opaque key, or the exact bytes of a canonical form, in a
// report: between backquotes when that is unambiguous, Go-quoted otherwise.
func showKey(k string) string {
	if strconv.CanBackquote(k) {
		return "`" + k + "`"
	}
	return strconv.Quote(k)
}

// resultString shows a canonicalize result in a report.
func resultString(r abi.CanonicalResult) string {
	if r.Error != "" {
		return "error " + strconv.Quote(r.Error)
	}
	if len(r.Canonical) > 0 {
		return compactJSON(r.Canonical)
	}
	return "key " + showKey(r.Key)
}

// theSettings labels the settings object of a canonical or reject case.
func theSettings(int) string { return "the settings" }

func runCanonical(ctx context.Context, p abi.Policy, c *Case, ans *answers) *failure {
	first, second, f := keysTwice(ctx, p, []json.RawMessage{c.Settings})
	if f != nil {
		return f
	}
	ans.canonicalize(theSettings, first, second)
	a := first[0]
	if f := deterministic("the settings", a, second[0]); f != nil {
		return f
	}
	want := compactJSON(c.Canonical)
	if a.Error != "" {
		return fail("the policy refused the settings").wantGot(want, resultString(a))
	}
	if len(a.Canonical) == 0 {
		return fail("the policy returned a key but no canonical form").wantGot(want, "no canonical form")
	}
	eq, err := jsonEqual(c.Canonical, a.Canonical)
	if err != nil {
		return fail("the policy's canonical form is not valid JSON: %v", err).wantGot(want, compactJSON(a.Canonical))
	}
	if !eq {
		return fail("canonical form differs").wantGot(want, compactJSON(a.Canonical))
	}
	return nil
}

// groupKeys computes the keys of a same or differ case, failing on any
// refusal or nondeterminism.
func groupKeys(ctx context.Context, p abi.Policy, c *Case, ans *answers) ([]string, *failure) {
	first, second, f := keysTwice(ctx, p, c.Group)
	if f != nil {
		return nil, f
	}
	ans.canonicalize(func(i int) string { return fmt.Sprintf("%s[%d]", c.Kind, i) }, first, second)
	keys := make([]string, len(first))
	for i := range first {
		label := fmt.Sprintf("%s[%d]", c.Kind, i)
		if first[i].Error != "" {
			return nil, fail("the policy refused %s", label).
				wantGot("a key for "+compactJSON(c.Group[i]), resultString(first[i]))
		}
		if f := deterministic(label, first[i], second[i]); f != nil {
			return nil, f
		}
		keys[i] = first[i].Key
	}
	return keys, nil
}

func runSame(ctx context.Context, p abi.Policy, c *Case, ans *answers) *failure {
	keys, f := groupKeys(ctx, p, c, ans)
	if f != nil {
		return f
	}
	for i := 1; i < len(keys); i++ {
		if keys[i] != keys[0] {
			return fail("same[0] and same[%d] got different keys", i).
				wantGot(showKey(keys[0]), showKey(keys[i]))
		}
	}
	return nil
}

func runDiffer(ctx context.Context, p abi.Policy, c *Case, ans *answers) *failure {
	keys, f := groupKeys(ctx, p, c, ans)
	if f != nil {
		return f
	}
	firstIndex := make(map[string]int, len(keys))
	for j, k := range keys {
		if i, dup := firstIndex[k]; dup {
			return fail("differ[%d] and differ[%d] got the same key", i, j).
				wantGot("two different keys", showKey(k)+" for both")
		}
		firstIndex[k] = j
	}
	return nil
}

// runReject runs a reject case and returns, when it passed, project's own
// refusal message for the settings (see abi.RefusalMessager; "" when the
// policy's error does not carry one).
func runReject(ctx context.Context, p abi.Policy, c *Case, ans *answers) (string, *failure) {
	first, second, f := keysTwice(ctx, p, []json.RawMessage{c.Settings})
	if f != nil {
		f.msg += " (a reject case needs a per-item error, not a failed call)"
		return "", f
	}
	ans.canonicalize(theSettings, first, second)
	if first[0].Error == "" {
		return "", fail("the policy accepted settings it must refuse").wantGot("an error", resultString(first[0]))
	}
	if second[0].Error == "" {
		return "", fail("nondeterministic: the settings were refused by one canonicalize call and accepted by the other").
			wantGot("an error", resultString(second[0]))
	}
	req := &abi.ProjectRequest{Settings: c.Settings, Tools: []string{}, Prompts: []string{}, Resources: []string{}}
	resp, err := p.Project(ctx, req)
	switch {
	case err == nil:
		return "", fail("canonicalize refused the settings but project accepted them").
			wantGot("an error", marshalLine(resp))
	case !errors.Is(err, abi.ErrRefused):
		// A refusal is an error wrapping abi.ErrRefused (a wasm plugin's
		// error return, host.ErrPluginRefused); a timeout, a trap, a bad
		// answer or any other error of the call is the plugin failing.
		return "", fail("project failed instead of refusing the settings: %v", err).
			wantGot("a refusal (an error wrapping abi.ErrRefused)", oneLine(err.Error()))
	}
	ans.add("the project call's refusal", "error "+strconv.Quote(err.Error()))
	var rm abi.RefusalMessager
	if errors.As(err, &rm) {
		return rm.RefusalMessage(), nil
	}
	return "", nil
}

func runProject(ctx context.Context, p abi.Policy, c *Case, ans *answers) *failure {
	want := c.Project.String()
	snap, err := DecodeSnapshot(c.Snapshot)
	if err != nil {
		return fail("snapshot: %v", err)
	}
	before, err := json.Marshal(snap)
	if err != nil {
		return fail("snapshot: %v", err)
	}
	proj, err := projectFunc(ctx, p, c.Settings, snap)
	if err != nil {
		return fail("projection failed: %v", err).wantGot(want, "an error")
	}
	if proj == nil {
		return fail("projection returned nothing").wantGot(want, "nil")
	}
	// Descriptions are stated only for a policy that may replace them;
	// for any other a changed description is a changed item, below.
	var descSnap *pool.Snapshot
	if handshake(p).Renames {
		descSnap = snap
	}
	got, err := SummarizeSnapshot(proj, descSnap)
	if err != nil {
		return fail("projection: %v", err)
	}
	if !c.Project.equal(got) {
		return fail("projection differs").wantGot(want, got.String())
	}
	if after, err := json.Marshal(snap); err != nil || !bytes.Equal(before, after) {
		return fail("the snapshot passed to the projection was modified").wantGot(string(before), string(after))
	}
	// A replaced description (stated in got, checked above) is put back
	// to the snapshot's before the items are compared.
	tools, prompts := slices.Clone(proj.Tools), slices.Clone(proj.Prompts)
	for k, t := range got.Tools {
		if t.Description != "" {
			c := *tools[k]
			c.Description = snapDescription(snap.Tools, t.Name, func(x *mcp.Tool) (string, string) { return x.Name, x.Description })
			tools[k] = &c
		}
	}
	for k, pp := range got.Prompts {
		if pp.Description != "" {
			c := *prompts[k]
			c.Description = snapDescription(snap.Prompts, pp.Name, func(x *mcp.Prompt) (string, string) { return x.Name, x.Description })
			prompts[k] = &c
		}
	}
	if f := checkUnchanged("tools", snap.Tools, tools, func(t *mcp.Tool) string { n, _ := upstreamOf(t.Name, t.Meta); return n }, strippedTool); f != nil {
		return f
	}
	if f := checkUnchanged("prompts", snap.Prompts, prompts, func(p *mcp.Prompt) string { n, _ := upstreamOf(p.Name, p.Meta); return n }, strippedPrompt); f != nil {
		return f
	}
	if f := checkUnchanged("resources", snap.Resources, proj.Resources, func(r *mcp.Resource) string { return r.URI }, marshalItem); f != nil {
		return f
	}

	// Project again from a fresh copy of the snapshot: a policy must give
	// the same projection every time.
	snap2, err := DecodeSnapshot(c.Snapshot)
	if err != nil {
		return fail("snapshot: %v", err)
	}
	proj2, err := projectFunc(ctx, p, c.Settings, snap2)
	if err != nil {
		return fail("nondeterministic: the second projection failed: %v", err).wantGot(got.String(), "an error")
	}
	if proj2 == nil {
		return fail("second projection returned nothing").wantGot(got.String(), "nil")
	}
	if descSnap != nil {
		descSnap = snap2
	}
	got2, err := SummarizeSnapshot(proj2, descSnap)
	if err != nil {
		return fail("second projection: %v", err)
	}
	if !got.equal(got2) {
		return fail("nondeterministic: two projections of the same snapshot differ").wantGot(got.String(), got2.String())
	}
	return nil
}

func marshalItem[T any](v *T) ([]byte, error) { return json.Marshal(v) }

// snapDescription returns the description of the first item of snap named
// name, the one SummarizeSnapshot compares a projected item with.
func snapDescription[T any](snap []*T, name string, of func(*T) (name, description string)) string {
	for _, x := range snap {
		if x == nil {
			continue
		}
		if n, d := of(x); n == name {
			return d
		}
	}
	return ""
}

// strippedTool marshals t without the two session flags in its _meta (and
// without _meta when nothing else is left in it), under its upstream name
// (a golden case states renames, see SummarizeSnapshot), which is what
// must be identical between a snapshot tool and its projected clone.
func strippedTool(t *mcp.Tool) ([]byte, error) {
	c := *t
	c.Name, _ = upstreamOf(t.Name, t.Meta)
	c.Meta = stripMeta(c.Meta, view.MetaTrust, view.MetaAlwaysLoad, view.MetaUpstreamName)
	return json.Marshal(&c)
}

// strippedPrompt is strippedTool for a prompt.
func strippedPrompt(p *mcp.Prompt) ([]byte, error) {
	c := *p
	c.Name, _ = upstreamOf(p.Name, p.Meta)
	c.Meta = stripMeta(c.Meta, view.MetaUpstreamName)
	return json.Marshal(&c)
}

// stripMeta returns m without keys, nil when nothing is left.
func stripMeta(m mcp.Meta, keys ...string) mcp.Meta {
	if m == nil {
		return nil
	}
	m = maps.Clone(m)
	for _, k := range keys {
		delete(m, k)
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// checkUnchanged checks that each projected item is a copy of a snapshot
// item, matched in snapshot order by name, equal under norm, and, for
// tools, a clone rather than the snapshot's own object.
func checkUnchanged[T any](list string, snap, proj []*T, name func(*T) string, norm func(*T) ([]byte, error)) *failure {
	next := 0
	for k, pt := range proj {
		got, err := norm(pt)
		if err != nil {
			return fail("projected %s[%d]: %v", list, k, err)
		}
		match, sameName := -1, -1
		var want []byte
		for i := next; i < len(snap) && match < 0; i++ {
			if name(snap[i]) != name(pt) {
				continue
			}
			w, err := norm(snap[i])
			if err != nil {
				return fail("snapshot %s[%d]: %v", list, i, err)
			}
			if sameName < 0 {
				sameName, want = i, w
			}
			if bytes.Equal(w, got) {
				match = i
			}
		}
		switch {
		case sameName < 0:
			return fail("projected %s[%d] %q is not in the snapshot after the previous item (order changed or item invented)", list, k, name(pt))
		case match < 0:
			return fail("projected %s[%d] %q differs from the snapshot in more than the session flags", list, k, name(pt)).
				wantGot(string(want), string(got))
		}
		if list == "tools" && pt == snap[match] {
			return fail("projected tools[%d] %q is the snapshot's own object, not a clone", k, name(pt))
		}
		next = match + 1
	}
	return nil
}
