package service

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
)

// Main is a service process from its arguments to its exit code: the configuration (the
// environment, overridden by args), the JSON logger at LOG_LEVEL, and Run until SIGTERM or
// SIGINT. cmd/retry-scheduler is this; the bench runs it as its measured child process.
func Main(args []string) int {
	cfg, err := config.Load(args, os.LookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		config.Usage(os.Stderr)
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "retry-scheduler: invalid configuration:", err)
		return 2
	}
	logger := cfg.NewLogger(os.Stderr)
	// The process's handler: the logger is injected everywhere, and a library that logs
	// without one would still write JSON at LOG_LEVEL.
	slog.SetDefault(logger)
	logger.Info("starting", "config", cfg.String())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, cfg, logger); err != nil {
		logger.Error("stopped", "error", err)
		return 1
	}
	logger.Info("stopped")
	return 0
}
