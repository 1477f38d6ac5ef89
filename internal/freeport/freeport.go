// Package freeport picks loopback ports for servers that tests and tools start.
//
// A port is picked by listening on port 0 and closing the listener; the port is then free,
// but Linux may hand it out again to the next bind to port 0, the same process's or
// another's. The Temporal CLI's dev server picks its own ports (HTTP API, metrics, the
// non-frontend services) that way after we have picked its frontend port, and a CI run
// failed with its HTTP API bound to the port just picked for the frontend. Get keeps what it
// picks out of that draw for a minute: it leaves a connection to the port in TIME_WAIT on
// the listening side, which a bind to port 0 avoids and a bind with SO_REUSEADDR (Go's
// default for listeners, and RabbitMQ's) does not.
package freeport

import (
	"fmt"
	"net"
	"strconv"
	"time"
)

// Get returns a TCP port on 127.0.0.1 that is free and that no bind to port 0 on this
// machine is handed for about a minute (the TIME_WAIT interval).
func Get() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if err := holdInTimeWait(l); err != nil {
		return 0, fmt.Errorf("free port %d: %w", port, err)
	}
	return port, nil
}

// holdInTimeWait connects to l and closes the accepted side first: the side that closes first
// keeps the port in TIME_WAIT.
func holdInTimeWait(l net.Listener) error {
	c, err := net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	accepted, err := l.Accept()
	if err != nil {
		return err
	}
	return accepted.Close()
}

// From returns a free port at or above a randomised start in [from, from+4000), for ports
// that must stay in a range (Erlang distribution ports, which need room above them for
// rabbitmqctl's); from 0 is Get.
func From(from int) (int, error) {
	if from == 0 {
		return Get()
	}
	start := from + int(time.Now().UnixNano()%4000)
	for p := start; p < start+2000; p++ {
		if l, err := net.Listen("tcp", ":"+strconv.Itoa(p)); err == nil {
			_ = l.Close()
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free port from %d", start)
}
