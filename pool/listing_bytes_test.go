package pool_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/wasmhost/wasmhost/config"
	"github.com/wasmhost/wasmhost/pool"
	"github.com/wasmhost/wasmhost/reconcile"
	"github.com/wasmhost/wasmhost/view/viewtest"
)

// hugePages makes h answer method with endless pages of one item each,
// every item carrying pageBytes of text, and counts the pages it served.
func hugePages(h *hostile, method string, pageBytes int, on *atomic.Bool) *atomic.Int64 {
	var served atomic.Int64
	filler := strings.Repeat("x", pageBytes)
	h.setHook(func(ctx context.Context, m string, _ mcp.Request) (mcp.Result, error, bool) {
		if m != method || (on != nil && !on.Load()) {
			return nil, nil, false
		}
		n := int(served.Add(1))
		next := fmt.Sprintf("page-%d", n)
		switch r := page(method, n, 1, next).(type) {
		case *mcp.ListToolsResult:
			r.Tools[0].Description = filler
			return r, nil, true
		case *mcp.ListPromptsResult:
			r.Prompts[0].Description = filler
			return r, nil, true
		case *mcp.ListResourcesResult:
			r.Resources[0].Description = filler
			return r, nil, true
		case *mcp.ListResourceTemplatesResult:
			r.ResourceTemplates[0].Description = filler
			return r, nil, true
		}
		panic(m)
	})
	return &served
}

// Before the fix, a listing had no byte bound, only 1,000 pages and 50,000
// items: an upstream answering with pages of 15 MiB drove the daemon to
// 3.9 GB before anything stopped it. Each listing now has a byte cap (the
// spec's MaxListingBytes, "maxListingBytes" in the config): past it the
// entry fails with a reason naming the server and the cap, after a few
// pages instead of a thousand, and another server's session keeps working.
func TestHostileHugeListingIsCapped(t *testing.T) {
	t.Parallel()
	const pageBytes = 1 << 20
	const cap = 3 * pageBytes
	for _, method := range listMethods {
		t.Run(method, func(t *testing.T) {
			h := newHostile(t, "hoarder", allCaps)
			served := hugePages(h, method, pageBytes, nil)
			good := newUpstream(t, "good", "read")
			e := newHostileEnv(t, pool.Options{}, []*hostile{h}, good)
			reg := viewtest.NewRegistry()
			hd := e.mustAcquire(pool.Spec{Name: "good", Command: "/bin/good", Pooled: true}, "s2", reg)

			spec := hostileSpec("hoarder", 2*time.Minute)
			spec.MaxListingBytes = cap
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := e.acquire(ctx, spec, "s1", viewtest.NewRegistry())
			require.Error(t, err)
			require.ErrorIs(t, err, pool.ErrListingTooLarge)
			require.ErrorIs(t, err, pool.ErrBadListing)
			require.ErrorIs(t, err, pool.ErrTerminal)
			require.Contains(t, err.Error(), "hoarder")
			require.Contains(t, err.Error(), "maxListingBytes")
			require.Contains(t, err.Error(), strconv.Itoa(cap))
			// Three pages fit; the fourth goes past the cap.
			require.LessOrEqual(t, served.Load(), int64(4), "the pool asked for %d pages of %d bytes with a cap of %d", served.Load(), pageBytes, cap)

			requireHealthy(t, hd, reg, good)
		})
	}
}

// With no cap in its spec, a listing gets DefaultMaxListingBytes: pages of
// 8 MiB (the size the review used was 15 MiB) are given up on at the
// fifth, so that what the listing holds stays near 32 MiB.
func TestHostileHugeListingDefaultCap(t *testing.T) {
	t.Parallel()
	const pageBytes = 8 << 20
	h := newHostile(t, "hoarder", allCaps)
	served := hugePages(h, "tools/list", pageBytes, nil)
	e := newHostileEnv(t, pool.Options{}, []*hostile{h})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := e.acquire(ctx, hostileSpec("hoarder", 2*time.Minute), "s1", viewtest.NewRegistry())
	require.ErrorIs(t, err, pool.ErrListingTooLarge)
	require.Contains(t, err.Error(), strconv.Itoa(pool.DefaultMaxListingBytes))
	require.LessOrEqual(t, served.Load(), int64(pool.DefaultMaxListingBytes/pageBytes+1))
}

