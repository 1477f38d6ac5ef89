//go:build !linux

package proc

import "syscall"

// sysProcAttr puts the child in its own process group (no parent-death signal outside
// Linux).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
