package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/proc"
)

// service is one retry-scheduler process (worker or bridge) that the soak starts, kills
// with SIGKILL and starts again, always with the same command line and log file.
type service struct {
	name     string
	bin      string
	args     []string
	httpAddr string
	logPath  string

	mu     sync.Mutex
	run    *proc.Process // the current run; nil before the first start
	starts int
	kills  int
}

func newService(name, bin, logDir, httpAddr string, args []string) *service {
	return &service{
		name:     name,
		bin:      bin,
		args:     args,
		httpAddr: httpAddr,
		logPath:  filepath.Join(logDir, name+".log"),
	}
}

// start runs the process; its output is appended to its log file after a line that
// numbers the start.
func (s *service) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run != nil && !s.run.Exited() {
		return fmt.Errorf("%s: already running", s.name)
	}
	p, err := proc.Start(proc.Command{
		Name:    s.name,
		Path:    s.bin,
		Args:    s.args,
		LogPath: s.logPath,
		Banner:  logMark(fmt.Sprintf("start #%d", s.starts+1)),
	})
	if err != nil {
		return err
	}
	s.run = p
	s.starts++
	return nil
}

// current is the current run, or an error before the first start.
func (s *service) current() (*proc.Process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		return nil, fmt.Errorf("%s: not started", s.name)
	}
	return s.run, nil
}

// kill sends SIGKILL, waits for the process to be gone and marks the log.
func (s *service) kill() error {
	p, err := s.current()
	if err != nil {
		return err
	}
	if err := p.Kill(); err != nil {
		return err
	}
	s.mu.Lock()
	s.kills++
	s.mu.Unlock()
	return appendLog(s.logPath, logMark("SIGKILL"))
}

// stop sends SIGTERM and waits up to grace, then SIGKILL.
func (s *service) stop(grace time.Duration) {
	if p, err := s.current(); err == nil {
		_ = p.Stop(grace)
	}
}

// waitReady polls /readyz until it answers 200, the process exits, or timeout.
func (s *service) waitReady(ctx context.Context, timeout time.Duration) error {
	p, err := s.current()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return p.AwaitReady(ctx, 200*time.Millisecond, proc.HTTPReady("http://"+s.httpAddr+"/readyz"))
}

// logMark is the soak's own line in a service log: JSON, like the service's lines.
func logMark(what string) string {
	return fmt.Sprintf("{\"soak\":\"%s at %s\"}\n", what, time.Now().Format(time.RFC3339Nano))
}

func appendLog(path, line string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("log %s: %w", path, err)
	}
	_, err = f.WriteString(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("log %s: %w", path, err)
	}
	return nil
}
