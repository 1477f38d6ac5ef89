// Package devserver starts and stops a local Temporal server for `make run`, integration
// tests, benchmarks and the soak, on one of two engines:
//
//   - EngineDev (the default): `temporal server start-dev`, the Temporal CLI's development
//     server, with the Web UI and a SQLite file store;
//   - EnginePostgres: the Temporal server built from go.temporal.io/server (ServerVersion)
//     with PostgreSQL persistence and SQL visibility (postgres.go, pgschema.go).
//
// The server registers this project's search attributes at start, so the Web UI and
// `temporal workflow list --query` work at once.
package devserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/freeport"
	"github.com/retry-scheduler/retry-scheduler/internal/proc"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
)

// Timeouts of the process lifecycle.
const (
	// ReadyTimeout is how long Start waits for the frontend to answer.
	ReadyTimeout = 60 * time.Second
	// StopGrace is how long Stop waits after SIGTERM before it sends SIGKILL.
	StopGrace = 10 * time.Second
)

// ErrNotOwned is returned by Kill and Restart of a Server this process did not start
// (one named by TEMPORAL_ADDRESS).
var ErrNotOwned = errors.New("devserver: the server was not started by this process")

// Engine names the Temporal server Start runs.
type Engine string

const (
	// EngineDev is the Temporal CLI's dev server (`temporal server start-dev`): a SQLite
	// file store and the Web UI.
	EngineDev Engine = "dev"
	// EnginePostgres is the Temporal server ServerVersion (go.temporal.io/server's
	// cmd/server) with PostgreSQL persistence and SQL visibility; no Web UI.
	EnginePostgres Engine = "postgres"
)

// ServerName is how messages name the engine's server: "Temporal dev server", or
// "Temporal server v1.29.1 on PostgreSQL".
func (e Engine) ServerName() string {
	if e == EnginePostgres {
		return "Temporal server " + ServerVersion + " on PostgreSQL"
	}
	return "Temporal dev server"
}

// ParseEngine reads an engine name: "" and "dev" are EngineDev, "postgres" is
// EnginePostgres.
func ParseEngine(name string) (Engine, error) {
	switch Engine(name) {
	case "", EngineDev:
		return EngineDev, nil
	case EnginePostgres:
		return EnginePostgres, nil
	}
	return "", fmt.Errorf("devserver: unknown engine %q (want %s or %s)", name, EngineDev, EnginePostgres)
}

// Options says how to start the dev server. The zero value is usable.
type Options struct {
	// Engine is the server to run. Defaults to EngineDev.
	Engine Engine
	// Binary is the Temporal CLI. Defaults to $TEMPORAL_CLI, else
	// $XDG_CACHE_HOME (or ~/.cache) + /retry-scheduler/bin/temporal (see DefaultBinary).
	// EnginePostgres ignores it (see PostgresOptions.Dir).
	Binary string
	// Port is the frontend gRPC port. 0 picks a free port.
	Port int
	// UIPort is the Web UI port. 0 means Port+1000 (a free port if that is above 65535);
	// -1 means no UI (--headless). EnginePostgres has no UI and ignores it.
	UIPort int
	// DBFile is the SQLite file. "" means a file in a new temporary directory, which
	// Stop removes. EnginePostgres ignores it (see PostgresOptions.Database).
	DBFile string
	// Namespace is created at start. Defaults to "default".
	Namespace string
	// Retention is the workflow retention of the namespace when EnginePostgres registers
	// it (an existing namespace keeps its own). Defaults to DefaultRetention.
	Retention time.Duration
	// LogFile receives the server's output (appended). Defaults to DBFile+".log"; for
	// EnginePostgres, to a file in the server's temporary directory, which Stop removes.
	LogFile string
	// ExtraArgs are appended to the start-dev command line (e.g. --dynamic-config-value).
	// EnginePostgres accepts only "--dynamic-config-value", "key=value" pairs.
	ExtraArgs []string
	// Postgres says where EnginePostgres keeps its data. The zero value is a temporary
	// pair of databases on the local PostgreSQL.
	Postgres PostgresOptions
}

