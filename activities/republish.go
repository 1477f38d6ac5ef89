package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/temporal"

	"github.com/retry-scheduler/retry-scheduler/internal/broker"
	"github.com/retry-scheduler/retry-scheduler/internal/deadletter"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/internal/tracing"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// Republish puts the message back where it came from as retry in.Attempt: confirmed,
// persistent, with its original body, id, properties and allowed headers, plus x-retry-count
// and x-retry-key so consumers can drop duplicates.
// An unroutable destination is a non-retryable ErrTypeUnroutable error, a message that cannot
// be encoded or that the broker refuses a non-retryable ErrTypeUnpublishable one; any other
// publish failure is returned as is for Temporal to retry.
// Under a breaker (in.Breaker), a retry whose destination's breaker holds is not published
// (the result says Held) unless it was released; a confirmed one is counted towards it.
//
// The publish has a producer span, a child of the activity's (the Temporal interceptor's,
// when tracing is on), whose trace context replaces the traceparent the failed message
// carried: the retry continues the trace of the report. With tracing off the headers go out
// as they were stored.
func (a *Activities) Republish(ctx context.Context, in RepublishInput) (res RepublishResult, err error) {
	m := in.Message
	exchange, key := m.OriginalExchange, m.OriginalRoutingKey
	if key == "" {
		key = m.OriginalQueue
	}
	log := messageLogger(a.logger(), m).With("attempt", in.Attempt, "key", in.Key,
		"queue", m.OriginalQueue, "exchange", exchange, "routing_key", key)

	ctx, span := startRepublishSpan(ctx, in, exchange, key)
	defer func() { endRepublishSpan(span, res, err) }()

	if mode, held := a.holds(in); held {
		a.Metrics.retryExecuted(m.OriginalQueue, StatusHeld)
		return RepublishResult{Held: true, HeldBy: mode}, nil
	}

	// The stamp is taken before the publish, which the confirm may keep waiting: the breaker
	// counts the republish at its confirm (publishedAt), and a failure reported for it at
	// this stamp, in the same window bar a confirm that takes longer than a bucket.
	headers, err := republishHeaders(m.Headers, in.Attempt, in.Key, a.now())
	if err != nil {
		a.Metrics.retryExecuted(m.OriginalQueue, StatusFailed)
		log.Error("retry not republished", "outcome", "invalid-message", "error", err)
		return RepublishResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("republish message %q: %v", m.MessageID, err), ErrTypeInvalidMessage, err)
	}
	tracing.InjectAMQP(ctx, headers)
	p := m.Properties
	pub := amqp.Publishing{
		Headers:         headers,
		ContentType:     p.ContentType,
		ContentEncoding: p.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		Priority:        p.Priority,
		CorrelationId:   m.CorrelationID,
		ReplyTo:         p.ReplyTo,
		MessageId:       m.MessageID,
		Timestamp:       p.Timestamp,
		Type:            p.Type,
		AppId:           p.AppID,
		Body:            m.Payload,
	}

	// Checked here as well as in the broker's publisher: whatever Publisher carries it, a
	// message that cannot be encoded never reaches a connection.
	if err = broker.CheckPublishing(exchange, key, pub); err == nil {
		err = a.Publisher.Publish(ctx, exchange, key, true, pub)
	}
	publishedAt := a.now()
	if err != nil {
		if errors.Is(err, broker.ErrUnroutable) {
			a.Metrics.retryExecuted(m.OriginalQueue, StatusUnroutable)
			log.Error("retry not republished", "outcome", StatusUnroutable, "error", err)
			return RepublishResult{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("republish message %q: %v", m.MessageID, err), ErrTypeUnroutable, err)
		}
		if unpublishable(err) {
			a.Metrics.retryExecuted(m.OriginalQueue, StatusUnpublishable)
			log.Error("retry not republished", "outcome", StatusUnpublishable, "error", err)
			return RepublishResult{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("republish message %q: %v", m.MessageID, err), ErrTypeUnpublishable, err)
		}
		a.Metrics.retryExecuted(m.OriginalQueue, StatusFailed)
		log.Warn("retry not republished; will retry", "outcome", StatusFailed, "error", err)
		return RepublishResult{}, fmt.Errorf("republish message %q attempt %d: %w", m.MessageID, in.Attempt, err)
	}

	a.Metrics.retryExecuted(m.OriginalQueue, StatusSuccess)
	if in.Breaker != nil && a.Counter != nil {
		if dated, ok := a.Counter.(DatedBreakerCounter); ok {
			dated.RepublishedAt(m.OriginalQueue, *in.Breaker, publishedAt)
		} else {
			a.Counter.Republished(m.OriginalQueue, *in.Breaker)
		}
	}
	if in.ScheduledAt.IsZero() {
		log.Debug("retry republished", "outcome", StatusSuccess)
	} else {
		lateness := publishedAt.Sub(in.ScheduledAt)
		a.Metrics.observeLateness(lateness)
		log.Debug("retry republished", "outcome", StatusSuccess, "lateness_ms", lateness.Milliseconds())
	}
	return RepublishResult{PublishedAt: publishedAt}, nil
}

