//go:build !unix

package daemon

import (
	"os/exec"
	"time"
)

// detach does nothing on systems without process groups.
func detach(*exec.Cmd) {}

// killGroup does nothing on systems without process groups.
func killGroup(*exec.Cmd, time.Duration) {}