// Server is a running (or stopped) dev server.
type Server struct {
	// Engine is the server's engine. For a server this process did not start, it is what
	// $TEMPORAL_ENGINE says (StartForTest), or "".
	Engine Engine
	// Address is the frontend's host:port.
	Address string
	// UIAddress is the Web UI's host:port; "" when headless.
	UIAddress string
	// Namespace is the namespace created at start.
	Namespace string
	// DBFile is the SQLite file ("" for a server this process did not start).
	DBFile string
	// LogFile is the file the server's output goes to.
	LogFile string
	// Database and VisibilityDatabase are EnginePostgres's databases.
	Database, VisibilityDatabase string

	opts    Options // resolved
	tempDir string  // removed by Stop when DBFile was not given (always, for EnginePostgres)
	pg      *pgState
	// fourReadPartitions: DBFile existed without onePartitionMark (see resolve).
	fourReadPartitions bool
	// markOnePartition: start writes onePartitionMark (one partition, not overridden).
	markOnePartition bool

	mu  sync.Mutex
	run *proc.Process // the current run of the server binary; nil when not owned
}

// DefaultBinary is where the Temporal CLI is looked for: $TEMPORAL_CLI, else
// $XDG_CACHE_HOME/retry-scheduler/bin/temporal, else ~/.cache/retry-scheduler/bin/temporal
// (where `make tools` installs it).
func DefaultBinary() string {
	if p := os.Getenv("TEMPORAL_CLI"); p != "" {
		return p
	}
	return filepath.Join(cacheDir(), "bin", "temporal")
}

// cacheDir is the Makefile's $(CACHE): $XDG_CACHE_HOME/retry-scheduler, else
// ~/.cache/retry-scheduler.
func cacheDir() string {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "."
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "retry-scheduler")
}

