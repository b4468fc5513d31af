package mcpname

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBadRune(t *testing.T) {
	for _, tc := range []struct {
		name string
		bad  rune
		ok   bool
	}{
		{"read_file", 0, false},
		{"a-b.C9", 0, false},
		{"", 0, false},
		{"read file", ' ', true},
		{"fs/read", '/', true},
		{"héllo", 'é', true},
		{"a__b:c", ':', true},
	} {
		r, bad := BadRune(tc.name)
		assert.Equal(t, tc.ok, bad, "%q", tc.name)
		assert.Equal(t, tc.bad, r, "%q", tc.name)
	}
}
