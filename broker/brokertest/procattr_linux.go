//go:build linux

package brokertest

import "syscall"

// sysProcAttr puts the node in its own process group and kills it if the test process dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
