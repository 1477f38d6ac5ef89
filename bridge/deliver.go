package bridge

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

	"github.com/retry-scheduler/retry-scheduler/internal/deadletter"
	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/internal/tracing"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// handle processes one entry and reports the outcome to the loop. The results channel has
// room for every handler the loop allows in flight, so the send never blocks, even after the
// loop has returned.
func (s *session) handle(e *entry) {
	defer s.b.handlers.Done()
	s.results <- s.process(e)
}

// process handles one delivery inside its span (see startDeliverSpan). A delivery that
// waits out its first delay keeps its span open through the wait: one span from receipt to
// report.
func (s *session) process(e *entry) result {
	ctx, span := e.spanCtx, e.span
	if span == nil {
		ctx, span = s.b.startDeliverSpan(s.ctx, e.d)
	}
	r := s.deliver(ctx, span, e)
	if r.outcome == outcomeWaiting {
		e.spanCtx, e.span = ctx, span
		span.AddEvent("waiting out the first retry delay")
		return r
	}
	endDeliverSpan(span, r)
	return r
}

// deliver decodes the delivery and reports it to Temporal under ctx, the delivery span's
// context, so that the start or signal the report makes continues the message's trace.
func (s *session) deliver(spanCtx context.Context, span trace.Span, e *entry) result {
	b, d := s.b, e.d
	rep, done := s.report(e)
	if done != nil {
		return *done
	}
	if span.IsRecording() {
		span.SetAttributes(
			semconv.MessagingMessageID(rep.Message.MessageID),
			attrOriginalQueue.String(rep.Message.OriginalQueue),
			attrRetryCount.Int(rep.RetryCount),
		)
	}
	log := withCorrelationID(b.log.With("message_id", rep.Message.MessageID, "original_queue", rep.Message.OriginalQueue,
		"retry_count", rep.RetryCount), rep.Message.CorrelationID)

	var err error
	for {
		ctx, cancel := context.WithTimeout(spanCtx, b.cfg.ReportTimeout)
		err = b.reporter.Report(ctx, rep)
		cancel()
		if err == nil {
			break
		}
		span.RecordError(err)
		switch s.judge(err) {
		case failPermanent:
			return s.deadLetter(e, &PoisonError{
				Kind:          KindPoison,
				Reason:        "report rejected: " + err.Error(),
				OriginalQueue: rep.Message.OriginalQueue,
				MessageID:     rep.Message.MessageID,
			})
		case failStale:
			return s.stale(d, err)
		case failOutage:
			log.Warn("report failed; pausing with the delivery unacked until Temporal answers", "outcome", OutcomePaused, "error", err)
			return s.pause(e, fmt.Errorf("report: %w", err))
		}
		e.strikes++
		if e.strikes >= b.cfg.ReportTries {
			return s.deadLetter(e, &PoisonError{
				Kind:          KindPoison,
				Reason:        fmt.Sprintf("report failed %d times while Temporal answered other calls: %v", e.strikes, err),
				OriginalQueue: rep.Message.OriginalQueue,
				MessageID:     rep.Message.MessageID,
			})
		}
		wait := jitter(b.cfg.ReconnectDelay << (e.strikes - 1))
		log.Warn("report failed while Temporal answers; trying this message again", "try", e.strikes, "of", b.cfg.ReportTries, "in_ms", wait.Milliseconds(), "error", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return s.stale(d, err)
		}
	}
	r := s.conclude(d, true, OutcomeAccepted, nil)
	if r.outcome == OutcomeAccepted {
		b.metrics.reportAccepted(rep.Message.OriginalQueue)
		b.countBreakerFailure(rep)
		log.Debug("failure report accepted", "outcome", r.outcome, "source", rep.Source)
	} else {
		log.Warn("failure report accepted but delivery not acked: channel gone; the broker will redeliver it", "outcome", r.outcome)
	}
	return r
}

