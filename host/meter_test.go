package host

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBulkFillStopped checks that a metered plugin looping over huge bulk
// memory instructions (testplugins/wat/bulk-fill.wat, a loop of 64 MiB
// memory.fill instructions, which the rewriter once charged like any other
// instruction, nothing) is stopped at its call timeout (abi/SPEC.md 6.1) and
// when Close's context ends, as one looping over plain instructions is.
func TestBulkFillStopped(t *testing.T) {
	ctx := context.Background()
	insp, err := inspect(ctx, "bulk-fill", watWasm(t, "bulk-fill"), Options{}, nil)
	require.NoError(t, err)
	require.True(t, insp.Accepted, insp.Reason)
	require.True(t, insp.Metered, "the plugin must run metered, not under wazero's termination checks")

	t.Run("timeout", func(t *testing.T) {
		p, err := Load(ctx, "bulk-fill", watWasm(t, "bulk-fill"), Options{CallTimeout: shortTimeout, MaxInstances: 1})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, p.Close(ctx)) })
		for _, export := range []string{"canonicalize", "project"} {
			start := time.Now()
			if export == "canonicalize" {
				_, err = canon(p, `{}`)
			} else {
				_, err = p.Project(ctx, projectReq(`{}`))
			}
			elapsed := time.Since(start)
			require.ErrorIs(t, err, ErrPluginTimeout, export)
			assert.EqualError(t, err, `plugin "bulk-fill": `+export+`: plugin call timed out (limit 200ms)`)
			assert.GreaterOrEqual(t, elapsed, shortTimeout)
			assert.Less(t, elapsed, shortTimeout+timeoutMargin, "%s: the call returned long after its limit", export)
			t.Logf("%s: %v after %v", export, ErrPluginTimeout, elapsed.Round(time.Millisecond))
		}
	})
	t.Run("close", func(t *testing.T) {
		p, err := Load(ctx, "bulk-fill", watWasm(t, "bulk-fill"), Options{CallTimeout: time.Minute})
		require.NoError(t, err)
		closeTerminates(t, p)
	})
}
