//go:build integration

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"

	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Issue 11, items 1 and 2: the counting of retries for ordinary errors, and an operator's
// retry from dead that sticks under a max window.

// useBuiltinDefault routes the stack's "<prefix>.default-policy-…" queues to the built-in
// `default` policy by a route before the harness's, with short delays (BASE_DELAY_MS 200,
// MAX_DELAY_MS 800; its 0–1 s added jitter stays).
func useBuiltinDefault(t *testing.T, s *stack) {
	t.Helper()
	file := strings.Replace(policyFile, "routes:\n", "routes:\n  - queue: \"e2e-*.default-policy-*\"\n    policy: default\n", 1)
	pf := filepath.Join(t.TempDir(), "policies.yaml")
	require.NoError(t, os.WriteFile(pf, []byte(file), 0o600))
	s.cfg.PolicyFile = pf
	s.cfg.BaseDelay = 200 * time.Millisecond
	s.cfg.MaxDelay = 800 * time.Millisecond
}

// (a) A Node.js consumer's report: only an error text, max_retries 3, no category. The
// socket error code in the text is transient: 3 republishes, then dead.
func TestSocketHangUpTextGetsMaxRetries(t *testing.T) {
	s := newStack(t)
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil)
	const reason = "ECONNRESET: socket hang up"
	c, reportErr := s.failingConsumer(orders, func(d amqp.Delivery, n int, key string) message.RetryMessage {
		return message.RetryMessage{MessageID: d.MessageId, OriginalPayload: d.Body, OriginalQueue: orders,
			ErrorReason: reason, MaxRetries: 3, RetryCount: n, RetryKey: key}
	})
	dead := s.consume(s.dlq, nil)

	s.publishRetry(message.RetryMessage{MessageID: "hangup-1", OriginalPayload: []byte("p"), OriginalQueue: orders,
		ErrorReason: reason, MaxRetries: 3})
	env := envelopeOf(t, dead.next(t, patience))
	id := message.WorkflowID(orders, "hangup-1")
	s.recordHistory(id, "socket-code-in-reason")
	require.NoError(t, reportErr())

	require.Len(t, c.all(), 3, "republished exactly max_retries times")
	require.Equal(t, "exhausted", env.DeadReason)
	require.Equal(t, 3, env.TotalRetries)
	require.Equal(t, "transient", env.FailureCategory)
	require.Len(t, env.RetryAttempts, 4)
	for _, a := range env.RetryAttempts {
		require.Equal(t, reason, a.Error)
		require.Equal(t, "transient", a.Category)
	}
}

// (b) A message adopted through x-death with no error headers, under the built-in default
// policy (no cap on unknown errors): delivered 1 + 3 times, then dead.
func TestXDeathWithoutErrorHeadersGetsDefaultsRetries(t *testing.T) {
	s := newStack(t)
	useBuiltinDefault(t, s)
	s.run("all")
	payments := s.queue(s.prefix+".default-policy-payments", amqp.Table{
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": s.ingress,
	})
	c := s.consume(payments, func(d amqp.Delivery) { _ = d.Reject(false) }) // the consumer always fails
	dead := s.consume(s.dlq, nil)

	s.publishRaw(payments, amqp.Publishing{MessageId: "adopt-1", ContentType: "text/plain", Type: "payment.requested",
		Body: []byte("charge 10 EUR")})
	env := envelopeOf(t, dead.next(t, patience))
	id := message.WorkflowID(payments, "adopt-1")
	s.recordHistory(id, "xdeath-unknown-under-default")

	got := c.all()
	require.Len(t, got, 4, "delivered once, then republished max_retries (3) times")
	for i, d := range got[1:] {
		require.EqualValues(t, i+1, d.Headers["x-retry-count"])
	}
	require.Equal(t, "exhausted", env.DeadReason)
	require.Equal(t, "default", env.Policy)
	require.Equal(t, "unknown", env.FailureCategory)
	require.Equal(t, 3, env.TotalRetries)
	require.Len(t, env.RetryAttempts, 4)

	// The event type (the AMQP type property here) is a search attribute.
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	desc, err := s.tc.DescribeWorkflow(ctx, id, "")
	require.NoError(t, err)
	var et string
	p := desc.RawResponse.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[workflows.SAEventType.GetName()]
	require.NotNil(t, p, "EventType search attribute")
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(p, &et))
	require.Equal(t, "payment.requested", et)
}

// (c) A message dead under `aggressive` (15 s window), retried by an operator after the
// window has passed, fails again: it is scheduled again, not dead (the operator's retry
// opened a new window).
func TestRetryFromDeadAfterTheWindowIsScheduled(t *testing.T) {
	s := newStack(t)
	s.run("all")
	orders := s.queue(s.prefix+".orders", nil)
	c := s.consume(orders, func(d amqp.Delivery) {
		// The first republish after the operator's retry fails again (a transient error); the
		// next one is taken.
		n, key := retryHeaders(d)
		if n == 1 {
			_ = s.sendRetry(message.RetryMessage{MessageID: d.MessageId, OriginalPayload: d.Body, OriginalQueue: orders,
				ErrorReason: "connect ETIMEDOUT", ErrorCode: "ETIMEDOUT", Policy: "aggressive", RetryCount: n, RetryKey: key})
		}
		_ = d.Ack(false)
	})
	dead := s.consume(s.dlq, nil)

	// Dead at once: a permanent error, under aggressive.
	s.publishRetry(message.RetryMessage{MessageID: "window-1", OriginalPayload: []byte("p"), OriginalQueue: orders,
		ErrorReason: "bad schema", ErrorCategory: "permanent", Policy: "aggressive"})
	first := envelopeOf(t, dead.next(t, patience))
	require.Equal(t, "non-retryable", first.DeadReason)
	require.Equal(t, "aggressive", first.Policy)
	id := message.WorkflowID(orders, "window-1")

	// Past aggressive's 15 s window since the first failure, the operator retries.
	time.Sleep(time.Until(first.FirstFailureAt.Add(15*time.Second + 500*time.Millisecond))) // the scenario's clock: no event marks a window's end
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	require.NoError(t, s.tc.SignalWorkflow(ctx, id, "", workflows.SignalRetryNow,
		workflows.OperatorAction{Actor: "e2e", Reason: "schema fixed"}))

	// The republish fails again; the decision on that failure is what this test is about.
	var st workflows.State
	eventually(t, patience, func() error {
		var err error
		if st, err = s.state(id); err != nil {
			return err
		}
		if len(st.Attempts) < 2 || st.Status == workflows.StatusRepublishing {
			return fmt.Errorf("status %s, %d attempts", st.Status, len(st.Attempts))
		}
		if st.Status == workflows.StatusScheduled {
			return fmt.Errorf("scheduled: waiting for the republish")
		}
		return nil
	})
	s.recordHistory(id, "retry-from-dead-opens-window")
	require.NotEqual(t, workflows.StatusDead, st.Status, "dead again: %s %s", st.DeadReason, st.DeadDetail)
	require.Equal(t, workflows.StatusAwaitingOutcome, st.Status)
	require.Equal(t, 2, st.RetryCount, "the retry after the failure was republished")
	got := c.all()
	require.Len(t, got, 2)
	require.EqualValues(t, 2, got[1].Headers["x-retry-count"])
	require.False(t, st.WindowStart.IsZero())
	require.Len(t, dead.all(), 1, "one dead letter only")
}
