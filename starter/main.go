// Command starter injects failed messages by hand and runs the demo: a flaky consumer that
// fails a share of its messages, so that retries, deliveries and dead letters show up in the
// Temporal Web UI within a minute.
//
//	go run ./starter inject -original-queue orders -id order-42 -payload '{"n":42}' -reason "503 from payments"
//	go run ./starter demo
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "inject":
		err = inject(ctx, os.Args[2:], logger)
	case "demo":
		err = demo(ctx, os.Args[2:], logger)
	default:
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "starter:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: starter inject [flags] | starter demo [flags]   (-h for flags)")
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}
