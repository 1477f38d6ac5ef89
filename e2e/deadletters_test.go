//go:build integration

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retry-scheduler/retry-scheduler/internal/deadletter/schematest"
	"github.com/retry-scheduler/retry-scheduler/internal/service"
	"github.com/retry-scheduler/retry-scheduler/message"
	"github.com/retry-scheduler/retry-scheduler/workflows"
)

// Issue 11 items 3, 5 and 7, and the event type: configured dead-letter queues, the
// dead-letter queue as a notification stream, the envelope's metadata.

// withDeadLetterRoutes rewrites the stack's policy file with a policy and a route that name
// their own dead-letter queues, ahead of the usual routes.
func (s *stack) withDeadLetterRoutes(t *testing.T, policyDLQ, routeDLQ string) {
	t.Helper()
	file := fmt.Sprintf(`
policies:
  e2e-fast:
    backoff: {type: schedule, delays: [300ms]}
    max_retries: 3
    quiet_window: 2s
  e2e-billing:
    backoff: {type: schedule, delays: [300ms]}
    max_retries: 3
    quiet_window: 2s
    dead_letter_queue: %q
routes:
  - queue: %q
    policy: e2e-billing
    dead_letter_queue: %q
  - queue: %q
    policy: e2e-billing
  - queue: "e2e-*"
    policy: e2e-fast
`, policyDLQ, s.prefix+".billing.refunds", routeDLQ, s.prefix+".billing*")
	require.NoError(t, os.WriteFile(s.cfg.PolicyFile, []byte(file), 0o600))
}

// queueExists reports whether a passive declare finds the queue.
func (s *stack) queueExists(name string) bool {
	s.t.Helper()
	var err error
	onChannel(s.t, s.brokerURL, func(ch *amqp.Channel) {
		_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	})
	return err == nil
}

// Item 3 and 5: a route's and a policy's dead-letter queues are declared at start; a message
// dead under that route arrives there, as an envelope that expires with the retention and
// carries the failure's metadata (service, version, error type, stack trace; item 7).
func TestConfiguredDeadLetterQueuesAreDeclaredAndReceiveEnvelopes(t *testing.T) {
	s := newStack(t)
	policyDLQ, routeDLQ := s.prefix+".billing.dead", s.prefix+".refunds.dead"
	s.withDeadLetterRoutes(t, policyDLQ, routeDLQ)
	t.Cleanup(func() { s.deleteQueues(policyDLQ, routeDLQ) })
	require.False(t, s.queueExists(policyDLQ))
	require.False(t, s.queueExists(routeDLQ))

	s.run("all")
	require.True(t, s.queueExists(policyDLQ), "the policy's dead-letter queue is declared at start")
	require.True(t, s.queueExists(routeDLQ), "the route's dead-letter queue is declared at start")

	routed := s.consume(routeDLQ, nil)
	byPolicy := s.consume(policyDLQ, nil)
	trace := "TimeoutError: upstream timed out\n    at charge (billing.js:42:7)\n" + strings.Repeat("    at frame\n", 1000)
	// retry_count = max_retries: dead at once (retry_count counts the retries already made).
	s.publishRetry(message.RetryMessage{
		MessageID: "refund-1", OriginalPayload: []byte(`{"refund":1}`), OriginalQueue: s.prefix + ".billing.refunds",
		ErrorReason: "upstream timed out", RetryCount: 3, MaxRetries: 3, CorrelationID: "corr-r1",
		ErrorType: "TimeoutError", StackTrace: trace, Service: "refunds-svc", ServiceVersion: "4.2.0",
		EventType: "refund.requested",
	})
	s.publishRetry(message.RetryMessage{
		MessageID: "invoice-1", OriginalPayload: []byte(`{"invoice":1}`), OriginalQueue: s.prefix + ".billing.invoices",
		ErrorReason: "bad request", RetryCount: 3, MaxRetries: 3,
	})

	d := routed.next(t, patience)
	require.NoError(t, schematest.Validate(d.Body), "the envelope matches docs/envelope.schema.json")
	env := envelopeOf(t, d)
	assert.Equal(t, "refund-1", env.MessageID)
	// The fields dead-letter tools read, derived at publish time.
	assert.Equal(t, message.DLQUUID(env.DLQID), env.DLQUUID)
	assert.Equal(t, "refunds-svc."+s.prefix+".billing.refunds", env.ConsumerGroup)
	assert.Equal(t, env.WorkflowID, env.Metadata.InternalID)
	require.NotNil(t, env.ErrorDetails)
	assert.Equal(t, "TimeoutError", env.ErrorDetails.ErrorType)
	assert.Equal(t, "upstream timed out", env.ErrorDetails.ErrorMessage)
	assert.Equal(t, 3, env.ErrorDetails.RetryCount)
	assert.Equal(t, env.Metadata.DLQTimestamp.Unix(), env.Metadata.DLQTimestampUnix)
	assert.Equal(t, "2592000000", d.Expiration, "the envelope expires with DEAD_LETTER_RETENTION (30 days)")
	assert.Equal(t, s.cfg.ServiceName, d.AppId)
	assert.Equal(t, "corr-r1", d.CorrelationId)
	assert.Equal(t, "refunds-svc", env.Metadata.Service)
	assert.Equal(t, "4.2.0", env.Metadata.ServiceVersion)
	assert.Equal(t, "refund.requested", env.OriginalMessage.EventType)
	// error_type and stack_trace travel on the attempt (needs workflows/retry.go to copy them
	// from the report onto message.Attempt: see the note in the report).
	require.NotEmpty(t, env.RetryAttempts)
	assert.Equal(t, "TimeoutError", env.ErrorType)
	assert.LessOrEqual(t, len(env.StackTrace), message.MaxStackTraceBytes)
	assert.True(t, strings.HasPrefix(env.StackTrace, "TimeoutError: upstream timed out\n"), "stack trace: %.80q", env.StackTrace)

	d = byPolicy.next(t, patience)
	require.NoError(t, schematest.Validate(d.Body), "the envelope matches docs/envelope.schema.json")
	assert.Equal(t, "invoice-1", envelopeOf(t, d).MessageID)
	assert.NotEmpty(t, d.Expiration)
}

