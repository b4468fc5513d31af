//go:build unix

package daemon

import (
	"os/exec"
	"syscall"
)

// detach starts cmd in a process group of its own, so a Ctrl-C meant for
// the daemon does not also kill its upstreams behind its back: the daemon
// closes them itself when it shuts down.
func detach(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}