// Start starts the server of o.Engine and returns once its frontend answers a health
// check and knows the namespace (at most ReadyTimeout, or until ctx ends). For
// EnginePostgres it first creates or upgrades the databases (at most SchemaTimeout), then
// waits at most PostgresReadyTimeout, registering the namespace and the search attributes
// when they are missing. The process keeps running after ctx ends; stop it with Stop.
func Start(ctx context.Context, o Options) (*Server, error) {
	s := &Server{}
	err := s.resolve(o)
	if err == nil {
		err = s.prepare(ctx)
	}
	if err == nil {
		err = s.start(ctx)
	}
	if err != nil {
		if cerr := s.cleanUp(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	return s, nil
}

// prepare does what comes before the first start: EnginePostgres's databases.
func (s *Server) prepare(ctx context.Context) error {
	if s.Engine == EnginePostgres {
		return s.preparePostgres(ctx)
	}
	return nil
}

// cleanUp removes what Start made for this server alone: the temporary directory and
// EnginePostgres's temporary databases.
func (s *Server) cleanUp() error {
	var err error
	if s.Engine == EnginePostgres {
		err = s.dropTemporaryDatabases()
	}
	if s.tempDir != "" {
		if rmErr := os.RemoveAll(s.tempDir); rmErr != nil && err == nil {
			err = rmErr
		}
		s.tempDir = ""
	}
	return err
}

func (s *Server) resolve(o Options) error {
	engine, err := ParseEngine(string(o.Engine))
	if err != nil {
		return err
	}
	s.Engine = engine
	if engine == EnginePostgres {
		return s.resolvePostgres(o)
	}
	o.Engine = engine
	if o.Binary == "" {
		o.Binary = DefaultBinary()
	}
	if st, err := os.Stat(o.Binary); err != nil || st.IsDir() {
		return fmt.Errorf("devserver: Temporal CLI not found at %s (run `make tools`, or set TEMPORAL_CLI)", o.Binary)
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.Port, err = resolvePort(o.Port); err != nil {
		return err
	}
	switch {
	case o.UIPort == 0 && o.Port+1000 <= 65535:
		o.UIPort = o.Port + 1000
	case o.UIPort == 0:
		p, err := freeport.Get()
		if err != nil {
			return err
		}
		o.UIPort = p
	case o.UIPort < -1 || o.UIPort > 65535:
		return fmt.Errorf("devserver: UI port %d out of range", o.UIPort)
	}
	if o.DBFile == "" {
		sweepTempDirs(nil)
		dir, err := os.MkdirTemp("", tempDirPrefix)
		if err != nil {
			return fmt.Errorf("devserver: temp dir: %w", err)
		}
		s.tempDir = dir
		o.DBFile = filepath.Join(dir, "temporal.db")
	} else if err := os.MkdirAll(filepath.Dir(o.DBFile), 0o755); err != nil {
		return fmt.Errorf("devserver: %w", err)
	}
	if o.LogFile == "" {
		o.LogFile = o.DBFile + ".log"
	}
	// A database not started here with one task-queue partition may hold workflow tasks in
	// the backlogs of partitions 1-3 (start-dev's default is four), which one read partition
	// would never read: such a database goes on reading four while every new task is
	// written to the first (Temporal's way down: writes first, reads once drained).
	if _, err := os.Stat(o.DBFile); err == nil {
		if _, err := os.Stat(o.DBFile + onePartitionMark); err != nil {
			s.fourReadPartitions = true
		}
	}
	s.markOnePartition = !s.fourReadPartitions && !strings.Contains(strings.Join(o.ExtraArgs, " "), "Partitions")
	s.opts = o
	s.Address = net.JoinHostPort("127.0.0.1", strconv.Itoa(o.Port))
	if o.UIPort > 0 {
		s.UIAddress = net.JoinHostPort("127.0.0.1", strconv.Itoa(o.UIPort))
	}
	s.Namespace = o.Namespace
	s.DBFile = o.DBFile
	s.LogFile = o.LogFile
	return nil
}

// resolvePort checks a frontend port; 0 picks a free one.
func resolvePort(port int) (int, error) {
	if port < 0 || port > 65535 {
		return 0, fmt.Errorf("devserver: port %d out of range", port)
	}
	if port == 0 {
		return freeport.Get()
	}
	return port, nil
}

// Args is the server's command line (without the binary) for these options: start-dev's,
// or for EnginePostgres the Temporal server's.
func (s *Server) Args() []string {
	if s.Engine == EnginePostgres {
		return s.pg.args()
	}
	o := s.opts
	args := []string{"server", "start-dev",
		"--ip", "127.0.0.1",
		"--port", strconv.Itoa(o.Port),
	}
	if o.UIPort > 0 {
		args = append(args, "--ui-port", strconv.Itoa(o.UIPort))
	} else {
		args = append(args, "--headless")
	}
	args = append(args,
		"--db-filename", o.DBFile,
		"--namespace", o.Namespace,
		"--sqlite-pragma", "journal_mode=wal",
		"--sqlite-pragma", "synchronous=normal",
		"--log-level", "warn",
	)
	for _, sa := range SearchAttributeFlags() {
		args = append(args, "--search-attribute", sa)
	}
	for _, kv := range DynamicConfig {
		args = append(args, "--dynamic-config-value", kv)
	}
	if s.fourReadPartitions {
		args = append(args, "--dynamic-config-value", "matching.numTaskqueueReadPartitions=4")
	}
	// Later values win in start-dev, so ExtraArgs can override DynamicConfig.
	return append(args, o.ExtraArgs...)
}

// DynamicConfig is what the dev server is started with beyond its own defaults. Every write
// of the dev server goes through one SQLite connection, so what saves a database call per
// retry is what raises its throughput (measured with `make bench`, cmd/bench/README.md Levers):
//   - one task-queue partition: with the default four, a workflow task lands on a partition
//     no poller waits on, is written to the backlog and read back, or waits seconds to be
//     forwarded; one partition matches it to a waiting poller;
//   - no search-attribute cache read-through: start-dev reads the namespace and the cluster
//     metadata from the database on every start, upsert and visibility write, so that
//     attributes added while it runs are seen at once; ours are all created with the
//     namespace (--search-attribute) before the first call.
//
// A database created with four partitions keeps reading four (see resolve).
var DynamicConfig = []string{
	"matching.numTaskqueueReadPartitions=1",
	"matching.numTaskqueueWritePartitions=1",
	"system.forceSearchAttributesCacheRefreshOnRead=false",
}

func (s *Server) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run != nil && !s.run.Exited() {
		return errors.New("devserver: already running")
	}
	c := proc.Command{
		Name:    s.Engine.ServerName() + " at " + s.Address,
		Path:    s.opts.Binary,
		Args:    s.Args(),
		LogPath: s.LogFile,
		Banner:  fmt.Sprintf("\n==== %s devserver: %s %q\n", time.Now().Format(time.RFC3339), s.opts.Binary, s.Args()),
	}
	if s.Engine == EnginePostgres {
		c.Env = s.pg.env()
	}
	p, err := proc.Start(c)
	if err != nil {
		return fmt.Errorf("devserver: %w", err)
	}
	s.run = p
	if s.tempDir != "" {
		_ = os.WriteFile(filepath.Join(s.tempDir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644)
	}

	if err := s.waitReady(ctx, p); err != nil {
		_ = p.Kill()
		return fmt.Errorf("%w\n%s", err, proc.Tail(s.LogFile, 20))
	}
	if s.markOnePartition {
		// Failing to mark only costs the next start the slower four read partitions.
		_ = os.WriteFile(s.DBFile+onePartitionMark, []byte("created with one task-queue partition (devserver.DynamicConfig)\n"), 0o644)
	}
	return nil
}

// onePartitionMark, appended to the database's path, names the file that says the database
// was started with one task-queue partition.
const onePartitionMark = ".one-partition"

// waitReady polls the frontend until it answers CheckHealth and knows the namespace
// (EnginePostgres: until pgReady, which registers what is missing, succeeds).
func (s *Server) waitReady(ctx context.Context, p *proc.Process) error {
	probe, timeout := s.check, ReadyTimeout
	if s.Engine == EnginePostgres {
		probe, timeout = s.pgReady, PostgresReadyTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := p.AwaitReady(ctx, 200*time.Millisecond, probe); err != nil {
		return fmt.Errorf("devserver: %w", err)
	}
	return nil
}

func (s *Server) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return CheckHealth(ctx, s.Address, s.Namespace)
}

// CheckHealth reports whether a Temporal frontend at address answers a health check
// and knows namespace.
func CheckHealth(ctx context.Context, address, namespace string) error {
	c, err := client.DialContext(ctx, client.Options{
		HostPort:  address,
		Namespace: namespace,
		Logger:    quietLogger(),
	})
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		return err
	}
	_, err = c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	return err
}

// PersistenceStore is the persistence store of the Temporal frontend at address:
// "sqlite" for the dev server, PostgresPlugin for EnginePostgres.
func PersistenceStore(ctx context.Context, address string) (string, error) {
	c, err := client.DialContext(ctx, client.Options{HostPort: address, Logger: quietLogger()})
	if err != nil {
		return "", err
	}
	defer c.Close()
	info, err := c.WorkflowService().GetClusterInfo(ctx, &workflowservice.GetClusterInfoRequest{})
	if err != nil {
		return "", fmt.Errorf("devserver: cluster info of %s: %w", address, err)
	}
	return info.GetPersistenceStore(), nil
}

// Dial returns a client of the server's namespace.
func (s *Server) Dial(ctx context.Context) (client.Client, error) {
	return client.DialContext(ctx, client.Options{
		HostPort:  s.Address,
		Namespace: s.Namespace,
		Logger:    quietLogger(),
	})
}

func quietLogger() sdklog.Logger {
	return sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))
}

