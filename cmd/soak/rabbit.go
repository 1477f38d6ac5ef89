package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"time"
)

// rabbitctl runs rabbitmqctl with a timeout and returns its combined output.
func rabbitctl(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// amqpUp says whether something accepts TCP connections at addr.
func amqpUp(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// ensureRabbit makes sure the RabbitMQ app runs: other people's tests use this broker, so
// the soak never leaves it stopped, whatever happened to the soak. It uses a fresh context
// on purpose (it runs on the way out, when the run's context is cancelled).
func ensureRabbit(addr string) error {
	if amqpUp(addr) {
		return nil
	}
	ctx := context.Background()
	if _, err := rabbitctl(ctx, 60*time.Second, "start_app"); err != nil {
		return err
	}
	if _, err := rabbitctl(ctx, 90*time.Second, "await_startup"); err != nil {
		return err
	}
	for range 60 {
		if amqpUp(addr) {
			return nil
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("RabbitMQ at %s did not come back", addr)
}

// restartRabbit stops and starts the RabbitMQ application (the node keeps running), and
// returns how long the broker was away.
func restartRabbit(ctx context.Context, addr string) (time.Duration, error) {
	start := time.Now()
	if _, err := rabbitctl(ctx, 60*time.Second, "stop_app"); err != nil {
		// Whatever state it is in, bring it back.
		return time.Since(start), fmt.Errorf("%w (start_app: %v)", err, ensureRabbit(addr))
	}
	// Always start it again, also when ctx ended meanwhile.
	if _, err := rabbitctl(context.Background(), 60*time.Second, "start_app"); err != nil {
		return time.Since(start), fmt.Errorf("%w (retry: %v)", err, ensureRabbit(addr))
	}
	if _, err := rabbitctl(context.Background(), 90*time.Second, "await_startup"); err != nil {
		return time.Since(start), err
	}
	return time.Since(start), nil
}
