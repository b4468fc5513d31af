package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/wasmhost/wasmhost/internal/mcptest"
)

// The headless browser the page tests share: one per test binary, started
// by the first test that needs it and closed by TestMain (closeBrowser).
var browser struct {
	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	err    error
}

// closeBrowser closes the shared browser, if one was started.
func closeBrowser() {
	if browser.cancel != nil {
		browser.cancel()
	}
}

// browserPID returns the process id of the shared browser, or 0 when none
// was started.
func browserPID() int {
	if browser.ctx == nil {
		return 0
	}
	if c := chromedp.FromContext(browser.ctx); c != nil && c.Browser != nil {
		if p := c.Browser.Process(); p != nil {
			return p.Pid
		}
	}
	return 0
}

// A tab is one page of the shared browser, with what its console said.
type tab struct {
	t   *testing.T
	ctx context.Context
	r   *running

	mu      sync.Mutex
	console []string
	urls    []string // every request the page made
}

// chromium returns the path of Debian's chromium (make tools installs
// it). Without it the test is skipped, unless the environment has CI set:
// there it fails.
func chromium(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("chromium is not installed (make tools installs it): %v", err)
		}
		t.Skip("chromium is not installed (make tools installs it); the page's browser tests skip")
	}
	return path
}

// newTab opens a tab in the shared headless browser.
func newTab(t *testing.T, r *running) *tab {
	t.Helper()
	path := chromium(t)
	browser.once.Do(func() {
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(path),
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.Flag("disable-gpu", true),
			chromedp.Flag("disable-extensions", true),
		)
		if os.Geteuid() == 0 {
			opts = append(opts, chromedp.NoSandbox) // chromium refuses to run as root with its sandbox
		}
		actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, bcancel := chromedp.NewContext(actx)
		browser.ctx = bctx
		browser.cancel = func() { bcancel(); acancel() }
		browser.err = chromedp.Do(bctx) // starts the browser
	})
	if browser.err != nil {
		t.Fatalf("starting chromium: %v", browser.err)
	}
	tb := &tab{t: t, r: r}
	ctx, cancel := chromedp.NewContext(browser.ctx, chromedp.WithListener(func(ev any) {
		if ev, ok := ev.(*network.EventRequestWillBeSent); ok && ev.Request != nil {
			tb.mu.Lock()
			tb.urls = append(tb.urls, ev.Request.URL)
			tb.mu.Unlock()
		}
	}))
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, within(t, readyWithin))
	t.Cleanup(cancelTimeout)
	tb.ctx = ctx
	if err := chromedp.Do(ctx); err != nil { // opens the tab
		t.Fatalf("opening a tab: %v", err)
	}
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			tb.mu.Lock()
			tb.console = append(tb.console, m.String())
			tb.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("page console:\n%s\npage text:\n%s", strings.Join(tb.consoleLines(), "\n"), tb.text())
		}
		cancelTimeout()
		<-done
	})
	return tb
}

func (tb *tab) consoleLines() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append([]string(nil), tb.console...)
}

func (tb *tab) requested() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append([]string(nil), tb.urls...)
}