// Owned reports whether this process started the server (and so can stop it).
func (s *Server) Owned() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.run != nil
}

// Done is closed when the server process exits (nil for a server not owned).
func (s *Server) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		return nil
	}
	return s.run.Done()
}

// Err is the server process's exit status once Done is closed.
func (s *Server) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		return nil
	}
	return s.run.Err()
}

// Pid is the server process's id (0 when not owned).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		return 0
	}
	return s.run.Pid()
}

// Stop stops the server: SIGTERM, then SIGKILL after StopGrace. It removes the
// temporary directory when the DB file was not given, and EnginePostgres's temporary
// databases. Stopping twice is harmless; a server not owned is left alone.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		return nil
	}
	err := s.terminate(s.run)
	if cerr := s.cleanUp(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

func (s *Server) terminate(p *proc.Process) error {
	if err := p.Stop(StopGrace); err != nil {
		return fmt.Errorf("devserver: %w", err)
	}
	return nil
}

// Kill kills the server with SIGKILL (a crash), keeping its DB file (or databases) for
// Restart.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		return ErrNotOwned
	}
	if err := s.run.Kill(); err != nil {
		return fmt.Errorf("devserver: %w", err)
	}
	return nil
}

// Restart starts the server again on the same ports and DB file or databases (stopping it
// first if it still runs) and waits until it answers.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	p := s.run
	s.mu.Unlock()
	if p == nil {
		return ErrNotOwned
	}
	if err := s.terminate(p); err != nil {
		return err
	}
	return s.start(ctx)
}

const (
	tempDirPrefix = "retry-scheduler-temporal-"
	ownerFile     = "owner.pid"
)

// sweepTempDirs removes temporary DB directories left behind by processes that died
// without Stop (a test binary killed at its timeout, say): those whose owner process is
// gone and that are older than a minute. A directory that names temporary PostgreSQL
// databases (pgTempFile) goes only when release, given, drops them.
func sweepTempDirs(release func(dir string) bool) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempDirPrefix+"*"))
	for _, dir := range dirs {
		st, err := os.Stat(dir)
		if err != nil || !st.IsDir() || time.Since(st.ModTime()) < time.Minute {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, pgTempFile)); err == nil && (release == nil || !release(dir)) {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}