// Item 3: a configured dead-letter queue that cannot be declared stops the service at
// start, naming it ("amq." names are reserved: the broker refuses the declare).
func TestUndeclarableDeadLetterQueueRefusesToStart(t *testing.T) {
	s := newStack(t)
	bad := "amq." + s.prefix + ".dead"
	s.withDeadLetterRoutes(t, bad, s.prefix+".refunds.dead")
	t.Cleanup(func() { s.deleteQueues(s.prefix + ".refunds.dead") })
	cfg := s.cfg
	cfg.Mode = "all"
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	err := service.Run(ctx, cfg, discard())
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("declare queue %q", bad))
}

// The event type of the dead-lettered form: the x-event-type header, else the AMQP type
// property, reaches the envelope (the decoder's other sources: bridge unit tests).
func TestEventTypeOfTheDeadLetteredForm(t *testing.T) {
	s := newStack(t)
	s.run("all")
	dlq := s.consume(s.dlq, nil)
	for i, p := range []amqp.Publishing{
		{MessageId: "ev-1", Type: "order.created"}, // and the header below
		{MessageId: "ev-2", Type: "order.created"},
	} {
		p.Body = []byte("b")
		p.Headers = amqp.Table{"x-retry-count": int32(3), "x-error-type": "ValidationError",
			"x-service": "orders-svc", "x-service-version": "7", "x-death": []any{amqp.Table{
				"count": int64(1), "reason": "rejected", "queue": s.prefix + ".orders", "exchange": "",
				"routing-keys": []any{s.prefix + ".orders"},
			}}}
		if i == 0 {
			p.Headers["x-event-type"] = "order.paid"
		}
		s.publishRaw(s.ingress, p)
	}
	got := map[string]message.Envelope{}
	for range 2 {
		d := dlq.next(t, patience)
		require.NoError(t, schematest.Validate(d.Body), "the envelope matches docs/envelope.schema.json")
		env := envelopeOf(t, d)
		got[env.MessageID] = env
	}
	assert.Equal(t, "order.paid", got["ev-1"].OriginalMessage.EventType)
	assert.Equal(t, "order.created", got["ev-2"].OriginalMessage.EventType)
	assert.Equal(t, "orders-svc", got["ev-2"].Metadata.Service)
	assert.Equal(t, "7", got["ev-2"].Metadata.ServiceVersion)
}

// A dead message nobody decides on expires at the end of DEAD_LETTER_RETENTION: it is
// counted, and its envelope goes, without expiration, to EXPIRED_ARCHIVE_QUEUE (declared at
// start) under the dlqId it was dead-lettered with.
func TestExpiredDeadLetterIsCountedAndArchived(t *testing.T) {
	s := newStack(t)
	archive := s.prefix + ".archive"
	s.cfg.Retention = 3 * time.Second
	s.cfg.ExpiredArchiveQueue = archive
	t.Cleanup(func() { s.deleteQueues(archive) })
	s.run("all")
	require.True(t, s.queueExists(archive), "the archive queue is declared at start")
	metricsURL := "http://" + s.cfg.HTTPAddr + "/metrics"
	orders := s.prefix + ".orders"
	expired := series(workflows.MetricDeadLettersExpired, "queue", orders)
	before := mustScrape(t, metricsURL)

	dead, archived := s.consume(s.dlq, nil), s.consume(archive, nil)
	s.publishRetry(message.RetryMessage{
		MessageID: "expire-1", OriginalPayload: []byte(`{"order":1}`), OriginalQueue: orders,
		ErrorReason: "bad request", RetryCount: 3, MaxRetries: 3, Service: "orders-svc",
	})
	d := envelopeOf(t, dead.next(t, patience))
	a := archived.next(t, patience)
	require.NoError(t, schematest.Validate(a.Body), "the archived envelope matches docs/envelope.schema.json")
	assert.Empty(t, a.Expiration, "the archive is the last copy: it never expires")
	env := envelopeOf(t, a)
	assert.Equal(t, d.DLQID, env.DLQID)
	assert.Equal(t, "expire-1", env.MessageID)
	assert.True(t, d.RoutedToDlqAt.Equal(env.RoutedToDlqAt), "the envelope as it was dead-lettered")

	waitMovedBy(t, metricsURL, before, expired, 1)
}
