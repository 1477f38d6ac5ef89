// Package devserver starts and stops a local `temporal server start-dev` (the Temporal
// CLI's development server, with the Web UI and a SQLite file store) for `make run`,
// integration tests and benchmarks. The server registers this project's search
// attributes at start, so the Web UI and `temporal workflow list --query` work at once.
package devserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

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

// Options says how to start the dev server. The zero value is usable.
type Options struct {
	// Binary is the Temporal CLI. Defaults to $TEMPORAL_CLI, else
	// $XDG_CACHE_HOME (or ~/.cache) + /retry-scheduler/bin/temporal (see DefaultBinary).
	Binary string
	// Port is the frontend gRPC port. 0 picks a free port.
	Port int
	// UIPort is the Web UI port. 0 means Port+1000 (a free port if that is above 65535);
	// -1 means no UI (--headless).
	UIPort int
	// DBFile is the SQLite file. "" means a file in a new temporary directory, which
	// Stop removes.
	DBFile string
	// Namespace is created at start. Defaults to "default".
	Namespace string
	// LogFile receives the server's output (appended). Defaults to DBFile+".log".
	LogFile string
	// ExtraArgs are appended to the start-dev command line (e.g. --dynamic-config-value).
	ExtraArgs []string
}

// Server is a running (or stopped) dev server.
type Server struct {
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

	opts    Options // resolved
	tempDir string  // removed by Stop when DBFile was not given
	// fourReadPartitions: DBFile existed without onePartitionMark (see resolve).
	fourReadPartitions bool
	// markOnePartition: start writes onePartitionMark (one partition, not overridden).
	markOnePartition bool

	mu   sync.Mutex
	proc *process
}

// process is one run of the server binary.
type process struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result, set before done is closed
}

// DefaultBinary is where the Temporal CLI is looked for: $TEMPORAL_CLI, else
// $XDG_CACHE_HOME/retry-scheduler/bin/temporal, else ~/.cache/retry-scheduler/bin/temporal
// (where `make tools` installs it).
func DefaultBinary() string {
	if p := os.Getenv("TEMPORAL_CLI"); p != "" {
		return p
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "."
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "retry-scheduler", "bin", "temporal")
}

// Start starts `temporal server start-dev` and returns once its frontend answers a
// health check (at most ReadyTimeout, or until ctx ends). The process keeps running
// after ctx ends; stop it with Stop.
func Start(ctx context.Context, o Options) (*Server, error) {
	s := &Server{}
	if err := s.resolve(o); err != nil {
		return nil, err
	}
	if err := s.start(ctx); err != nil {
		if s.tempDir != "" {
			_ = os.RemoveAll(s.tempDir)
		}
		return nil, err
	}
	return s, nil
}

func (s *Server) resolve(o Options) error {
	if o.Binary == "" {
		o.Binary = DefaultBinary()
	}
	if st, err := os.Stat(o.Binary); err != nil || st.IsDir() {
		return fmt.Errorf("devserver: Temporal CLI not found at %s (run `make tools`, or set TEMPORAL_CLI)", o.Binary)
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.Port < 0 || o.Port > 65535 {
		return fmt.Errorf("devserver: port %d out of range", o.Port)
	}
	if o.Port == 0 {
		p, err := FreePort()
		if err != nil {
			return err
		}
		o.Port = p
	}
	switch {
	case o.UIPort == 0 && o.Port+1000 <= 65535:
		o.UIPort = o.Port + 1000
	case o.UIPort == 0:
		p, err := FreePort()
		if err != nil {
			return err
		}
		o.UIPort = p
	case o.UIPort < -1 || o.UIPort > 65535:
		return fmt.Errorf("devserver: UI port %d out of range", o.UIPort)
	}
	if o.DBFile == "" {
		sweepTempDirs()
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

// Args is the start-dev command line (without the binary) for these options.
func (s *Server) Args() []string {
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
// retry is what raises its throughput (measured with `make bench`, bench/README.md Levers):
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
	if s.proc != nil && !s.proc.exited() {
		return errors.New("devserver: already running")
	}
	logf, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("devserver: log file: %w", err)
	}
	fmt.Fprintf(logf, "\n==== %s devserver: %s %q\n", time.Now().Format(time.RFC3339), s.opts.Binary, s.Args())
	cmd := exec.Command(s.opts.Binary, s.Args()...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("devserver: start %s: %w", s.opts.Binary, err)
	}
	p := &process{cmd: cmd, log: logf, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	s.proc = p
	if s.tempDir != "" {
		_ = os.WriteFile(filepath.Join(s.tempDir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644)
	}

	if err := s.waitReady(ctx, p); err != nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%w\n%s", err, tail(s.LogFile, 20))
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

// waitReady polls the frontend until it answers CheckHealth and knows the namespace.
func (s *Server) waitReady(ctx context.Context, p *process) error {
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	var last error
	for {
		select {
		case <-p.done:
			return fmt.Errorf("devserver: the server exited during start-up (%v); log: %s", p.err, s.LogFile)
		default:
		}
		if last = s.check(ctx); last == nil {
			return nil
		}
		select {
		case <-p.done:
		case <-ctx.Done():
			return fmt.Errorf("devserver: %s did not answer in time (%v): %w; log: %s", s.Address, ctx.Err(), last, s.LogFile)
		case <-time.After(200 * time.Millisecond):
		}
	}
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
	return s.proc != nil
}

// Done is closed when the server process exits (nil for a server not owned).
func (s *Server) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	return s.proc.done
}

// Err is the server process's exit status once Done is closed.
func (s *Server) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || !s.proc.exited() {
		return nil
	}
	return s.proc.err
}

// Pid is the server process's id (0 when not owned).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop stops the server: SIGTERM, then SIGKILL after StopGrace. It removes the
// temporary directory when the DB file was not given. Stopping twice is harmless; a
// server not owned is left alone.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	err := s.proc.terminate()
	if s.tempDir != "" {
		if rmErr := os.RemoveAll(s.tempDir); rmErr != nil && err == nil {
			err = rmErr
		}
		s.tempDir = ""
	}
	return err
}

func (p *process) terminate() error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("devserver: SIGTERM: %w", err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(StopGrace):
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	return fmt.Errorf("devserver: the server did not stop within %s of SIGTERM; killed", StopGrace)
}

// Kill kills the server with SIGKILL (a crash), keeping its DB file for Restart.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return ErrNotOwned
	}
	if s.proc.exited() {
		return nil
	}
	if err := s.proc.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("devserver: SIGKILL: %w", err)
	}
	<-s.proc.done
	return nil
}

// Restart starts the server again on the same ports and DB file (stopping it first if
// it still runs) and waits until it answers.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return ErrNotOwned
	}
	if err := p.terminate(); err != nil {
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
// gone and that are older than a minute.
func sweepTempDirs() {
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
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(dir)
		}
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("devserver: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 16 << 10
	if st, err := f.Stat(); err == nil && st.Size() > max {
		_, _ = f.Seek(st.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "--- " + path + " (last lines) ---\n" + string(bytes.Join(lines, []byte("\n")))
}
