// Command devserver runs a local Temporal server with this project's namespace and search
// attributes until SIGINT or SIGTERM: by default the dev server (`temporal server
// start-dev`, Web UI included) with a durable SQLite file; with -engine postgres the
// Temporal server on PostgreSQL. `make run` and `make test` use it.
//
//	devserver                      # 127.0.0.1:7233, UI on :8233, DB in ~/.local/share/retry-scheduler
//	devserver -for-test -addr-file F  # free port, no UI, temp DB; writes host:port to F when ready
//	devserver -engine postgres     # 127.0.0.1:7233, databases retry_scheduler_temporal{,_visibility}
//	devserver -engine postgres -for-test -addr-file F  # free port, temporary databases
//
// The postgres engine's PostgreSQL comes from -pg-host, -pg-port and -pg-user (defaults:
// $TEMPORAL_POSTGRES_HOST, _PORT, _USER, else 127.0.0.1:5432 as postgres); its password
// only from $TEMPORAL_POSTGRES_PASSWORD.
//
// If a healthy Temporal frontend already answers on -port, it says so and exits 0 (reuse);
// if something else holds the port (with -engine postgres: also a frontend on another
// store), it exits 1.
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

	"github.com/retry-scheduler/retry-scheduler/internal/devserver"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func defaultDB() string {
	return filepath.Join(dataDir(), "temporal.db")
}

// defaultPostgresLog is the postgres engine's server log for durable databases.
func defaultPostgresLog() string {
	return filepath.Join(dataDir(), "temporal-postgres.log")
}

func dataDir() string {
	data := os.Getenv("XDG_DATA_HOME")
	if data == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "."
		}
		data = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(data, "retry-scheduler")
}

// DefaultPostgresDatabase is the postgres engine's main database outside tests (the
// visibility one adds "_visibility").
const DefaultPostgresDatabase = "retry_scheduler_temporal"

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("devserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := fs.Int("port", 7233, "frontend gRPC port (0 = a free port)")
	uiPort := fs.Int("ui-port", 8233, "Web UI port (0 = port+1000, -1 = no UI)")
	db := fs.String("db", defaultDB(), "SQLite file (directory created)")
	namespace := fs.String("namespace", "default", "namespace to create")
	logFile := fs.String("log", "", "server log file (default: the DB file + .log)")
	binary := fs.String("binary", devserver.DefaultBinary(), "Temporal CLI binary (env TEMPORAL_CLI)")
	forTest := fs.Bool("for-test", false, "test mode: a free port, no UI, a temporary DB or databases (unless -port, -ui-port, -db or -pg-db are given)")
	addrFile := fs.String("addr-file", "", "write the frontend's host:port to this file once it answers")
	engineName := fs.String("engine", string(devserver.EngineDev), "dev (the CLI's dev server, SQLite, Web UI) or postgres (the Temporal server "+devserver.ServerVersion+" on PostgreSQL, no UI)")
	pgEnv, pgEnvErr := devserver.PostgresFromEnv(os.Getenv)
	pgHost := fs.String("pg-host", pgEnv.Host, "postgres engine: PostgreSQL host (env "+devserver.EnvPostgresHost+"; the password only from "+devserver.EnvPostgresPassword+")")
	pgPort := fs.Int("pg-port", pgEnv.Port, "postgres engine: PostgreSQL port (env "+devserver.EnvPostgresPort+")")
	pgUser := fs.String("pg-user", pgEnv.User, "postgres engine: PostgreSQL user, allowed to create databases (env "+devserver.EnvPostgresUser+")")
	pgDB := fs.String("pg-db", DefaultPostgresDatabase, "postgres engine: main database, created or upgraded in place (-for-test: a temporary one)")
	pgVisDB := fs.String("pg-visibility-db", "", "postgres engine: visibility database (default: -pg-db + _visibility)")
	retention := fs.Duration("retention", devserver.DefaultRetention, "postgres engine: retention of the namespace when it is created")
	serverDir := fs.String("server-dir", devserver.DefaultServerDir(), "postgres engine: directory with bin/server and bin/sql (env "+devserver.EnvServerDir+"; make temporal-server)")
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
	engine, err := devserver.ParseEngine(*engineName)
	if err != nil {
		fmt.Fprintf(stderr, "devserver: -engine: %v\n", err)
		return 2
	}
	postgres := engine == devserver.EnginePostgres
	if postgres && pgEnvErr != nil {
		fmt.Fprintf(stderr, "devserver: %v\n", pgEnvErr)
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
		if !set["pg-db"] {
			*pgDB = ""
		}
	}
	if postgres && *logFile == "" && *pgDB != "" {
		*logFile = defaultPostgresLog()
	}

	if *port != 0 {
		if code, inUse := checkPort(*port, *namespace, engine, *addrFile, stdout, stderr); inUse {
			return code
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	opts := devserver.Options{
		Binary:    *binary,
		Port:      *port,
		UIPort:    *uiPort,
		DBFile:    *db,
		Namespace: *namespace,
		LogFile:   *logFile,
	}
	if postgres {
		opts = devserver.Options{
			Engine:    engine,
			Port:      *port,
			Namespace: *namespace,
			Retention: *retention,
			LogFile:   *logFile,
			Postgres: devserver.PostgresOptions{
				Host: *pgHost, Port: *pgPort, User: *pgUser, Password: pgEnv.Password,
				Database: *pgDB, VisibilityDatabase: *pgVisDB, Dir: *serverDir,
			},
		}
	}
	srv, err := devserver.Start(ctx, opts)
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

	if postgres {
		printPostgres(stdout, srv, opts.Postgres, *pgDB == "")
	} else {
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

// printPostgres says where the postgres engine's server is.
func printPostgres(w io.Writer, srv *devserver.Server, pg devserver.PostgresOptions, temporary bool) {
	fmt.Fprintf(w, "Temporal server %s on PostgreSQL ready (pid %d)\n", devserver.ServerVersion, srv.Pid())
	fmt.Fprintf(w, "TEMPORAL_ADDRESS=%s\n", srv.Address)
	fmt.Fprintf(w, "Web UI:    none (only the dev server has one: -engine dev)\n")
	fmt.Fprintf(w, "Namespace: %s\n", srv.Namespace)
	note := "upgraded in place at each start, kept at stop"
	if temporary {
		note = "temporary, dropped at stop"
	}
	fmt.Fprintf(w, "Databases: %s and %s on %s@%s (%s)\n", srv.Database, srv.VisibilityDatabase, pg.User, net.JoinHostPort(pg.Host, strconv.Itoa(pg.Port)), note)
}

// checkPort looks for something already listening on the port. inUse is false when
// the port is free; otherwise code is the exit code: 0 when it is a healthy Temporal
// frontend (reused), 1 when it is something else, or for the postgres engine a
// frontend on another store.
func checkPort(port int, namespace string, engine devserver.Engine, addrFile string, stdout, stderr io.Writer) (code int, inUse bool) {
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
	if engine == devserver.EnginePostgres {
		store, err := devserver.PersistenceStore(ctx, addr)
		if err != nil || store != devserver.PostgresPlugin {
			fmt.Fprintf(stderr, "devserver: the Temporal frontend at %s is not on PostgreSQL (store %q, %v); stop it or choose another -port\n", addr, store, err)
			return 1, true
		}
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
