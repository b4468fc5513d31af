//go:build !unix

package procgroup

import (
	"os/exec"
	"time"
)

// Main does nothing on systems without process groups.
func Main() {}

// detach does nothing on systems without process groups.
func detach(*exec.Cmd, time.Duration) bool { return false }

// Detach does nothing on systems without process groups.
func Detach(*exec.Cmd) {}

// Kill does nothing on systems without process groups.
func Kill(*exec.Cmd, time.Duration) {}

// ServerPID returns pid: there are no supervisors here.
func ServerPID(pid int) int { return pid }