// report is e's failure report: decoded now, or before it waited out its first delay. A
// non-nil result ends the delivery here: poison, dead-lettered, or deferred to its due time.
func (s *session) report(e *entry) (message.FailureReport, *result) {
	if e.rep != nil {
		return *e.rep, nil // decoded before it waited out its first delay
	}
	rep, err := Decode(DeliveryFrom(e.d), s.b.cfg.Decode)
	if err != nil {
		var pe *PoisonError
		if !errors.As(err, &pe) {
			pe = &PoisonError{Kind: KindPoison, Reason: err.Error(), MessageID: e.d.MessageId}
		}
		r := s.deadLetter(e, pe)
		return rep, &r
	}
	if e.mayWait && s.b.cfg.Defer != nil {
		if wait := s.b.cfg.Defer(rep); wait > 0 {
			e.rep, e.due = &rep, time.Now().Add(wait)
			return rep, &result{outcome: outcomeWaiting, wait: e}
		}
	}
	return rep, nil
}

// Span attributes of the scheduler's own, beside the messaging ones.
const (
	attrOriginalQueue = attribute.Key("retry_scheduler.original_queue")
	attrRetryCount    = attribute.Key("retry_scheduler.retry_count")
	attrOutcome       = attribute.Key("retry_scheduler.outcome")
)

// startDeliverSpan starts the consumer span of one delivery, a child of the trace context in
// its headers (traceparent, tracestate), from the global tracer provider. While tracing is
// off the provider and propagator are no-ops: no attribute is built for a span that does not
// record.
func (b *Bridge) startDeliverSpan(ctx context.Context, d amqp.Delivery) (context.Context, trace.Span) {
	ctx = tracing.ExtractAMQP(ctx, d.Headers)
	ctx, span := otel.Tracer(tracerName).Start(ctx, "retry-scheduler.deliver "+b.cfg.Queue, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(
			semconv.MessagingSystemRabbitMQ,
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingDestinationName(b.cfg.Queue),
			semconv.MessagingMessageID(d.MessageId),
		)
	}
	return ctx, span
}

// endDeliverSpan records the delivery's outcome and ends its span. Any outcome but accepted
// (or waiting out its first delay, reported in a span of its own when due) is an error status: the delivery was dead-lettered, held or left to the broker. (Each failed
// report is an error event of the span already.)
func endDeliverSpan(span trace.Span, r result) {
	if span.IsRecording() {
		span.SetAttributes(attrOutcome.String(r.outcome))
		switch {
		case r.err != nil:
			span.SetStatus(codes.Error, r.err.Error())
		case r.outcome != OutcomeAccepted && r.outcome != outcomeWaiting:
			span.SetStatus(codes.Error, r.outcome)
		}
	}
	span.End()
}

// tracerName is the bridge's instrumentation scope.
const tracerName = "github.com/retry-scheduler/retry-scheduler/bridge"

// countBreakerFailure counts an accepted report of a failed retry towards its destination's
// breaker. Counted once the delivery is acked, so a redelivery after a failed ack counts it
// once, not twice. A counter that dates what it counts gets the republish the report
// answers (zero when the report does not say: dated at arrival).
func (b *Bridge) countBreakerFailure(rep message.FailureReport) {
	if b.cfg.Breakers == nil || rep.RetryCount < 1 || rep.Policy.Breaker.Disabled {
		return
	}
	if dated, ok := b.cfg.Breakers.(DatedBreakerCounter); ok {
		dated.FailedAt(rep.Message.OriginalQueue, rep.Policy.Breaker, rep.RepublishedAt)
		return
	}
	b.cfg.Breakers.Failed(rep.Message.OriginalQueue, rep.Policy.Breaker)
}

// DatedBreakerCounter is a BreakerCounter that dates each failure by the republish it
// answers (breaker.Counter is one): the breaker judges a failure that arrives late, behind
// an ingress backlog or a Temporal that lags, against the republishes of its own window.
// FailedAt takes a zero at for a report that does not say, and clamps a date from the
// report, which a producer wrote.
type DatedBreakerCounter interface {
	BreakerCounter
	FailedAt(queue string, settings policy.Breaker, at time.Time)
}

// reportFailure is what a failed report means; judge tells.
type reportFailure int

const (
	// failPermanent: no retry mends it (Permanent).
	failPermanent reportFailure = iota
	// failStale: the session is retired; the delivery can be neither acked nor held.
	failStale
	// failOutage: Temporal as a whole is unavailable; pause with the delivery unacked.
	failOutage
	// failMessage: Temporal answers; the failure is the message's own.
	failMessage
)

// judge classifies a failed report, for the report of a delivery and the start of a parked
// workflow alike.
func (s *session) judge(err error) reportFailure {
	switch {
	case IsPermanent(err):
		return failPermanent
	case s.ctx.Err() != nil:
		return failStale
	case !s.messageFault(err):
		return failOutage
	}
	return failMessage
}

