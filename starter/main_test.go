package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/bridge"
	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// unreachable is a broker URL nothing answers (port 1 is not a broker's).
const unreachable = "amqp://guest:guest@127.0.0.1:1/"

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// runStarter runs the command line args and gives its exit code, stdout and stderr.
func runStarter(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr, quiet())
	return code, stdout.String(), stderr.String()
}

func TestRunCommandLines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string // a part of what it prints there
	}{
		{"no subcommand", nil, exitUsage, "usage: starter inject"},
		{"unknown subcommand", []string{"replay"}, exitUsage, "usage: starter inject"},
		{"inject help", []string{"inject", "-h"}, 0, "-original-queue"},
		{"demo help", []string{"demo", "-help"}, 0, "-duration"},
		{"unknown flag", []string{"inject", "-bogus"}, exitUsage, "flag provided but not defined: -bogus"},
		{"bad int", []string{"inject", "-retry-count", "two"}, exitUsage, `invalid value "two" for flag -retry-count`},
		{"bad duration", []string{"demo", "-every", "soon"}, exitUsage, `invalid value "soon" for flag -every`},
		{"stray argument", []string{"inject", "-id", "a", "orders"}, exitUsage, `inject: unexpected argument "orders"`},
		{"empty id", []string{"inject", "-id", ""}, exitUsage, "inject: -id is empty"},
		{"empty original queue", []string{"inject", "-original-queue", ""}, exitUsage, "inject: -original-queue is empty"},
		{"empty ingress", []string{"inject", "-queue", ""}, exitUsage, "inject: -queue is empty"},
		{"negative retry count", []string{"inject", "-retry-count", "-1"}, exitUsage, "inject: -retry-count -1 is negative"},
		{"negative max retries", []string{"inject", "-max-retries", "-3"}, exitUsage, "inject: -max-retries -3 is negative"},
		{"negative count", []string{"demo", "-n", "-1"}, exitUsage, "demo: -n -1 is negative"},
		{"negative every", []string{"demo", "-every", "-1s"}, exitUsage, "demo: -every -1s is negative"},
		{"zero duration", []string{"demo", "-duration", "0s"}, exitUsage, "demo: -duration 0s is not positive"},
		{"demo empty ingress", []string{"demo", "-queue", ""}, exitUsage, "demo: -queue is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runStarter(t, context.Background(), tc.args...)
			assert.Equal(t, tc.code, code, "exit code; stderr:\n%s", stderr)
			assert.Contains(t, stderr, tc.stderr)
			assert.Empty(t, stdout, "nothing is injected or run")
		})
	}
}

func TestParseInjectDefaults(t *testing.T) {
	t.Setenv("RABBITMQ_URL", "")
	t.Setenv("RETRY_QUEUE", "")
	o, err := parseInject(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, broker.DefaultURL, o.url)
	assert.Equal(t, bridge.DefaultQueue, o.ingress)
	assert.True(t, strings.HasPrefix(o.msg.MessageID, "manual-"), "a fresh id: %s", o.msg.MessageID)
	assert.Equal(t, message.RetryMessage{
		MessageID: o.msg.MessageID, OriginalPayload: []byte(`{"hello":"world"}`), OriginalQueue: "demo.orders",
		ErrorReason: "injected by hand",
	}, o.msg)

	again, err := parseInject(nil, io.Discard)
	require.NoError(t, err)
	assert.NotEqual(t, o.msg.MessageID, again.msg.MessageID, "each run injects a new message")
}

