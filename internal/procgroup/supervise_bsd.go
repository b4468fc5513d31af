//go:build unix && !linux

package procgroup

import "syscall"

// becomeSubreaper does nothing: only Linux has subreapers.
func becomeSubreaper() {}

// childAttr starts the program in a group of its own.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