// DatedBreakerCounter is a BreakerCounter that dates each republish (breaker.Counter is
// one): by its confirm, so that the breaker places it in the window of the moment it went
// out, beside the failures reported for it (dated by its x-retry-republished-at), however
// late either reaches the breaker.
type DatedBreakerCounter interface {
	BreakerCounter
	RepublishedAt(queue string, settings policy.Breaker, at time.Time)
}

// Span attributes of the scheduler's own, beside the messaging ones.
const (
	attrOriginalQueue = attribute.Key("retry_scheduler.original_queue")
	attrAttempt       = attribute.Key("retry_scheduler.attempt")
	attrRetryKey      = attribute.Key("retry_scheduler.retry_key")
	attrHeldBy        = attribute.Key("retry_scheduler.held_by")
)

// tracerName is the activities' instrumentation scope.
const tracerName = "github.com/retry-scheduler/retry-scheduler/activities"

// startRepublishSpan starts the producer span of a republish, from the global tracer provider
// (a no-op while tracing is off: no attribute is built for a span that does not record).
// The destination is the exchange, "amq.default" for the default one, as RabbitMQ names it.
func startRepublishSpan(ctx context.Context, in RepublishInput, exchange, key string) (context.Context, trace.Span) {
	m := in.Message
	ctx, span := otel.Tracer(tracerName).Start(ctx, "retry-scheduler.republish "+m.OriginalQueue, trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		dest := exchange
		if dest == "" {
			dest = "amq.default"
		}
		span.SetAttributes(
			semconv.MessagingSystemRabbitMQ,
			semconv.MessagingOperationTypeSend,
			semconv.MessagingDestinationName(dest),
			semconv.MessagingRabbitMQDestinationRoutingKey(key),
			semconv.MessagingMessageID(m.MessageID),
			attrOriginalQueue.String(m.OriginalQueue),
			attrAttempt.Int(in.Attempt),
			attrRetryKey.String(in.Key),
		)
	}
	return ctx, span
}