func TestParseInjectEnvironmentAndFlags(t *testing.T) {
	t.Setenv("RABBITMQ_URL", "amqp://env:env@broker:5672/")
	t.Setenv("RETRY_QUEUE", "env.retry")
	o, err := parseInject(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "amqp://env:env@broker:5672/", o.url, "the service's variable is the default")
	assert.Equal(t, "env.retry", o.ingress)

	o, err = parseInject([]string{
		"-rabbitmq-url", "amqp://flag@other/", "-queue", "flag.retry",
		"-id", "order-42", "-original-queue", "orders", "-payload", `{"n":42}`, "-reason", "503 from payments",
		"-category", "transient", "-http-status", "503", "-retry-count", "2", "-max-retries", "7",
		"-policy", "patient", "-tenant", "acme",
	}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "amqp://flag@other/", o.url, "a flag beats the environment")
	assert.Equal(t, "flag.retry", o.ingress)
	assert.Equal(t, message.RetryMessage{
		MessageID: "order-42", OriginalPayload: []byte(`{"n":42}`), OriginalQueue: "orders",
		ErrorReason: "503 from payments", ErrorCategory: "transient", HTTPStatus: 503, RetryCount: 2,
		MaxRetries: 7, Policy: "patient", TenantID: "acme",
	}, o.msg)
}

func TestParseDemo(t *testing.T) {
	t.Setenv("RABBITMQ_URL", "")
	t.Setenv("RETRY_QUEUE", "env.retry")
	o, err := parseDemo(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, demoOptions{url: broker.DefaultURL, ingress: "env.retry", count: 20, every: 500 * time.Millisecond, duration: 90 * time.Second,
		orders: demoOrders, payments: demoPayments}, o)

	o, err = parseDemo([]string{"-rabbitmq-url", "amqp://x/", "-queue", "q", "-n", "0", "-every", "0s", "-duration", "1m"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, demoOptions{url: "amqp://x/", ingress: "q", count: 0, every: 0, duration: time.Minute,
		orders: demoOrders, payments: demoPayments}, o)
}

// A broker that does not answer fails the command with the queue it was for; the context's
// deadline bounds the wait.
func TestInjectBrokerUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	code, stdout, stderr := runStarter(t, ctx, "inject", "-rabbitmq-url", unreachable, "-queue", "test.retry", "-id", "m1")
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, stderr, "starter: publish to test.retry:")
	assert.Empty(t, stdout, "nothing reported as injected")
}

func TestInjectBadBrokerURL(t *testing.T) {
	code, _, stderr := runStarter(t, context.Background(), "inject", "-rabbitmq-url", "http://127.0.0.1/")
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, stderr, "starter: publish to "+bridge.DefaultQueue+":")
}

func TestDemoBrokerUnreachable(t *testing.T) {
	code, stdout, stderr := runStarter(t, context.Background(), "demo", "-rabbitmq-url", unreachable)
	assert.Equal(t, exitFailed, code)
	assert.Contains(t, stderr, "starter: connect to the broker:")
	assert.Empty(t, stdout, "the demo did not start")
}

// The flaky consumer fails the shares the demo promises: on orders a tenth of the messages
// for good and four tenths for their first two attempts; on payments every first attempt.
func TestFlakyOutcome(t *testing.T) {
	const n = 1000
	perAttempt := func(queue string, attempt int) map[outcome]int {
		got := map[outcome]int{}
		for i := range n {
			got[flakyOutcome(queue, fmt.Sprintf("demo-1700000000-%d", i), attempt)]++
		}
		return got
	}
	first := perAttempt(demoOrders, 0)
	assert.InDelta(t, n/10, first[failedPermanently], n/25, "permanent share: %v", first)
	assert.InDelta(t, 4*n/10, first[failedTransiently], n/25, "transient share: %v", first)
	assert.Zero(t, first[rejected], "orders report their failures")
	assert.Equal(t, first, perAttempt(demoOrders, 1), "the second attempt fails as the first")
	third := perAttempt(demoOrders, 2)
	assert.Zero(t, third[failedTransiently], "transient failures end after two attempts")
	assert.Equal(t, first[failedPermanently], third[failedPermanently], "permanent failures stay")

	assert.Equal(t, map[outcome]int{rejected: n}, perAttempt(demoPayments, 0))
	assert.Equal(t, map[outcome]int{succeeded: n}, perAttempt(demoPayments, 1))
	assert.Equal(t, map[outcome]int{succeeded: n}, perAttempt("other", 0), "only the demo queues fail")
}
