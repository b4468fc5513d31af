package host

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDirectAnswersAreCopiedOut: a direct call's answer is decoded where it
// lies in the plugin's memory, which the instance's next call writes over.
// What Canonicalize returned, and what its memo answers later, must be
// copies: with one instance, a larger answer written over the first changes
// neither.
func TestDirectAnswersAreCopiedOut(t *testing.T) {
	p := loadDefault(t, Options{MaxInstances: 1})
	const a = `{"includeTools":["alpha","beta"],"trust":true}`
	settings := []string{a}
	for i := range 200 {
		settings = append(settings, fmt.Sprintf(`{"excludeTools":["tool-%03d"],"alwaysLoadTools":true}`, i))
	}
	first, err := canon(p, settings...)
	require.NoError(t, err)
	wantKey := strings.Clone(first.Results[0].Key)
	wantCanonical := strings.Clone(string(first.Results[0].Canonical))

	// A smaller answer, written where the first one began.
	_, err = canon(p, `{"excludeTools":["zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"]}`)
	require.NoError(t, err)

	assert.Equal(t, wantKey, first.Results[0].Key, "a returned key changed with the plugin's next answer")
	assert.Equal(t, wantCanonical, string(first.Results[0].Canonical), "a returned canonical form changed with the plugin's next answer")
	calls := p.stats.calls.Load()
	again, err := canon(p, a)
	require.NoError(t, err)
	assert.Equal(t, calls, p.stats.calls.Load(), "answered from the memo")
	assert.Equal(t, wantKey, again.Results[0].Key, "the memo's key changed with the plugin's next answer")
	assert.Equal(t, wantCanonical, string(again.Results[0].Canonical), "the memo's canonical form changed with the plugin's next answer")
}
