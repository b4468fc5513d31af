//go:build !unix

package procgroup

import (
	"os/exec"
	"time"
)

// Detach does nothing on systems without process groups.
func Detach(*exec.Cmd) {}

// Kill does nothing on systems without process groups.
func Kill(*exec.Cmd, time.Duration) {}
