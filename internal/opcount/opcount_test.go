package opcount

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSnapshotAndSub(t *testing.T) {
	var c Counters
	c.Connects.Add(2)
	c.PolicyCalls.Add(5)
	before := c.Snapshot()
	require.Equal(t, Values{Connects: 2, PolicyCalls: 5}, before)

	c.Connects.Add(1)
	c.Disconnects.Add(1)
	c.Acquires.Add(3)
	c.Releases.Add(4)
	c.Refreshes.Add(5)
	c.Replays.Add(6)
	c.RegistryOps.Add(7)
	c.PolicyCalls.Add(8)
	c.Notifications.Add(9)
	c.Discoveries.Add(10)
	delta := c.Snapshot().Sub(before)
	assert.Equal(t, Values{
		Connects: 1, Disconnects: 1, Acquires: 3, Releases: 4, Refreshes: 5,
		Replays: 6, RegistryOps: 7, PolicyCalls: 8, Notifications: 9, Discoveries: 10,
	}, delta)
	assert.Equal(t, Values{}, c.Snapshot().Sub(c.Snapshot()))
}

func TestConcurrentAdds(t *testing.T) {
	var c Counters
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				c.RegistryOps.Add(1)
				_ = c.Snapshot()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(8000), c.Snapshot().RegistryOps)
}
