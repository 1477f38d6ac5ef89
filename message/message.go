// Package message holds what travels between the bridge, the workflow and the activities:
// the failed message, a report of its failure, and the dead-letter envelope.
package message

import (
	"time"

	"github.com/retry-scheduler/retry-scheduler/internal/policy"
)

// Message is everything needed to put a failed message back where it came from.
// The bridge fills it from either ingress form; the workflow never interprets the payload.
type Message struct {
	// MessageID is the producer's id, copied into the AMQP message_id property on republish.
	MessageID string `json:"message_id"`
	// Payload is the original body, byte for byte.
	Payload []byte `json:"payload"`
	// OriginalQueue is the queue the message failed on; with the default exchange it is also the routing key.
	OriginalQueue string `json:"original_queue"`
	// OriginalExchange is where to republish; empty means the default exchange.
	OriginalExchange string `json:"original_exchange,omitempty"`
	// OriginalRoutingKey is the routing key to republish with; empty means OriginalQueue.
	OriginalRoutingKey string `json:"original_routing_key,omitempty"`
	// Headers are the original headers, already allow-listed by the bridge, with values as strings, numbers or booleans.
	Headers map[string]any `json:"headers,omitempty"`
	// Properties are the original AMQP basic properties worth keeping.
	Properties Properties `json:"properties"`
	// TenantID and CorrelationID travel into search attributes and the dead-letter envelope.
	TenantID      string `json:"tenant_id,omitempty"`
	CorrelationID string `json:"correlation_id,omitempty"`
	// EventType is the producer's name for what the message is (order.created, say): a
	// column and a filter for operators.
	EventType string `json:"event_type,omitempty"`
	// Producer is the AMQP user-id of the report, which RabbitMQ validated against the
	// publishing connection's user; empty when the report had none. It is recorded, never
	// copied to a republish (whose connection's user differs).
	Producer string `json:"producer,omitempty"`
}

// Properties are the AMQP basic properties copied on republish.
type Properties struct {
	ContentType     string `json:"content_type,omitempty"`
	ContentEncoding string `json:"content_encoding,omitempty"`
	Type            string `json:"type,omitempty"`
	AppID           string `json:"app_id,omitempty"`
	ReplyTo         string `json:"reply_to,omitempty"`
	Priority        uint8  `json:"priority,omitempty"`
	// Timestamp is the original message's timestamp, zero when it had none.
	Timestamp time.Time `json:"timestamp,omitzero"`
}

// FailureReport is one arrival of "this message failed": the signal-with-start input and the
// payload of the failure-report signal.
type FailureReport struct {
	Message Message `json:"message"`

	// RetryCount is how many retries the message has already had: 0 on its first failure.
	RetryCount int `json:"retry_count"`
	// RetryKey is the x-retry-key of the republish that failed, when the report carries it; it
	// tells a stale or duplicated report from a fresh one.
	RetryKey string `json:"retry_key,omitempty"`
	// MaxRetries, when above 0, overrides the policy's max retries for this message.
	MaxRetries int `json:"max_retries,omitempty"`

	// Failure describes the error; the policy package classifies it.
	Failure policy.Failure `json:"failure"`
	// ErrorType is the reporter's exception class and StackTrace its stack trace,
	// at most MaxErrorTypeBytes and MaxStackTraceBytes; the workflow keeps them on the attempt.
	ErrorType  string `json:"error_type,omitempty"`
	StackTrace string `json:"stack_trace,omitempty"`

	// Policy is the resolved policy (route, per-message override, defaults), chosen by the bridge
	// so that the workflow never reads configuration.
	Policy policy.Policy `json:"policy"`
	// DeadLetterQueue is where the envelope goes when retrying cannot help.
	DeadLetterQueue string `json:"dead_letter_queue"`
	// Notes are remarks from the bridge worth keeping in the history (an unknown policy name, say).
	Notes []string `json:"notes,omitempty"`

	// Source says which ingress form carried the report: "retry-message" or "dead-letter".
	Source string `json:"source,omitempty"`
	// Service and ServiceVersion name the reporter, for the envelope's metadata block.
	Service        string `json:"service,omitempty"`
	ServiceVersion string `json:"service_version,omitempty"`
	// ReportedAt is when the bridge received the report.
	ReportedAt time.Time `json:"reported_at"`
	// RepublishedAt is when the retry that failed was republished, as the report says (the
	// x-retry-republished-at header, or republished_at_ms); zero when it does not. The
	// bridge's alone: it dates the failure for the destination's breaker, which clamps it
	// (breaker.Counter), and it is not sent to the workflow.
	RepublishedAt time.Time `json:"-"`
	// Redelivered says the broker had delivered this report before (the AMQP redelivered
	// flag), and Digest identifies its bytes (the first 32 hex of the body's sha256): a report
	// redelivered with the bytes of one a run already applied is that report again.
	Redelivered bool   `json:"redelivered,omitempty"`
	Digest      string `json:"digest,omitempty"`

	// Poison, when set, says the delivery could not be decoded or carried (poison, oversize):
	// the report parks the message as dead at once, for an operator (see Poison).
	Poison *Poison `json:"poison,omitempty"`

	// Earlier is what the bridge found, reading the server's own record rather than
	// visibility, of the message's latest run when the report continues a count (RetryCount
	// ≥ 1) and no run took it as a signal: the closed run whose attempts the new run carries
	// over, or none. Nil: the bridge did not look (a bridge from before the field, or a
	// report for a running run), and a new run finds its earlier run through visibility.
	Earlier *EarlierRun `json:"earlier_run,omitempty"`
}

