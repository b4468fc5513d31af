package clip_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/wasmhost/wasmhost/internal/clip"
)

func TestString(t *testing.T) {
	assert.Equal(t, "abc", clip.String("abc", 3))
	assert.Equal(t, "ab…", clip.String("abc", 2))
	// "é" is two bytes: a cut inside it goes back to its start.
	assert.Equal(t, "a…", clip.String("aé", 2))
	long := strings.Repeat("x", 1<<20)
	assert.Len(t, clip.String(long, 128), 128+len("…"))
}
