// Command starter injects failed messages by hand and runs the demo: a flaky consumer that
// fails a share of its messages, so that retries, deliveries and dead letters show up in the
// Temporal Web UI within a minute.
//
//	go run ./starter inject -original-queue orders -id order-42 -payload '{"n":42}' -reason "503 from payments"
//	go run ./starter demo
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/retry-scheduler/retry-scheduler/bridge"
	"github.com/retry-scheduler/retry-scheduler/internal/broker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, logger)
	stop()
	os.Exit(code)
}

// Exit codes: a command that failed, and a command line that is wrong.
const (
	exitFailed = 1
	exitUsage  = 2
)

// usageError is a command line the flags refuse or a value they cannot take.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// run runs the subcommand args name and says the process's exit code: 0, exitFailed, or
// exitUsage for a wrong command line (-h is not wrong: 0).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	var err error
	switch args[0] {
	case "inject":
		err = inject(ctx, args[1:], stdout, stderr, logger)
	case "demo":
		err = demo(ctx, args[1:], stdout, stderr, logger)
	default:
		usage(stderr)
		return exitUsage
	}
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "starter:", err)
		return exitUsage
	default:
		fmt.Fprintln(stderr, "starter:", err)
		return exitFailed
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: starter inject [flags] | starter demo [flags]   (-h for flags)")
}

// brokerFlags is subcommand name's flag set with the flags every subcommand takes: the broker
// URL and the ingress queue, whose defaults come from the service's environment variables.
func brokerFlags(name string, stderr io.Writer, url, ingress *string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(url, "rabbitmq-url", envOr("RABBITMQ_URL", broker.DefaultURL), "broker URL (env RABBITMQ_URL)")
	fs.StringVar(ingress, "queue", envOr("RETRY_QUEUE", bridge.DefaultQueue), "ingress queue (env RETRY_QUEUE)")
	return fs
}

// parseFlags parses args into fs, its errors (the flag package has printed them, with the
// flags) as usage errors; -h gives flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	switch {
	case err == nil && fs.NArg() > 0:
		return usagef("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	case err == nil, errors.Is(err, flag.ErrHelp):
		return err
	default:
		return usageError{err}
	}
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}