// EarlierRun names a report's earlier run (FailureReport.Earlier).
type EarlierRun struct {
	// RunID is the closed run's ID; empty when the message has no run (none was ever
	// started, or the last one's retention is over).
	RunID string `json:"run_id,omitempty"`
}

// Poison kinds: Poison.Kind and the dead reason of a parked poison message.
const (
	PoisonKindPoison   = "poison"
	PoisonKindOversize = "oversize"
)

// MaxPoisonPayloadBytes bounds the raw bytes of a poison or oversize delivery kept in its
// parked workflow; the dead-letter envelope on the queue keeps them all.
const MaxPoisonPayloadBytes = 64 << 10

// Poison describes a delivery the bridge could not turn into a report: it is dead-lettered
// (the envelope on the dead-letter queue holds the full bytes) and parked as a dead message,
// so that operators can list, resolve, discard or retry it like any dead message. The
// report's Message holds the raw bytes (at most MaxPoisonPayloadBytes) and routes a retry
// back to the ingress queue, where the bridge decodes the bytes again.
type Poison struct {
	// Kind is PoisonKindPoison or PoisonKindOversize.
	Kind string `json:"kind"`
	// Reason is the decode error.
	Reason string `json:"reason"`
	// Size is the length of the delivery's body in bytes.
	Size int `json:"size"`
	// Truncated says the Message's payload holds only the first MaxPoisonPayloadBytes of the
	// body: a retry would publish other bytes than were received, so it is refused; the
	// envelope (DLQID) on the dead-letter queue has them all.
	Truncated bool `json:"truncated,omitempty"`
	// HeadersDropped says the delivery's headers were too large to keep in the workflow (the
	// envelope has them).
	HeadersDropped bool `json:"headers_dropped,omitempty"`
	// IngressQueue is the queue the delivery arrived on, where a retry republishes it.
	IngressQueue string `json:"ingress_queue"`
	// DLQID is the dlqId of the envelope the bridge published.
	DLQID string `json:"dlq_id,omitempty"`
	// PayloadRef says where the full payload is when the envelope was too large to carry it:
	// a message of its own on the dead-letter queue.
	PayloadRef *PayloadRef `json:"payload_ref,omitempty"`
	// EnvelopeError says why the broker refused the envelope for good, when it did: then
	// this parked message is the delivery's only record (with PayloadRef, if that went).
	EnvelopeError string `json:"envelope_error,omitempty"`
}

// PoisonPayload is body cut to at most MaxPoisonPayloadBytes, and whether it was cut.
func PoisonPayload(body []byte) ([]byte, bool) {
	if len(body) <= MaxPoisonPayloadBytes {
		return body, false
	}
	return body[:MaxPoisonPayloadBytes:MaxPoisonPayloadBytes], true
}
