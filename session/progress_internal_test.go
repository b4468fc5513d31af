package session

import (
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/mcptest"
)

// TestProgressTokensCannotBeGuessed: a token the relay hands to one upstream
// cannot be guessed by another, so an upstream sending progress for tokens
// it was never given (the relay's prefix with any counter) reaches no call;
// the call's own token does.
func TestProgressTokensCannotBeGuessed(t *testing.T) {
	t.Parallel()
	r := NewProgressRelay()
	got := make(chan *mcp.ProgressNotificationParams, 1024)
	tok, end := r.begin(func(p *mcp.ProgressNotificationParams) { got <- p })
	other, endOther := r.begin(func(*mcp.ProgressNotificationParams) {})
	defer endOther()
	require.True(t, strings.HasPrefix(tok, tokenPrefix))
	assert.NotEqual(t, tok, other)
	assert.GreaterOrEqual(t, len(tok)-len(tokenPrefix), 26, "128 bits or more, in base32")

	for i := range 10_000 {
		assert.True(t, r.deliver(&mcp.ProgressNotificationParams{ProgressToken: tokenPrefix + strconv.Itoa(i), Progress: 666}, true), "the relay's prefix is consumed")
	}
	assert.True(t, r.deliver(&mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1}, true))
	end()
	require.Len(t, got, 1, "only the call's own token reached it")
	assert.Equal(t, float64(1), (<-got).Progress)
}

// TestEventTap: the tap passes a server-sent event stream through
// byte for byte and delivers the relay's progress notifications in it as
// the go-sdk reads them, however the stream is cut into reads: with CRLF
// line ends, data split over several lines, an event too large to keep
// just before, long comment and id lines; not in an event of another name,
// nor after a malformed line, where the go-sdk stops.
func TestEventTap(t *testing.T) {
	t.Parallel()
	r := NewProgressRelay()
	big := `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"` + strings.Repeat("x", maxTapEvent) + `"}]}}`
	for _, size := range []int{1, 2, 7, 100, 4096, 1 << 30} {
		var got []string // end returns once every delivery was sent: no lock needed after it
		tok, end := r.begin(func(p *mcp.ProgressNotificationParams) { got = append(got, p.Message) })
		note := func(msg string) string {
			return `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"` + tok + `","progress":1,"message":"` + msg + `"}}`
		}
		stream := "event: message\nid: 1\ndata: " + note("a") + "\n\n" +
			": a comment\r\ndata: " + note("b") + "\r\n\r\n" +
			"data: " + big + "\n\n" +
			"data: " + strings.Replace(note("c"), `,"params"`, "\ndata:,\"params\"", 1) + "\n\n" + // joined with '\n' between JSON tokens
			"data: " + note("d") + "\r\n\r\n" +
			"data: " + big[:100] + "\ndata: " + strings.Repeat("y", maxTapEvent) + "\n\n" +
			"data: " + `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"someone-else","progress":1}}` + "\n\n" +
			": " + strings.Repeat("z", maxTapEvent+10) + "\nid: " + strings.Repeat("7", maxTapEvent) + "\ndata: " + note("e") + "\n\n" + // long lines that are not data
			"event: other\ndata: " + note("x") + "\n\n" + // the go-sdk reads only "message" events
			"event: message\ndata: " + note("f") + "\n\n" +
			"data: " + note("g") + "\nno colon here\ndata: " + note("y") + "\n\n" + // the go-sdk stops at a malformed line
			"data: " + note("z")
		tap := &eventTap{ReadCloser: io.NopCloser(mcptest.ChunkedReader(stream, size)), relay: r}
		out, err := io.ReadAll(tap)
		require.NoError(t, err)
		end()
		assert.Equal(t, stream, string(out), "read %d bytes at a time", size)
		assert.Equal(t, []string{"a", "b", "c", "d", "e", "f"}, got, "read %d bytes at a time", size)
	}
}

// TestHandlePassesOverTappedCalls: once a tap delivered a call's progress,
// the go-sdk handler's copies of it are not delivered again; a call no tap
// serves gets its progress from the handler.
func TestHandlePassesOverTappedCalls(t *testing.T) {
	t.Parallel()
	r := NewProgressRelay()
	var mu sync.Mutex
	counts := map[string]int{}
	count := func(name string) func(*mcp.ProgressNotificationParams) {
		return func(*mcp.ProgressNotificationParams) { mu.Lock(); counts[name]++; mu.Unlock() }
	}
	tapped, endTapped := r.begin(count("tapped"))
	handled, endHandled := r.begin(count("handled"))
	for i := range 3 {
		p := &mcp.ProgressNotificationParams{ProgressToken: tapped, Progress: float64(i)}
		r.deliver(p, true)
		r.Handle(t.Context(), &mcp.ProgressNotificationClientRequest{Params: p})
		r.Handle(t.Context(), &mcp.ProgressNotificationClientRequest{Params: &mcp.ProgressNotificationParams{ProgressToken: handled, Progress: float64(i)}})
	}
	endTapped()
	endHandled()
	assert.Equal(t, map[string]int{"tapped": 3, "handled": 3}, counts)
}