// A listing that outgrows the cap at a rediscovery (after list_changed)
// fails the entry at once, with the reason, rather than being tried again
// and again; the views are withdrawn and another server keeps serving.
func TestHostileListingOutgrowsCapOnRefresh(t *testing.T) {
	const pageBytes = 1 << 20
	h := newHostile(t, "grower", allCaps)
	h.addTool("one")
	var huge atomic.Bool
	served := hugePages(h, "tools/list", pageBytes, &huge)
	good := newUpstream(t, "good", "read")
	e := newHostileEnv(t, pool.Options{}, []*hostile{h}, good)
	reg := viewtest.NewRegistry()
	hd := e.mustAcquire(pool.Spec{Name: "good", Command: "/bin/good", Pooled: true}, "s2", reg)

	spec := hostileSpec("grower", time.Minute)
	spec.MaxListingBytes = 2 * pageBytes
	gh := e.mustAcquire(spec, "s1", viewtest.NewRegistry())
	huge.Store(true)
	h.addTool("two") // the go-sdk server sends tools/list_changed
	require.Eventually(t, func() bool { return gh.Entry().State() == pool.StateFailed }, 30*time.Second, 10*time.Millisecond,
		"logs:\n%s", e.logs.String())
	info := gh.Entry().Info()
	require.ErrorIs(t, info.Err, pool.ErrListingTooLarge)
	require.Contains(t, info.Err.Error(), "grower")
	require.Contains(t, info.Err.Error(), strconv.Itoa(2*pageBytes))
	require.LessOrEqual(t, served.Load(), int64(3))
	requireHealthy(t, hd, reg, good)
}

// "maxListingBytes" in a server entry reaches the spec, changes its
// transport identity (a reload reconnects with the new cap), and is
// refused when out of range or in a session's override.
func TestMaxListingBytesFromConfig(t *testing.T) {
	parse := func(server string) (*config.Config, error) {
		cfg, _, err := config.Parse("c.json", []byte(`{"mcpServers": {"fs": `+server+`}, "sessions": {"a": {"token": "tok-0123456789"}}}`), nil, nil)
		return cfg, err
	}
	cfg, err := parse(`{"command": "srv", "maxListingBytes": 1048576}`)
	require.NoError(t, err)
	spec := reconcile.SpecOf(cfg.Servers["fs"])
	require.Equal(t, int64(1<<20), spec.ListingCap())
	plain, err := parse(`{"command": "srv"}`)
	require.NoError(t, err)
	require.Equal(t, int64(pool.DefaultMaxListingBytes), reconcile.SpecOf(plain.Servers["fs"]).ListingCap())
	require.NotEqual(t, spec.Fingerprint(), reconcile.SpecOf(plain.Servers["fs"]).Fingerprint())

	for _, bad := range []string{`0`, `-1`, `"1"`, `5000000000`} {
		_, err := parse(`{"command": "srv", "maxListingBytes": ` + bad + `}`)
		require.ErrorContains(t, err, "mcpServers.fs.maxListingBytes", bad)
	}
	_, _, err = config.Parse("c.json", []byte(`{"mcpServers": {"fs": {"command": "srv"}}, "sessions": {"a": {"token": "tok-0123456789", "overrides": {"fs": {"maxListingBytes": 5}}}}}`), nil, nil)
	require.ErrorContains(t, err, "maxListingBytes")
}

// A cursor is held too: the listing keeps every cursor it was given, to
// refuse one given twice. An upstream answering pages of one small item
// and a cursor of cursorBytes, new each time, must be stopped by the
// byte cap, not made to hold 1,000 such cursors (at 15 MiB a message,
// 15 GB) until the page limit.
func TestHostileHugeCursorsAreCapped(t *testing.T) {
	const cursorBytes = 128 << 10
	const cap = 4 * cursorBytes
	h := newHostile(t, "cursors", allCaps)
	var served atomic.Int64
	filler := strings.Repeat("c", cursorBytes)
	h.setHook(func(ctx context.Context, m string, _ mcp.Request) (mcp.Result, error, bool) {
		if m != "tools/list" {
			return nil, nil, false
		}
		n := int(served.Add(1))
		return page(m, n, 1, fmt.Sprintf("%s-%d", filler, n)), nil, true
	})
	e := newHostileEnv(t, pool.Options{}, []*hostile{h})
	spec := hostileSpec("cursors", 2*time.Minute)
	spec.MaxListingBytes = cap
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := e.acquire(ctx, spec, "s1", viewtest.NewRegistry())
	require.ErrorIs(t, err, pool.ErrListingTooLarge)
	require.LessOrEqual(t, served.Load(), int64(5), "the pool asked for %d pages with cursors of %d bytes and a cap of %d", served.Load(), cursorBytes, cap)
}
