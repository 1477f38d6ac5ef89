// Command retry-scheduler runs the service: `all` (worker + bridge + ops, the local default),
// `worker` or `bridge`. Configuration comes from the environment, overridden by flags
// (`retry-scheduler -h` lists them).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"retry-scheduler/config"
	"retry-scheduler/service"
)

func main() {
	cfg, err := config.Load(os.Args[1:], os.LookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		config.Usage(os.Stderr)
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "retry-scheduler: invalid configuration:", err)
		os.Exit(2)
	}
	logger := cfg.NewLogger(os.Stderr)
	// The process's handler: the logger is injected everywhere, and a library that logs
	// without one would still write JSON at LOG_LEVEL.
	slog.SetDefault(logger)
	logger.Info("starting", "config", cfg.String())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := service.Run(ctx, cfg, logger); err != nil {
		logger.Error("stopped", "error", err)
		os.Exit(1)
	}
	logger.Info("stopped")
}
