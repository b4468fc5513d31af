package host

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
)

// TestCanonicalizeMemoKeysAreCopies: the memo's keys (pieces of one string
// per call) are copies of the settings bytes, so a caller reusing its
// buffers after a call changes nothing the memo answers; repeats, memo
// hits and new settings mix in one request.
func TestCanonicalizeMemoKeysAreCopies(t *testing.T) {
	p := loadWat(t, "script", Options{})
	buf := []byte(`{"key":"a"}{"key":"b"}`)
	req := &abi.CanonicalizeRequest{Settings: []json.RawMessage{buf[:11], buf[11:], buf[:11]}}
	resp, err := p.Canonicalize(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "a"}, keys(resp))
	copy(buf, `{"key":"x"}{"key":"y"}`)
	calls := p.stats.calls.Load()
	resp, err = canon(p, `{"key":"b"}`, `{"key":"a"}`)
	require.NoError(t, err)
	assert.Equal(t, []string{"b", "a"}, keys(resp))
	assert.Equal(t, calls, p.stats.calls.Load(), "both from the memo")

	resp, err = p.Canonicalize(context.Background(), &abi.CanonicalizeRequest{Settings: []json.RawMessage{
		json.RawMessage(`{"key":"c"}`), json.RawMessage(`{"key":"a"}`), json.RawMessage(`{"error":"e"}`), json.RawMessage(`{"key":"c"}`), json.RawMessage(`{"error":"e"}`),
	}})
	require.NoError(t, err)
	assert.Equal(t, "c", resp.Results[0].Key)
	assert.Equal(t, "a", resp.Results[1].Key)
	assert.Equal(t, "e", resp.Results[2].Error)
	assert.Equal(t, "e", resp.Results[4].Error)
	assert.Equal(t, "c", resp.Results[3].Key)
	assert.Equal(t, calls+1, p.stats.calls.Load(), "one call for c and the error")
}
