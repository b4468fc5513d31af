package view_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/internal/opcount"
	"github.com/wasmhost/wasmhost/metakey"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/view"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

// TestMemoDeltasHammer: views of one memo applying snapshots and changing
// settings from many goroutines at once end with their registries equal
// to the projection of their final settings on the final snapshot, shared
// deltas or not.
func TestMemoDeltasHammer(t *testing.T) {
	ctx := context.Background()
	c := &opcount.Counters{}
	memo := view.NewMemo()
	settings := []string{`{}`, `{"trust":true}`, `{"includeTools":["b"]}`, `{"excludeTools":["a"]}`}
	snaps := make([]*pool.Snapshot, 30)
	for i := range snaps {
		names := []string{"a", "b", "c", "d"}[:1+i%4]
		snaps[i] = newSnapshot(uint64(i+1), names...)
	}
	type vw struct {
		v   *view.View
		att *view.Attachment
		reg *viewtest.Registry
	}
	var vs []vw
	for i := range 6 {
		reg := viewtest.NewRegistry()
		v := view.New(view.Config{Session: fmt.Sprint("s", i), Server: "fs", Registry: reg, Counters: c, Policy: metakey.Reference{}, Settings: json.RawMessage(`{}`), Logger: quiet})
		att, err := v.Attach(memo)
		require.NoError(t, err)
		vs = append(vs, vw{v, att, reg})
	}
	var wg sync.WaitGroup
	for i, x := range vs {
		wg.Go(func() {
			for j, s := range snaps {
				require.NoError(t, x.att.Apply(ctx, s))
				_, err := x.v.SetSettings(ctx, json.RawMessage(settings[(i/2+j)%len(settings)]))
				require.NoError(t, err)
			}
			_, err := x.v.SetSettings(ctx, json.RawMessage(settings[i%len(settings)]))
			require.NoError(t, err)
		})
	}
	wg.Wait()
	for i, x := range vs {
		requireRegistered(t, x.reg, "fs", settings[i%len(settings)], snaps[len(snaps)-1])
	}
}
