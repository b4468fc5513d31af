package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/metakey"
)

// gatedPolicy is the reference policy with its canonicalize calls recorded
// and, while gate is not nil, each held until the test sends on gate.
type gatedPolicy struct {
	metakey.Reference
	gate    chan struct{}
	started chan int // the number of settings of each call, as it starts

	mu    sync.Mutex
	calls [][]string
}

func (p *gatedPolicy) Canonicalize(ctx context.Context, req *abi.CanonicalizeRequest) (*abi.CanonicalizeResponse, error) {
	var got []string
	for _, s := range req.Settings {
		got = append(got, string(s))
	}
	p.mu.Lock()
	p.calls = append(p.calls, got)
	p.mu.Unlock()
	if p.started != nil {
		p.started <- len(got)
	}
	if p.gate != nil {
		select {
		case <-p.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return p.Reference.Canonicalize(ctx, req)
}

func trustSettings(i int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"trust":true,"includeTools":["t%d"]}`, i))
}

// TestAheadBatchesWhatArrivesDuringACall: the first settings object goes
// to the policy at once; those added while that call runs go together in
// the next; wait returns once every one is in the memo, each sent once.
func TestAheadBatchesWhatArrivesDuringACall(t *testing.T) {
	t.Parallel()
	p := &gatedPolicy{gate: make(chan struct{}), started: make(chan int, 8)}
	keys := newKeyMemo(p)
	a := startAhead(context.Background(), keys)
	a.add(trustSettings(0))
	require.Equal(t, 1, <-p.started, "the first call carries the first object alone")
	for i := 1; i < 50; i++ {
		a.add(trustSettings(i))
	}
	p.gate <- struct{}{}
	require.Equal(t, 49, <-p.started, "the second carries all that arrived meanwhile")
	p.gate <- struct{}{}
	a.wait()

	require.Len(t, p.calls, 2)
	for i := range 50 {
		want, err := metakey.Reference{}.Canonicalize(context.Background(), &abi.CanonicalizeRequest{Settings: []json.RawMessage{trustSettings(i)}})
		require.NoError(t, err)
		key, ok := keys.lookup(trustSettings(i))
		require.True(t, ok, "settings %d is in the memo", i)
		require.Equal(t, want.Results[0].Key, key)
	}
}

// TestAheadWait: wait with nothing added makes no call; a call that fails
// (here, its context ends) is not reported and leaves the memo without the
// key, so the views ask the policy themselves; wait returns either way.
func TestAheadWait(t *testing.T) {
	t.Parallel()
	t.Run("nothing added", func(t *testing.T) {
		p := &gatedPolicy{}
		a := startAhead(context.Background(), newKeyMemo(p))
		a.wait()
		require.Empty(t, p.calls)
	})
	t.Run("failed call", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		p := &gatedPolicy{gate: make(chan struct{}), started: make(chan int, 1)}
		keys := newKeyMemo(p)
		a := startAhead(ctx, keys)
		a.add(trustSettings(1))
		<-p.started
		cancel()
		a.wait()
		_, ok := keys.lookup(trustSettings(1))
		require.False(t, ok)
	})
	t.Run("added just before wait", func(t *testing.T) {
		for range 200 {
			p := &gatedPolicy{}
			keys := newKeyMemo(p)
			a := startAhead(context.Background(), keys)
			a.add(trustSettings(7))
			a.wait()
			_, ok := keys.lookup(trustSettings(7))
			require.True(t, ok)
		}
	})
}
