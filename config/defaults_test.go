package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/config"
)

// TestDefaultsAreTheABIs: config writes the ABI's default limits out
// rather than importing abi; they must stay the same.
func TestDefaultsAreTheABIs(t *testing.T) {
	assert.Equal(t, int64(abi.DefaultMemoryLimitBytes>>20), int64(config.DefaultPolicyMemoryMiB))
	assert.Equal(t, time.Duration(abi.DefaultCallTimeoutMillis)*time.Millisecond, config.DefaultPolicyTimeout)
}