// text returns the page's visible text (for failure messages).
func (tb *tab) text() string {
	s, err := chromedp.Run(tb.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ''`))
	if err != nil {
		return "(cannot read the page: " + err.Error() + ")"
	}
	return s
}

// run runs steps in the tab, failing the test with what went wrong.
func (tb *tab) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	if err := chromedp.Do(tb.ctx, steps...); err != nil {
		tb.t.Fatalf("%s: %v\ndaemon logs:\n%s", what, err, tb.r.logs)
	}
}

// waitJS waits until the JavaScript expression expr is true in the page,
// within eventWithin (the page polls /v1/state every 1.5 s).
func (tb *tab) waitJS(what, expr string) {
	tb.t.Helper()
	if _, err := chromedp.Run(tb.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(within(tb.t, eventWithin)))); err != nil {
		tb.t.Fatalf("waiting for %s: %v\ndaemon logs:\n%s", what, err, tb.r.logs)
	}
}

// eval returns the value of the JavaScript expression expr in the page.
func eval[T any](tb *tab, expr string) T {
	tb.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tb.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// cellExpr is a JavaScript expression for the text of field of the matrix
// cell of session and server ("" when there is none).
func cellExpr(session, server, field string) string {
	sel, _ := json.Marshal(fmt.Sprintf(`#matrix td[data-session=%q][data-server=%q] [data-field=%q]`, session, server, field))
	return fmt.Sprintf(`((document.querySelector(%s) || {}).textContent || '')`, sel)
}

// toolsExpr is a JavaScript expression for the tool names the detail
// panel lists, joined by ",".
const toolsExpr = `[...document.querySelectorAll('#detail-tools [data-field=tool]')].map(e => e.textContent).join(',')`

// TestUIBrowser opens the operator page in a headless chromium, gives it
// the admin token through its form, and finds the servers, sessions, the
// matrix's counts and trust, the plugin's digest and, on a click, a
// cell's tool names. A reload that changes bob's filter shows on the
// page, in the matrix, the open cell and the reload history, while it
// stays open. The token is never in a URL the page requests.
func TestUIBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a headless browser")
	}
	chromium(t)
	r := start(t, baseConfig())
	r.connect("alice", aliceToken)
	st := r.state()
	tb := newTab(t, r)

	tb.run("opening the page", chromedp.Navigate(r.d.URL()+"/ui/"), chromedp.WaitVisible(chromedp.ID("token")))
	tb.run("entering the token", chromedp.SendKeys(chromedp.ID("token"), adminToken), chromedp.Click(chromedp.ID("connect")))
	tb.waitJS("the plugin's digest", fmt.Sprintf(`document.getElementById('plugin-digest').textContent === %q`, st.Policy.SHA256))
	require := func(cond bool, format string, args ...any) {
		t.Helper()
		if !cond {
			t.Fatalf(format+"\npage text:\n%s", append(args, tb.text())...)
		}
	}
	require(st.Policy.SHA256 != "" && st.Policy.Name != "", "the state names a plugin: %+v", st.Policy)
	s := eval[string](tb, `document.getElementById('plugin-name').textContent`)
	require(s == st.Policy.Name, "plugin name %q, want %q", s, st.Policy.Name)

	// Servers: the demo upstream, ready, with its process id.
	tb.waitJS("the demo server's row", `(document.querySelector('#servers tr[data-server=demo] [data-field=state]') || {}).textContent === 'ready'`)
	s = eval[string](tb, `document.querySelector('#servers tr[data-server=demo] [data-field=pid]').textContent`)
	require(st.Pool[0].PID > 0 && s == fmt.Sprint(st.Pool[0].PID), "pid %q, want %d", s, st.Pool[0].PID)
	s = eval[string](tb, `document.querySelector('#servers tr[data-server=demo] [data-field=restarts]').textContent`)
	require(s == "0", "restarts %q", s)

	// Sessions and their clients.
	s = eval[string](tb, `[...document.querySelectorAll('#sessions tbody tr')].map(r => r.dataset.session + ':' + r.querySelector('[data-field=clients]').textContent).join(',')`)
	require(s == "alice:1,bob:0", "sessions and client counts %q", s)
	s = eval[string](tb, `document.querySelector('#sessions tr[data-session=alice] [data-field=client-list]').textContent`)
	require(strings.Contains(s, "e2e-alice"), "alice's client %q", s)

	// The matrix: alice sees 3 trusted tools, bob all but write_note and
	// add_tool, untrusted.
	s = eval[string](tb, cellExpr("alice", "demo", "counts"))
	require(strings.HasPrefix(s, "3 tools / "), "alice's cell %q", s)
	s = eval[string](tb, cellExpr("alice", "demo", "trusted"))
	require(s == "3 trusted", "alice's trust %q", s)
	s = eval[string](tb, cellExpr("bob", "demo", "counts"))
	require(strings.HasPrefix(s, "4 tools / "), "bob's cell %q", s)
	s = eval[string](tb, cellExpr("bob", "demo", "trusted"))
	require(s == "0 trusted", "bob's trust %q", s)

	// A click shows the cell's tools.
	tb.run("clicking bob's cell", chromedp.Click(chromedp.CSS(`#matrix td[data-session=bob][data-server=demo] button`)))
	tb.waitJS("bob's tools", toolsExpr+` === 'add,echo,pid,read_note'`)

	// A reload that changes bob's filter shows while the page is open.
	writeConfig(t, r.path, set(baseConfig(), "sessions.bob.overrides.demo.excludeTools", []string{"write_note", "add_tool", "add"}))
	tb.waitJS("bob's changed count", cellExpr("bob", "demo", "counts")+`.startsWith('3 tools / ')`)
	tb.waitJS("bob's changed tools", toolsExpr+` === 'echo,pid,read_note'`)
	tb.waitJS("the reload in the history", `[...document.querySelectorAll('#reloads [data-field=summary]')].some(e => e.textContent.includes('1 session changed (bob)'))`)
	s = eval[string](tb, cellExpr("alice", "demo", "counts"))
	require(strings.HasPrefix(s, "3 tools / "), "alice's cell after the reload %q", s)

	href := eval[string](tb, `location.href`)
	urls := tb.requested()
	require(len(urls) > 3, "the page's requests were seen: %q", urls)
	for _, u := range append(urls, href) {
		require(!strings.Contains(u, adminToken), "the token is in a URL: %s", u)
	}
	for _, line := range tb.consoleLines() {
		require(!strings.Contains(line, "Content Security Policy") && !strings.HasPrefix(line, "exception"), "the page reported: %s", line)
	}
}

