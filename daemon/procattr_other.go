//go:build !unix

package daemon

import "os/exec"

// detach does nothing on systems without process groups.
func detach(*exec.Cmd) {}
