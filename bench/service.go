package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"retry-scheduler/config"
	"retry-scheduler/service"
)

// serveArg, as the first argument, makes this binary run the service instead of the
// benchmark: the bench starts itself again with it so that the service's CPU is measured
// apart from the load generator's, as a deployed `retry-scheduler all` would run.
const serveArg = "serve"

// Timeouts of the service process.
const (
	serviceReadyTimeout = 60 * time.Second
	// serviceStopGrace exceeds the worker's stop timeout (30s) and the HTTP shutdown.
	serviceStopGrace = 45 * time.Second
)

// serve runs service.Run like cmd/retry-scheduler does, until SIGTERM or SIGINT.
func serve(args []string) int {
	cfg, err := config.Load(args, os.LookupEnv)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "bench serve: invalid configuration:", err)
		return 2
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // config.Validate refused anything else
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := service.Run(ctx, cfg, logger); err != nil {
		logger.Error("stopped", "error", err)
		return 1
	}
	return 0
}

// serviceProc is a running service child process.
type serviceProc struct {
	cmd      *exec.Cmd
	httpAddr string
	logFile  string
	done     chan struct{}
	err      error
}

// startService starts `<this binary> serve args...` with env added to the environment, its
// output appended to logFile, and waits until its /readyz answers 200.
func startService(ctx context.Context, args, env []string, httpAddr, logFile string) (*serviceProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("service: find own executable: %w", err)
	}
	logf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("service: log file: %w", err)
	}
	cmd := exec.Command(self, append([]string{serveArg}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a terminal's Ctrl-C reaches only the bench, which stops it
	// gracefully; killed if the bench dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("service: start: %w", err)
	}
	p := &serviceProc{cmd: cmd, httpAddr: httpAddr, logFile: logFile, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	if err := p.waitReady(ctx); err != nil {
		_ = p.stop()
		return nil, err
	}
	return p, nil
}

func (p *serviceProc) pid() int { return p.cmd.Process.Pid }

func (p *serviceProc) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, serviceReadyTimeout)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	url := "http://" + p.httpAddr + "/readyz"
	for {
		if resp, err := hc.Get(url); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("service: exited during start-up (%v); log: %s", p.err, p.logFile)
		case <-ctx.Done():
			return fmt.Errorf("service: not ready at %s in time: %w; log: %s", url, ctx.Err(), p.logFile)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM and waits up to serviceStopGrace, then kills.
func (p *serviceProc) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(serviceStopGrace):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("service: did not stop within %s of SIGTERM; killed", serviceStopGrace)
}
