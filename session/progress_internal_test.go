package session

import (
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProgressTokensCannotBeGuessed: a token the relay hands to one upstream
// cannot be guessed by another, so an upstream sending progress for tokens
// it was never given (the relay's prefix with any counter) reaches no call;
// the call's own token does.
func TestProgressTokensCannotBeGuessed(t *testing.T) {
	r := NewProgressRelay()
	got := make(chan *mcp.ProgressNotificationParams, 1024)
	tok, end := r.begin(func(p *mcp.ProgressNotificationParams) { got <- p })
	other, endOther := r.begin(func(*mcp.ProgressNotificationParams) {})
	defer endOther()
	require.True(t, strings.HasPrefix(tok, tokenPrefix))
	assert.NotEqual(t, tok, other)
	assert.GreaterOrEqual(t, len(tok)-len(tokenPrefix), 26, "128 bits or more, in base32")

	for i := range 10_000 {
		assert.True(t, r.deliver(&mcp.ProgressNotificationParams{ProgressToken: tokenPrefix + strconv.Itoa(i), Progress: 666}), "the relay's prefix is consumed")
	}
	assert.True(t, r.deliver(&mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1}))
	end()
	require.Len(t, got, 1, "only the call's own token reached it")
	assert.Equal(t, float64(1), (<-got).Progress)
}
