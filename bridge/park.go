package bridge

import (
	"context"
	"log/slog"
	"unicode/utf8"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
	"github.com/retry-scheduler/retry-scheduler/message"
)

// maxParkedHeaderBytes bounds the headers of a poison delivery kept in its parked workflow;
// larger ones stay on the envelope only (Poison.HeadersDropped).
const maxParkedHeaderBytes = 32 << 10

// maxParkedReasonBytes bounds the decode error kept in the parked workflow.
const maxParkedReasonBytes = 8 << 10

// parkQueue is the original queue of a parked poison delivery (its OriginalQueue search
// attribute, the ops API's queue filter): the original queue when it could be parsed, else
// the ingress queue.
// An original queue that is itself the problem (too long for a Keyword search attribute, not
// UTF-8) is not used.
func parkQueue(pe *PoisonError, ingress string) string {
	if q := pe.OriginalQueue; q != "" && len(q) <= maxKeywordLen && utf8.ValidString(q) {
		return q
	}
	return ingress
}

// parkReport is the report that parks a dead-lettered poison or oversize delivery as a dead
// RetryWorkflow, from its envelope env: the raw bytes (at most message.MaxPoisonPayloadBytes),
// the decode error, and a destination that sends an operator's retry back to the ingress
// queue, where the bridge decodes the bytes again.
// A payload that left the envelope (ref) and an envelope the broker refused (envelopeErr) are
// recorded on the parked message, so that it says where the full bytes are.
func parkReport(env message.Envelope, pe *PoisonError, ingress, deadLetterQueue string, opts DecodeOptions, ref *message.PayloadRef, envelopeErr string) message.FailureReport {
	m := env.OriginalMessage
	m.OriginalQueue = parkQueue(pe, ingress)
	m.OriginalExchange, m.OriginalRoutingKey = "", ingress
	p := &message.Poison{
		Kind:         pe.Kind,
		Reason:       message.Truncate(pe.Reason, maxParkedReasonBytes),
		Size:         len(m.Payload),
		IngressQueue: ingress,
		DLQID:        env.DLQID,
		PayloadRef:   ref,
	}
	if envelopeErr != "" {
		p.EnvelopeError = message.Truncate(envelopeErr, maxParkedReasonBytes)
	}
	m.Payload, p.Truncated = message.PoisonPayload(m.Payload)
	if m.Headers != nil && tableSize(m.Headers) > maxParkedHeaderBytes {
		m.Headers, p.HeadersDropped = nil, true
	}
	pol, _, _ := opts.Resolver.Choose(policy.Origin{Queue: m.OriginalQueue}, "")
	return message.FailureReport{
		Message:         m,
		Failure:         policy.Failure{Reason: p.Reason, Category: string(policy.Unknown)},
		Policy:          pol,
		DeadLetterQueue: deadLetterQueue,
		Source:          SourcePoison,
		Service:         env.Metadata.Service,
		ServiceVersion:  env.Metadata.ServiceVersion,
		ReportedAt:      env.RoutedToDlqAt,
		Poison:          p,
	}
}

// park starts (or signals) the parked workflow of a dead-lettered poison delivery. It
// returns held=true when the delivery must be held because Temporal is unavailable; any
// other failure is logged, and the envelope alone stands for the delivery.
func (s *session) park(e *entry, rep message.FailureReport, log *slog.Logger) (held bool, err error) {
	b := s.b
	ctx, cancel := context.WithTimeout(s.ctx, b.cfg.ReportTimeout)
	err = b.reporter.Report(ctx, rep)
	cancel()
	if err == nil {
		return false, nil
	}
	switch s.judge(err) {
	case failOutage:
		return true, err
	case failPermanent:
		log.Error("parked workflow refused; the dead-letter envelope alone stands for the delivery", "error", err)
	case failMessage:
		log.Error("parked workflow not started while Temporal answers; the dead-letter envelope alone stands for the delivery", "error", err)
	}
	return false, err
}

// parkedWorkflowID is the workflow a poison delivery is parked in.
func parkedWorkflowID(env message.Envelope, pe *PoisonError, ingress string) string {
	return message.PoisonWorkflowID(ingress, parkQueue(pe, ingress), env.MessageID)
}