// endRepublishSpan records a held retry or the error, and ends the span.
func endRepublishSpan(span trace.Span, res RepublishResult, err error) {
	if span.IsRecording() {
		if res.Held {
			span.SetAttributes(attrHeldBy.String(res.HeldBy))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// holds says whether the retry must wait for its destination's breaker, and the breaker's
// mode: only a retry under a breaker that was not released, and only with a gate.
func (a *Activities) holds(in RepublishInput) (string, bool) {
	if in.Breaker == nil || in.Released || a.Gate == nil {
		return "", false
	}
	return a.Gate.Holds(in.Message.OriginalQueue)
}

// DeadLetter publishes the envelope to in.Queue (see deadletter.Publish), with an expiration
// of DeadLetterTTL: the queue is a notification stream, the parked workflow the record. Every
// dead-letter queue is declared at start, so an unroutable publish is a misconfiguration:
// non-retryable ErrTypeUnroutable; one the publisher's check or the broker refuses is
// non-retryable ErrTypeUnpublishable; an envelope that cannot be published at all (no queue)
// is non-retryable ErrTypeInvalidMessage. Each failed publish counts in
// dead_letter_publish_failures_total.
func (a *Activities) DeadLetter(ctx context.Context, in DeadLetterInput) error {
	env := in.Envelope
	log := messageLogger(a.logger(), message.Message{MessageID: env.MessageID, CorrelationID: env.CorrelationID}).
		With("dlq_id", env.DLQID, "queue", env.OriginalQueue, "dead_letter_queue", in.Queue, "dead_reason", env.DeadReason)
	opts := deadletter.Options{AppID: a.ServiceName, TTL: a.DeadLetterTTL, Now: a.now, MaxBytes: a.DeadLetterMaxBytes}
	err := deadletter.Publish(ctx, a.Publisher, in.Queue, env, opts)
	if err == nil {
		a.Metrics.deadLettered(in.Queue, env.DeadReason)
		return nil
	}
	if !errors.Is(err, deadletter.ErrUnpublishable) {
		a.Metrics.deadLetterPublishFailed(in.Queue)
	}
	return envelopeError(log, "envelope not dead-lettered", err)
}

// ArchiveExpired publishes the envelope of a dead message whose retention ended to
// ExpiredArchiveQueue, without expiration (the archive is the last copy); nothing when no
// archive queue is set. Failures are classified as DeadLetter's.
func (a *Activities) ArchiveExpired(ctx context.Context, in ArchiveExpiredInput) (ArchiveExpiredResult, error) {
	queue := a.ExpiredArchiveQueue
	if queue == "" {
		return ArchiveExpiredResult{}, nil
	}
	env := in.Envelope
	log := messageLogger(a.logger(), message.Message{MessageID: env.MessageID, CorrelationID: env.CorrelationID}).
		With("dlq_id", env.DLQID, "queue", env.OriginalQueue, "archive_queue", queue)
	opts := deadletter.Options{AppID: a.ServiceName, Now: a.now, MaxBytes: a.DeadLetterMaxBytes}
	if err := deadletter.Publish(ctx, a.Publisher, queue, env, opts); err != nil {
		return ArchiveExpiredResult{}, envelopeError(log, "expired envelope not archived", err)
	}
	log.Info("expired envelope archived", "outcome", "archived")
	return ArchiveExpiredResult{Queue: queue}, nil
}

// envelopeError is the activity error of a failed envelope publish: non-retryable when no
// try can succeed (the envelope cannot be encoded, the broker refuses its content, no queue
// takes it), else the error itself, which the local activity retries.
func envelopeError(log *slog.Logger, msg string, err error) error {
	switch {
	case errors.Is(err, deadletter.ErrUnpublishable):
		log.Error(msg, "outcome", "invalid-message", "error", err)
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidMessage, err)
	case unpublishable(err):
		log.Error(msg, "outcome", StatusUnpublishable, "error", err)
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeUnpublishable, err)
	case errors.Is(err, broker.ErrUnroutable):
		log.Error(msg, "outcome", StatusUnroutable, "error", err)
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeUnroutable, err)
	}
	log.Warn(msg+"; will retry", "outcome", StatusFailed, "error", err)
	return err
}

// unpublishable says whether a publish failed for the message's own content: the publisher's
// check refused it before the wire, or the broker refused it by closing its channel.
func unpublishable(err error) bool {
	return errors.Is(err, broker.ErrUnpublishable) || errors.Is(err, broker.ErrRefused)
}
