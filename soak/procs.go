package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// service is one retry-scheduler process (worker or bridge) that the soak starts, kills
// with SIGKILL and starts again, always with the same command line and log file.
type service struct {
	name     string
	args     []string
	httpAddr string
	logPath  string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	starts  int
	kills   int
	logFile *os.File
}

func newService(name, bin, logDir, httpAddr string, args []string) *service {
	return &service{
		name:     name,
		args:     append([]string{bin}, args...),
		httpAddr: httpAddr,
		logPath:  filepath.Join(logDir, name+".log"),
	}
}

// start runs the process; its output is appended to its log file.
func (s *service) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		select {
		case <-s.done:
		default:
			return fmt.Errorf("%s: already running", s.name)
		}
	}
	if s.logFile == nil {
		f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("%s: log file: %w", s.name, err)
		}
		s.logFile = f
	}
	fmt.Fprintf(s.logFile, "{\"soak\":\"start #%d at %s\"}\n", s.starts+1, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.Stdout, cmd.Stderr = s.logFile, s.logFile
	// Own process group (a terminal's Ctrl-C reaches only the soak, which stops everything in
	// order), and killed if the soak dies, so no service process outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: start: %w", s.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	s.starts++
	return nil
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *service) kill() error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("%s: not started", s.name)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s: SIGKILL: %w", s.name, err)
	}
	<-done
	s.mu.Lock()
	s.kills++
	fmt.Fprintf(s.logFile, "{\"soak\":\"SIGKILL at %s\"}\n", time.Now().Format(time.RFC3339Nano))
	s.mu.Unlock()
	return nil
}

// stop sends SIGTERM and waits up to grace, then SIGKILL.
func (s *service) stop(grace time.Duration) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
	default:
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(grace):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-done
		}
	}
	s.mu.Lock()
	if s.logFile != nil {
		_ = s.logFile.Close()
		s.logFile = nil
	}
	s.mu.Unlock()
}

// exited reports whether the process has ended (by itself or killed).
func (s *service) exited() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		return true
	}
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// waitReady polls /readyz until it answers 200, the process exits, or timeout.
func (s *service) waitReady(ctx context.Context, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if s.exited() {
			return fmt.Errorf("%s exited during start-up; see %s", s.name, s.logPath)
		}
		resp, err := client.Get("http://" + s.httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready within %s; see %s", s.name, timeout, s.logPath)
}
