//go:build !linux

package brokertest

import "syscall"

// sysProcAttr puts the node in its own process group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
