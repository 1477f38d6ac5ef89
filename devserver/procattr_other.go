//go:build !linux

package devserver

import "syscall"

// sysProcAttr puts the server in its own process group, so a terminal's Ctrl-C reaches
// only the parent, which stops it gracefully.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