// TestUIBrowserEscapes: tool names and client names are the upstream's
// and the client's words; the page shows them as text, never as HTML (the
// names below would run script if they were). The token comes in the
// URL's fragment, which the page then takes out of the address bar.
func TestUIBrowserEscapes(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a headless browser")
	}
	chromium(t)
	const (
		hostileTool   = `<img src=x onerror="window.__xss='tool'">`
		hostileTool2  = `</td><script>window.__xss='script'</script>`
		hostileClient = `<img src=x onerror="window.__xss='client'">`
		eveToken      = "eve-token-0123456789abcdef"
	)
	u := mcptest.NewHTTPUpstream(t, mcptest.HTTPUpstreamConfig{
		NewServer: func() *mcp.Server {
			srv := mcp.NewServer(&mcp.Implementation{Name: "evil", Version: "1"}, &mcp.ServerOptions{Logger: slog.New(slog.DiscardHandler)})
			for _, name := range []string{hostileTool, hostileTool2} {
				srv.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
					func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
						return &mcp.CallToolResult{}, nil
					})
			}
			return srv
		},
		Options: mcp.StreamableHTTPOptions{Logger: slog.New(slog.DiscardHandler)},
	})
	r := start(t, map[string]any{
		"listen":     "127.0.0.1:0",
		"admin":      map[string]any{"token": adminToken},
		"mcpServers": map[string]any{"evil": map[string]any{"httpUrl": u.URL(), "trust": true}},
		"sessions":   map[string]any{"eve": map[string]any{"token": eveToken}},
	})
	tr := &http.Transport{}
	cl := mcp.NewClient(&mcp.Implementation{Name: hostileClient, Version: "1"}, &mcp.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	cs, err := cl.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint:   r.d.URL() + "/mcp/eve",
		HTTPClient: &http.Client{Transport: &bearerTransport{token: eveToken, base: tr}},
	}, nil)
	if err != nil {
		t.Fatalf("connecting eve's client: %v\nlogs:\n%s", err, r.logs)
	}
	t.Cleanup(func() { _ = cs.Close(); tr.CloseIdleConnections() })

	tb := newTab(t, r)
	tb.run("opening the page with the token in the fragment", chromedp.Navigate(r.d.URL()+"/ui/#token="+adminToken))
	tb.waitJS("eve's cell", cellExpr("eve", "evil", "counts")+`.startsWith('2 tools / ')`)
	tb.waitJS("eve's client", `((document.querySelector('#sessions tr[data-session=eve] [data-field=client-list] li') || {}).textContent || '').startsWith(`+jsString(hostileClient+" 1 (")+`)`)
	tb.run("clicking eve's cell", chromedp.Click(chromedp.CSS(`#matrix td[data-session=eve][data-server=evil] button`)))
	tb.waitJS("the hostile tool names, as text", toolsExpr+` === `+jsString(hostileTool2+","+hostileTool)+` || `+toolsExpr+` === `+jsString(hostileTool+","+hostileTool2))
	if s := eval[string](tb, cellExpr("eve", "evil", "trusted")); s != "2 trusted" {
		t.Errorf("eve's trust %q", s)
	}
	if xss := eval[string](tb, `String(window.__xss)`); xss != "undefined" {
		t.Errorf("a name ran as script: window.__xss = %s", xss)
	}
	if n := eval[int](tb, `document.images.length + document.querySelectorAll('script').length`); n != 1 {
		t.Errorf("the page has %d images and scripts, want only its own script", n)
	}
	if href := eval[string](tb, `location.href`); strings.Contains(href, adminToken) {
		t.Errorf("the token stays in the address bar: %s", href)
	}
	for _, u := range tb.requested() {
		if strings.Contains(u, adminToken) {
			t.Errorf("the token is in a requested URL: %s", u)
		}
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
