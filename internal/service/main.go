package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/retry-scheduler/retry-scheduler/internal/buildinfo"
	"github.com/retry-scheduler/retry-scheduler/internal/config"
)

// stdout is where -version writes (a variable for tests).
var stdout io.Writer = os.Stdout

// Main is a service process from its arguments to its exit code: the configuration (the
// environment, overridden by args), the JSON logger at LOG_LEVEL, and Run until SIGTERM or
// SIGINT. cmd/retry-scheduler is this; the bench runs it as its measured child process.
// With -version (or --version) it prints the build's identity and returns 0 before reading
// any configuration, so that it answers whatever the environment holds.
func Main(args []string) int {
	if wantsVersion(args) {
		fmt.Fprintln(stdout, buildinfo.Get())
		return 0
	}
	cfg, err := config.Load(args, os.LookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		config.Usage(os.Stderr)
		fmt.Fprintln(os.Stderr, "  -version\n    \tprint the build's version, revision and Go version, and exit")
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
	build := buildinfo.Get()
	logger.Info("starting", "version", build.Version, "revision", build.Revision, "config", cfg.String())
	config.WarnForeignEnv(logger, os.LookupEnv)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, cfg, logger); err != nil {
		logger.Error("stopped", "error", err)
		return 1
	}
	logger.Info("stopped")
	return 0
}

// wantsVersion reports whether args ask for -version, as config.Load would read them: a flag
// anywhere among them, before a "--"; an argument that follows a flag without "=" is that
// flag's value (every configuration flag takes one), so "-service-version -version" does not
// count.
func wantsVersion(args []string) bool {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return false
		case a == "-version" || a == "--version":
			return true
		case a == "-h" || a == "-help" || a == "--h" || a == "--help":
		case strings.HasPrefix(a, "-") && a != "-" && !strings.Contains(a, "="):
			i++
		}
	}
	return false
}
