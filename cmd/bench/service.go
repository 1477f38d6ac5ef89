package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/proc"
	"github.com/retry-scheduler/retry-scheduler/internal/service"
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

// serve runs the service as cmd/retry-scheduler does, until SIGTERM or SIGINT.
func serve(args []string) int { return service.Main(args) }

// startService starts `<this binary> serve args...` with env added to the environment, its
// output appended to logFile, and waits until its /readyz answers 200.
func startService(ctx context.Context, args, env []string, httpAddr, logFile string) (*proc.Process, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("service: find own executable: %w", err)
	}
	p, err := proc.Start(proc.Command{
		Name:    "service",
		Path:    self,
		Args:    append([]string{serveArg}, args...),
		Env:     append(os.Environ(), env...),
		LogPath: logFile,
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, serviceReadyTimeout)
	defer cancel()
	if err := p.AwaitReady(ctx, 100*time.Millisecond, proc.HTTPReady("http://"+httpAddr+"/readyz")); err != nil {
		_ = p.Stop(serviceStopGrace)
		return nil, err
	}
	return p, nil
}