// messageFault reports whether a failed report is the message's own: Temporal answers the
// Probe, and the error does not say Temporal is unavailable.
func (s *session) messageFault(err error) bool {
	if IsUnavailable(err) || s.b.cfg.Probe == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(s.ctx, probeTimeout)
	defer cancel()
	return s.b.cfg.Probe(ctx) == nil
}

// stale ends a delivery of a retired session (its connection is gone): it can be neither
// acked nor held, and the broker redelivers it.
func (s *session) stale(d amqp.Delivery, err error) result {
	return s.conclude(d, false, OutcomeDroppedStale, fmt.Errorf("report: %w", err))
}

// pause hands e back to the loop unsettled while the loop pauses: no ack, no requeue, so no
// delivery is spent.
func (s *session) pause(e *entry, err error) result {
	s.b.metrics.outcome(OutcomePaused)
	return result{outcome: OutcomePaused, err: err, paused: e}
}

// deadLetter publishes the poison envelope with a confirm, then parks the delivery as a dead
// RetryWorkflow (park.go), then acks. If the publish fails, or Temporal is unavailable for
// the parked workflow, the delivery is held (and the bridge probes), so a poison message is
// never dropped; a parked workflow Temporal refuses for good leaves the envelope alone.
func (s *session) deadLetter(e *entry, pe *PoisonError) result {
	b, d := s.b, e.d
	env := poisonEnvelope(d, pe, b.cfg.Decode, b.cfg.Decode.Now())
	env.Metadata.Service, env.Metadata.ServiceVersion = b.cfg.ServiceName, b.cfg.ServiceVersion
	env.WorkflowID = parkedWorkflowID(env, pe, b.cfg.Queue)
	log := withCorrelationID(b.log.With("message_id", env.MessageID, "original_queue", env.OriginalQueue, "reason", pe.Reason,
		"workflow_id", env.WorkflowID), env.CorrelationID)
	if !e.deadLettered {
		ctx, cancel := context.WithTimeout(s.ctx, b.cfg.ReportTimeout)
		ref, err := b.publishEnvelope(ctx, env)
		cancel()
		e.payloadRef = ref
		switch {
		case err == nil:
		case deadletter.IsRefused(err):
			// Publishing it again would be refused again: park it with the reason, and go on.
			b.metrics.deadLetterPublishFailed(b.cfg.DeadLetterQueue)
			log.Error("dead-letter envelope refused for good; the parked workflow records the delivery", "error", err)
			e.envelopeErr = err.Error()
		default:
			b.metrics.deadLetterPublishFailed(b.cfg.DeadLetterQueue)
			log.Error("dead-letter publish failed; pausing with the delivery unacked", "outcome", OutcomePaused, "error", err)
			return s.pause(e, fmt.Errorf("dead-letter %s message to %s: %w", pe.Kind, b.cfg.DeadLetterQueue, err))
		}
		e.deadLettered = true
	}
	rep := parkReport(env, pe, b.cfg.Queue, b.cfg.DeadLetterQueue, b.cfg.Decode, e.payloadRef, e.envelopeErr)
	if held, err := s.park(e, rep, log); held {
		log.Warn("parked workflow not started; pausing with the dead-lettered delivery unacked until Temporal answers", "outcome", OutcomePaused, "error", err)
		return s.pause(e, fmt.Errorf("park %s message: %w", pe.Kind, err))
	} else if err != nil && s.ctx.Err() != nil {
		return s.stale(d, err)
	}
	r := s.conclude(d, true, pe.Kind, nil)
	log.Warn("delivery dead-lettered", "outcome", r.outcome, "dead_letter_queue", b.cfg.DeadLetterQueue)
	return r
}

// withCorrelationID adds the message's correlation id to l's lines when it has one.
func withCorrelationID(l *slog.Logger, id string) *slog.Logger {
	if id == "" {
		return l
	}
	return l.With("correlation_id", id)
}

// conclude settles d and counts the outcome; a delivery that could not be settled is
// dropped_stale whatever was intended.
func (s *session) conclude(d amqp.Delivery, ack bool, outcome string, err error) result {
	if !s.settle(d, ack) {
		outcome = OutcomeDroppedStale
	}
	s.b.metrics.outcome(outcome)
	return result{outcome: outcome, err: err}
}
