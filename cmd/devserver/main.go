// Command devserver runs the local Temporal dev server (`temporal server start-dev`, Web
// UI included) with a durable SQLite file and this project's search attributes, until
// SIGINT or SIGTERM. `make run` and `make test` use it.
//
//	devserver                      # 127.0.0.1:7233, UI on :8233, DB in ~/.local/share/retry-scheduler
//	devserver -for-test -addr-file F  # free port, no UI, temp DB; writes host:port to F when ready
//
// If a healthy Temporal frontend already answers on -port, it says so and exits 0 (reuse);
// if something else holds the port, it exits 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"retry-scheduler/devserver"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func defaultDB() string {
	data := os.Getenv("XDG_DATA_HOME")
	if data == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "."
		}
		data = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(data, "retry-scheduler", "temporal.db")
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("devserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := fs.Int("port", 7233, "frontend gRPC port (0 = a free port)")
	uiPort := fs.Int("ui-port", 8233, "Web UI port (0 = port+1000, -1 = no UI)")
	db := fs.String("db", defaultDB(), "SQLite file (directory created)")
	namespace := fs.String("namespace", "default", "namespace to create")
	logFile := fs.String("log", "", "server log file (default: the DB file + .log)")
	binary := fs.String("binary", devserver.DefaultBinary(), "Temporal CLI binary (env TEMPORAL_CLI)")
	forTest := fs.Bool("for-test", false, "test mode: a free port, no UI, a temporary DB (unless -port, -ui-port or -db are given)")
	addrFile := fs.String("addr-file", "", "write the frontend's host:port to this file once it answers")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "devserver: unexpected arguments %q\n", fs.Args())
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *forTest {
		if !set["port"] {
			*port = 0
		}
		if !set["ui-port"] {
			*uiPort = -1
		}
		if !set["db"] {
			*db = ""
		}
	}

	if *port != 0 {
		if code, inUse := checkPort(*port, *namespace, *addrFile, stdout, stderr); inUse {
			return code
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	srv, err := devserver.Start(ctx, devserver.Options{
		Binary:    *binary,
		Port:      *port,
		UIPort:    *uiPort,
		DBFile:    *db,
		Namespace: *namespace,
		LogFile:   *logFile,
	})
	if err != nil {
		fmt.Fprintf(stderr, "devserver: %v\n", err)
		return 1
	}
	if *addrFile != "" {
		if err := writeAddr(*addrFile, srv.Address); err != nil {
			fmt.Fprintf(stderr, "devserver: %v\n", err)
			_ = srv.Stop()
			return 1
		}
	}

	fmt.Fprintf(stdout, "Temporal dev server ready (pid %d)\n", srv.Pid())
	fmt.Fprintf(stdout, "TEMPORAL_ADDRESS=%s\n", srv.Address)
	if srv.UIAddress != "" {
		fmt.Fprintf(stdout, "Web UI:    http://%s/namespaces/%s/workflows\n", srv.UIAddress, srv.Namespace)
	}
	fmt.Fprintf(stdout, "Namespace: %s\n", srv.Namespace)
	if *db != "" {
		fmt.Fprintf(stdout, "DB file:   %s\n", srv.DBFile)
	} else {
		fmt.Fprintf(stdout, "DB file:   %s (temporary, removed at stop)\n", srv.DBFile)
	}
	fmt.Fprintf(stdout, "Log:       %s\n", srv.LogFile)
	fmt.Fprintf(stdout, "Stop with Ctrl-C or SIGTERM.\n")

	code := 0
	select {
	case <-ctx.Done():
		fmt.Fprintln(stdout, "devserver: stopping")
	case <-srv.Done():
		fmt.Fprintf(stderr, "devserver: the Temporal server exited by itself (%v); see %s\n", srv.Err(), srv.LogFile)
		code = 1
	}
	if err := srv.Stop(); err != nil {
		fmt.Fprintf(stderr, "devserver: %v\n", err)
		code = 1
	}
	if *addrFile != "" {
		_ = os.Remove(*addrFile)
	}
	return code
}

// checkPort looks for something already listening on the port. inUse is false when
// the port is free; otherwise code is the exit code: 0 when it is a healthy Temporal
// frontend (reused), 1 when it is something else.
func checkPort(port int, namespace, addrFile string, stdout, stderr io.Writer) (code int, inUse bool) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, false
	}
	conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := devserver.CheckHealth(ctx, addr, namespace); err != nil {
		fmt.Fprintf(stderr, "devserver: port %d is in use by something that is not a healthy Temporal frontend with namespace %q (%v); stop it or choose another -port\n", port, namespace, err)
		return 1, true
	}
	fmt.Fprintf(stdout, "devserver: a Temporal frontend already answers at %s; reusing it (nothing started)\n", addr)
	fmt.Fprintf(stdout, "TEMPORAL_ADDRESS=%s\n", addr)
	if addrFile != "" {
		if err := writeAddr(addrFile, addr); err != nil {
			fmt.Fprintf(stderr, "devserver: %v\n", err)
			return 1, true
		}
	}
	return 0, true
}

// writeAddr writes the address atomically, so a script polling for the file never
// reads half of it.
func writeAddr(path, addr string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(addr+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
