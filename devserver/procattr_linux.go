//go:build linux

package devserver

import "syscall"

// sysProcAttr puts the server in its own process group (a terminal's Ctrl-C reaches
// only the parent, which stops it gracefully) and kills it if the parent dies, so a
// crashed test or `make run` leaves no server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
